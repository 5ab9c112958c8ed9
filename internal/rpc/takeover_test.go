package rpc

import (
	"context"
	"testing"
	"time"

	"github.com/weftfs/weft/proto/weftpb"
)

// TestOneWayReadWhileHandlersBlockAfterTakeover: a handler that blocks
// until a later frame of the same connection arrives (a meta server's
// change waiting for the lease release its client sends next) must not
// stop the connection's reading, also when it runs on a reader that took
// over from one still running a handler of its own. The reader that was
// taken over used to stop the takeover timer when its handler returned,
// and the timer was by then armed for the new reader's handler: that
// handler ran with no takeover to come, and the frames behind it waited
// until it returned (every make linz run stalled all three mounts for a
// lease term, 2 s, many times a minute).
//
// The takeover delay is long here (takeoverDelay below) so that the steps
// are ordered by the test, not by the scheduler: the first reader's
// handler returns well within the delay armed for the second's.
func TestOneWayReadWhileHandlersBlockAfterTakeover(t *testing.T) {
	const (
		mHold   uint16 = 9101 // signals entered, waits until the test opens its gate
		mNote   uint16 = 9102 // one-way
		delay          = 200 * time.Millisecond
		arrival        = time.Second // well above delay
	)
	entered := make(chan string, 4)
	gates := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	notes := make(chan string, 4)
	mux := NewMux()
	Handle(mux, mHold, func(ctx context.Context, req *weftpb.ReadlinkReply) (*weftpb.Empty, error) {
		entered <- req.Target
		select {
		case <-gates[req.Target]:
			return &weftpb.Empty{}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	HandleOneWay(mux, mNote, func(_ context.Context, req *weftpb.ReadlinkReply) { notes <- req.Target })

	ln, err := ListenPicked()
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(mux, ServerOptions{takeoverDelay: delay})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	c := dialTest(t, ln.Addr().String(), DialOptions{})
	ctx := testCtx(t)

	hold := func(name string) chan error {
		done := make(chan error, 1)
		go func() { done <- c.Call(ctx, mHold, msg(name), nil) }()
		if got := <-entered; got != name {
			t.Fatalf("handler %q entered; want %q", got, name)
		}
		return done
	}
	note := func(name string) {
		t.Helper()
		start := time.Now()
		if err := c.Send(ctx, mNote, msg(name)); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-notes:
			if got != name {
				t.Fatalf("note %q arrived; want %q", got, name)
			}
			t.Logf("note %s read after %v", name, time.Since(start))
		case <-time.After(arrival):
			t.Fatalf("note %s not read within %v while a handler blocks: the connection stopped reading", name, arrival)
		}
	}

	// a blocks on the first reader; a second one takes over and reads
	// note 1.
	doneA := hold("a")
	note("1")
	// b blocks on the second reader, which armed the timer for it; a
	// returns, and its reader retires.
	doneB := hold("b")
	close(gates["a"])
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	// A third reader must take over from b's and read note 2.
	note("2")
	close(gates["b"])
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
}
