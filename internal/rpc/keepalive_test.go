package rpc

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/proto/weftpb"
)

// frozenServer accepts connections, answers the handshake as a current
// weft server does, and from then on neither reads nor writes, as a server
// stopped with SIGSTOP: the kernel keeps the connection open and takes
// bytes until its buffers fill, and nothing comes back.
func frozenServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- nc
			h := hello()
			nc.Write(h[:])
			io.ReadFull(nc, make([]byte, helloLen))
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case nc := <-accepted:
				nc.Close()
			default:
				return
			}
		}
	})
	return ln.Addr().String()
}

// Issue 12 item 2: calls in flight on a connection to a stopped server fail
// within PeerTimeout, so the caller can fail over, although their contexts
// allow much longer.
func TestSilentPeerIsDeclaredDead(t *testing.T) {
	const bound = 300 * time.Millisecond
	addr := frozenServer(t)
	for _, name := range []string{"conn", "peer"} {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t) // 10 s
			var cl interface {
				Call(context.Context, uint16, proto.Message, proto.Message) error
				CallData(context.Context, uint16, proto.Message, []byte, proto.Message) ([]byte, error)
			}
			if name == "conn" {
				cl = dialTest(t, addr, DialOptions{PeerTimeout: bound})
			} else {
				p := NewPeer(addr, DialOptions{PeerTimeout: bound})
				t.Cleanup(func() { p.Close() })
				cl = p
			}
			start := time.Now()
			errc := make(chan error, 2)
			go func() { errc <- cl.Call(ctx, mEcho, msg("x"), &weftpb.ReadlinkReply{}) }()
			// A write larger than the socket buffers blocks in the kernel.
			go func() {
				_, err := cl.CallData(ctx, mData, msg("size"), bytes.Repeat([]byte("x"), 32<<20), nil)
				errc <- err
			}()
			for range 2 {
				err := <-errc
				if !errs.Is(err, errs.Unavailable) && !errs.Is(err, errs.Timeout) {
					t.Errorf("call to a stopped server: %v; want Unavailable", err)
				}
			}
			if d := time.Since(start); d > 5*bound {
				t.Errorf("calls to a stopped server returned after %v; want about %v", d, bound)
			}
		})
	}
}

// A live server whose handler takes longer than PeerTimeout is not declared
// dead: the idle directions carry pings.
func TestSlowHandlerIsNotDeclaredDead(t *testing.T) {
	const bound = 300 * time.Millisecond
	ts := startTestServer(t, ServerOptions{PeerTimeout: bound})
	c := dialTest(t, ts.addr, DialOptions{PeerTimeout: bound})
	ctx := testCtx(t)
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, mGate, msg("slow"), &weftpb.ReadlinkReply{}) }()
	// Wait for many more pings than a PeerTimeout holds: the call runs
	// for several PeerTimeouts.
	waitfor.Until(t, 10*time.Second, "pings", func() bool { return c.pingsReceived() >= 20 })
	close(ts.gate("slow"))
	if err := <-done; err != nil {
		t.Fatalf("slow call: %v", err)
	}
}

// A server closes the connection of a client that pings in its handshake
// and then says nothing: a stopped client holds no server resources.
func TestServerClosesSilentClient(t *testing.T) {
	const bound = 200 * time.Millisecond
	ts := startTestServer(t, ServerOptions{PeerTimeout: bound})
	nc, _ := rawConn(t, ts.addr, helloBytes())
	start := time.Now()
	waitClosed(t, nc)
	if d := time.Since(start); d > 10*bound {
		t.Errorf("closed after %v; want about %v", d, bound)
	}
}

// A server that accepts connections but never answers the handshake (its
// process is stopped: the kernel still accepts) fails a dial within
// PeerTimeout, not the 10 s handshake bound, so that the caller can fail
// over.
func TestDialToStoppedServerFailsWithinPeerTimeout(t *testing.T) {
	const bound = 200 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // the kernel's backlog accepts; nobody answers
	p := NewPeer(ln.Addr().String(), DialOptions{PeerTimeout: bound})
	defer p.Close()
	start := time.Now()
	if _, err := echo(testCtx(t), p, "x"); !errs.Is(err, errs.Unavailable) {
		t.Errorf("call to a server that never answers the handshake: %v; want Unavailable", err)
	}
	if d := time.Since(start); d > 5*bound {
		t.Errorf("returned after %v; want about %v", d, bound)
	}
}

// On a Peer too, a call waiting behind a write stuck on a stopped server
// returns at its own deadline.
func TestPeerCallBehindStuckWriteReturnsAtItsDeadline(t *testing.T) {
	addr := frozenServer(t)
	p := NewPeer(addr, DialOptions{PeerTimeout: -1, CallTimeout: -1})
	defer p.Close()
	long, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck := make(chan error, 1)
	go func() {
		_, err := p.CallData(long, mData, msg("size"), bytes.Repeat([]byte("x"), 32<<20), nil)
		stuck <- err
	}()
	c, err := p.Conn(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 5*time.Second, "the stuck call", func() bool { return c.inFlight() == 1 })
	ctx, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	start := time.Now()
	if _, err := echo(ctx, p, "x"); !errs.Is(err, errs.Timeout) {
		t.Errorf("call behind a stuck write: %v; want Timeout", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("returned after %v", d)
	}
	cancel()
	if err := <-stuck; !errs.Is(err, errs.Canceled) {
		t.Errorf("stuck call after cancel: %v; want Canceled", err)
	}
}
