package rpc

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/proto/weftpb"
)

// inFlight is how many of this side's calls await a response.
func (c *Conn) inFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.pending)
}

// Issue 12 item 2: every call has a bound. One whose context has no
// deadline gets CallTimeout, which also reaches the handler.
func TestCallWithoutDeadlineGetsCallTimeout(t *testing.T) {
	const bound = 200 * time.Millisecond
	ts := startTestServer(t, ServerOptions{})
	opts := DialOptions{CallTimeout: bound}
	p := NewPeer(ts.addr, opts)
	t.Cleanup(func() { p.Close() })
	for name, c := range map[string]caller{"conn": dialTest(t, ts.addr, opts), "peer": p} {
		start := time.Now()
		err := c.Call(context.Background(), mGate, msg("never"), &weftpb.ReadlinkReply{})
		if !errs.Is(err, errs.Timeout) {
			t.Errorf("%s: call that never ends: %v; want Timeout", name, err)
		}
		if d := time.Since(start); d < bound || d > 10*bound {
			t.Errorf("%s: returned after %v; want about %v", name, d, bound)
		}
		var resp weftpb.ReadlinkReply
		if err := c.Call(context.Background(), mDeadline, &weftpb.Empty{}, &resp); err != nil {
			t.Fatal(err)
		}
		if left, err := time.ParseDuration(resp.Target); err != nil || left <= 0 || left > bound {
			t.Errorf("%s: handler saw %q left; want at most %v", name, resp.Target, bound)
		}
	}
}

// The bound holds for a CallData whose write is stuck: the server stopped
// reading, and the keepalive is off.
func TestCallDataWithStuckWriteGetsCallTimeout(t *testing.T) {
	const bound = 200 * time.Millisecond
	addr := frozenServer(t)
	c := dialTest(t, addr, DialOptions{CallTimeout: bound, PeerTimeout: -1})
	start := time.Now()
	_, err := c.CallData(context.Background(), mData, msg("size"), bytes.Repeat([]byte("x"), 32<<20), nil)
	if !errs.Is(err, errs.Timeout) {
		t.Errorf("CallData to a stopped server: %v; want Timeout", err)
	}
	if d := time.Since(start); d > 10*bound {
		t.Errorf("returned after %v; want about %v", d, bound)
	}
}

// Canceling the context returns at once with Canceled, for calls waiting
// for a response, stuck in their write, or waiting behind a stuck write.
func TestCancelReturnsPromptly(t *testing.T) {
	addr := frozenServer(t)
	c := dialTest(t, addr, DialOptions{CallTimeout: -1, PeerTimeout: -1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 3)
	go func() { errc <- c.Call(ctx, mEcho, msg("x"), nil) }()
	waitfor.Until(t, 5*time.Second, "the first call", func() bool { return c.inFlight() == 1 })
	go func() {
		_, err := c.CallData(ctx, mData, msg("size"), bytes.Repeat([]byte("x"), 32<<20), nil)
		errc <- err
	}()
	waitfor.Until(t, 5*time.Second, "the stuck call", func() bool { return c.inFlight() == 2 })
	go func() { errc <- c.Call(ctx, mEcho, msg("y"), nil) }()
	waitfor.Until(t, 5*time.Second, "the call behind it", func() bool { return c.inFlight() == 3 })
	cancel()
	start := time.Now()
	for range 3 {
		select {
		case err := <-errc:
			if !errs.Is(err, errs.Canceled) {
				t.Errorf("canceled call: %v; want Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a canceled call did not return")
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("canceled calls returned after %v", d)
	}
}

// A canceled CallData sends a cancel frame that ends its handler's context.
func TestCancelReachesDataHandler(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.CallData(ctx, mData, msg("block"), bytes.Repeat([]byte("x"), 1<<20), nil)
		errc <- err
	}()
	select {
	case <-ts.dataBlocked:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the handler")
	}
	cancel()
	if err := <-errc; !errs.Is(err, errs.Canceled) {
		t.Fatalf("err = %v; want Canceled", err)
	}
	select {
	case herr := <-ts.block:
		if !errors.Is(herr, context.Canceled) {
			t.Fatalf("handler context ended with %v; want Canceled", herr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancel never reached the handler")
	}
}
