package rpc

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

func TestPeerRedialsAfterServerRestart(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	p := NewPeer(ts.addr, DialOptions{})
	t.Cleanup(func() { p.Close() })
	ctx := testCtx(t)
	if _, err := echo(ctx, p, "one"); err != nil {
		t.Fatal(err)
	}

	if err := ts.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := echo(ctx, p, "down"); !errs.Is(err, errs.Unavailable) {
		t.Fatalf("call while the server is down: %v; want Unavailable", err)
	}

	// A new server on the same address.
	ln, err := net.Listen("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	ts2 := &testServer{log: &syncBuffer{}}
	srv := NewServer(newTestMux(ts2), ServerOptions{})
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	if got, err := echo(ctx, p, "two"); err != nil || got != "echo:two" {
		t.Fatalf("call after restart: %q, %v", got, err)
	}
}

func TestPeerSharesOneConnection(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	p := NewPeer(ts.addr, DialOptions{})
	t.Cleanup(func() { p.Close() })
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if _, err := echo(ctx, p, "x"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	n := 0
	ts.seen.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d connections used; want 1", n)
	}
}

func TestPeerDialFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := NewPeer(addr, DialOptions{})
	defer p.Close()
	if _, err := echo(testCtx(t), p, "x"); !errs.Is(err, errs.Unavailable) {
		t.Fatalf("call to a dead address: %v; want Unavailable", err)
	}
}

func TestPeerClosed(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	p := NewPeer(ts.addr, DialOptions{})
	ctx := testCtx(t)
	if _, err := echo(ctx, p, "x"); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := echo(ctx, p, "x"); !errs.Is(err, errs.Unavailable) {
		t.Fatalf("call on a closed peer: %v; want Unavailable", err)
	}
}

func TestPeerCallerCancelWhileWaitingForDial(t *testing.T) {
	// A server that accepts but never answers the handshake holds the
	// dial; a second caller whose context ends must not wait for it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, nc := range conns {
			nc.Close()
		}
	})
	p := NewPeer(ln.Addr().String(), DialOptions{})
	defer p.Close()
	slow, cancelSlow := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelSlow()
	go echo(slow, p, "holds the dial")
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := echo(ctx, p, "x"); !errs.Is(err, errs.Timeout) {
		t.Fatalf("err = %v; want Timeout", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("waited %v for someone else's dial", d)
	}
}
