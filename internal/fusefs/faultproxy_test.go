package fusefs

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// faultProxy is a TCP proxy on 127.0.0.1 to one target that can stall:
// while stalled it forwards nothing in either direction on any connection
// (a chunk it has read waits, and TCP backpressure stops the sender), and
// connections stay open, as on a link that stopped delivering without a
// reset. Resume delivers what waited.
type faultProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     struct {
		sync.Mutex
		open   chan struct{} // closed while forwarding
		conns  []net.Conn
		closed bool
	}
}

// startFaultProxy starts a proxy to target, closed by t.Cleanup.
func startFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target}
	p.mu.open = make(chan struct{})
	close(p.mu.open)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) addr() string { return p.ln.Addr().String() }

// stall stops forwarding until resume.
func (p *faultProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.mu.open:
		p.mu.open = make(chan struct{})
	default:
	}
}

// resume forwards again, what waited first.
func (p *faultProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.mu.open:
	default:
		close(p.mu.open)
	}
}

// gate returns a channel that is closed while the proxy forwards.
func (p *faultProxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.open
}

func (p *faultProxy) close() {
	p.mu.Lock()
	p.mu.closed = true
	conns := p.mu.conns
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	p.resume() // unblock pipes waiting at the gate
	p.wg.Wait()
}

// track remembers c for close; false if the proxy is closed.
func (p *faultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return false
	}
	p.mu.conns = append(p.mu.conns, c)
	return true
}

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c) || !p.track(up) {
			c.Close()
			up.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst, each chunk only while the gate is open.
func (p *faultProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				src.Close()
			}
			return
		}
	}
}
