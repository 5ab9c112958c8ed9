package rpc

import (
	"context"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/errs"
)

// Peer is a lazily (re)dialing connection to one address. The first call
// dials; a call after the connection died dials again. A Peer does not retry
// a request that may have reached the server (that is the caller's decision,
// as only it knows whether the request is idempotent), except that a request
// that found its connection already closed, and so never left, is sent on a
// fresh one. It is safe for concurrent use.
type Peer struct {
	addr  string
	opts  DialOptions
	local *localPeer // DialOptions.Local: calls run in this process

	mu struct {
		sync.Mutex
		closed bool
		conn   *Conn
		dial   *dialAttempt // in progress; others wait for it
	}
}

// dialAttempt is one dial shared by all the callers that need a connection
// while it runs.
type dialAttempt struct {
	done chan struct{}
	conn *Conn
	err  error
}

// NewPeer returns a Peer for addr. It does not dial.
func NewPeer(addr string, opts DialOptions) *Peer {
	p := &Peer{addr: addr, opts: opts}
	if opts.Local != nil {
		p.local = &localPeer{srv: opts.Local, obs: opts.Observer, id: opts.Identity, callTimeout: optTimeout(opts.CallTimeout, DefaultCallTimeout)}
	}
	return p
}

// isClosed reports whether Close was called.
func (p *Peer) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.closed
}

func (p *Peer) errClosed() error {
	return errs.New(errs.Unavailable, "rpc", "peer %s is closed", p.addr)
}

// Addr is the address the Peer dials.
func (p *Peer) Addr() string { return p.addr }

// Call is Conn.Call on the Peer's connection, dialing first if needed. A
// failure to dial is errs.Unavailable.
func (p *Peer) Call(ctx context.Context, method uint16, req, resp proto.Message) error {
	if p.local != nil {
		if p.isClosed() {
			return p.errClosed()
		}
		_, err := p.local.call(ctx, method, req, nil, resp, false)
		return err
	}
	for attempt := 0; ; attempt++ {
		c, err := p.Conn(ctx)
		if err != nil {
			return err
		}
		sent, _, err := c.call(ctx, method, req, nil, resp, false)
		if !sent && attempt == 0 && errs.Is(err, errs.Unavailable) {
			continue // the connection was already dead; Conn redials
		}
		return err
	}
}

// CallData is Conn.CallData on the Peer's connection, dialing first if
// needed.
func (p *Peer) CallData(ctx context.Context, method uint16, req proto.Message, data []byte, resp proto.Message) ([]byte, error) {
	if p.local != nil {
		if p.isClosed() {
			return nil, p.errClosed()
		}
		return p.local.call(ctx, method, req, data, resp, true)
	}
	for attempt := 0; ; attempt++ {
		c, err := p.Conn(ctx)
		if err != nil {
			return nil, err
		}
		sent, respData, err := c.call(ctx, method, req, data, resp, true)
		if !sent && attempt == 0 && errs.Is(err, errs.Unavailable) {
			continue // the connection was already dead; Conn redials
		}
		return respData, err
	}
}

// Send is Conn.Send on the Peer's connection, dialing first if needed.
func (p *Peer) Send(ctx context.Context, method uint16, req proto.Message) error {
	if p.local != nil {
		if p.isClosed() {
			return p.errClosed()
		}
		return p.local.send(ctx, method, req)
	}
	c, err := p.Conn(ctx)
	if err != nil {
		return err
	}
	return c.Send(ctx, method, req)
}

// Conn returns the current connection, dialing if there is none or it has
// closed. Concurrent callers share one dial. An in-process Peer has no
// connection: errs.NotSupported.
func (p *Peer) Conn(ctx context.Context) (*Conn, error) {
	if p.local != nil {
		return nil, errs.New(errs.NotSupported, "rpc", "peer %s is in this process and has no connection", p.addr)
	}
	p.mu.Lock()
	for {
		if p.mu.closed {
			p.mu.Unlock()
			return nil, p.errClosed()
		}
		if c := p.mu.conn; c != nil {
			if !c.isClosed() {
				p.mu.Unlock()
				return c, nil
			}
			p.mu.conn = nil
		}
		d := p.mu.dial
		if d == nil {
			break
		}
		p.mu.Unlock()
		select {
		case <-d.done:
		case <-ctx.Done():
			return nil, ctxError(ctx, "rpc dial "+p.addr)
		}
		if d.err != nil && !dialerGaveUp(d.err) {
			return nil, d.err
		}
		// Connected, or the dialing caller's context ended: look again.
		p.mu.Lock()
	}

	d := &dialAttempt{done: make(chan struct{})}
	p.mu.dial = d
	p.mu.Unlock()

	c, err := Dial(ctx, p.addr, p.opts)

	p.mu.Lock()
	p.mu.dial = nil
	if err == nil && p.mu.closed {
		c.Close()
		c, err = nil, p.errClosed()
	}
	if err == nil {
		p.mu.conn = c
	}
	p.mu.Unlock()
	d.conn, d.err = c, err
	close(d.done)
	return c, err
}

// dialerGaveUp reports whether a shared dial failed only because the context
// of the caller that ran it ended, which says nothing to the other waiters.
func dialerGaveUp(err error) bool {
	return errs.Is(err, errs.Canceled) || errs.Is(err, errs.Timeout)
}

// Close closes the connection, if any; later calls fail with
// errs.Unavailable.
func (p *Peer) Close() error {
	p.mu.Lock()
	p.mu.closed = true
	c := p.mu.conn
	p.mu.conn = nil
	p.mu.Unlock()
	if c != nil {
		return c.Close()
	}
	return nil
}
