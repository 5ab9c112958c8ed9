package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Test methods; numbers outside the real protocol's.
const (
	mEcho     uint16 = 9001 // replies "echo:" + target
	mGate     uint16 = 9002 // waits until the test opens the gate named by target
	mFail     uint16 = 9003 // returns errs.NotExist with a message
	mPanic    uint16 = 9004
	mDeadline uint16 = 9005 // reports the deadline it sees
	mBlock    uint16 = 9006 // blocks until its context ends, then reports why
	mNotify   uint16 = 9007 // one-way
	mCallback uint16 = 9008 // calls the client back with mEcho
	mData     uint16 = 9009 // HandleData: see dataHandler
)

func msg(s string) *weftpb.ReadlinkReply { return &weftpb.ReadlinkReply{Target: s} }

// syncBuffer is a log sink tests can read while servers write to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func testLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testServer is a server with the test methods and hooks into them.
type testServer struct {
	addr  string
	srv   *Server
	log   *syncBuffer
	gates sync.Map    // name -> chan struct{}
	block chan error  // mBlock reports its context's error here
	conns chan *Conn  // mCallback hands over its connection
	notes chan string // mNotify delivers here
	seen  sync.Map    // *Conn -> true: connections that made a request
	// released counts mData's response attachments given back after
	// their write.
	released atomic.Int64
	// dataBlocked hears from mData's "block" once it runs.
	dataBlocked chan struct{}
}

func (ts *testServer) gate(name string) chan struct{} {
	ch, _ := ts.gates.LoadOrStore(name, make(chan struct{}))
	return ch.(chan struct{})
}

func newTestMux(ts *testServer) *Mux {
	mux := NewMux()
	Handle(mux, mEcho, func(ctx context.Context, req *weftpb.ReadlinkReply) (*weftpb.ReadlinkReply, error) {
		ts.seen.Store(ConnFromContext(ctx), true)
		return msg("echo:" + req.Target), nil
	})
	Handle(mux, mGate, func(ctx context.Context, req *weftpb.ReadlinkReply) (*weftpb.ReadlinkReply, error) {
		select {
		case <-ts.gate(req.Target):
			return msg("opened:" + req.Target), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	Handle(mux, mFail, func(ctx context.Context, req *weftpb.ReadlinkReply) (*weftpb.Empty, error) {
		return nil, errs.New(errs.NotExist, "lookup", "no entry %q", req.Target)
	})
	Handle(mux, mPanic, func(ctx context.Context, req *weftpb.Empty) (*weftpb.Empty, error) {
		panic("handler bug")
	})
	Handle(mux, mDeadline, func(ctx context.Context, req *weftpb.Empty) (*weftpb.ReadlinkReply, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			return msg("none"), nil
		}
		return msg(time.Until(dl).String()), nil
	})
	Handle(mux, mBlock, func(ctx context.Context, req *weftpb.Empty) (*weftpb.Empty, error) {
		<-ctx.Done()
		ts.block <- ctx.Err()
		return nil, ctx.Err()
	})
	HandleOneWay(mux, mNotify, func(ctx context.Context, req *weftpb.ReadlinkReply) {
		ts.notes <- req.Target
	})
	HandleData(mux, mData, ts.dataHandler)
	Handle(mux, mCallback, func(ctx context.Context, req *weftpb.ReadlinkReply) (*weftpb.ReadlinkReply, error) {
		c := ConnFromContext(ctx)
		var resp weftpb.ReadlinkReply
		if err := c.Call(ctx, mEcho, req, &resp); err != nil {
			return nil, err
		}
		ts.conns <- c
		return msg("client said " + resp.Target), nil
	})
	return mux
}

// startTestServer starts a server with the test methods on 127.0.0.1.
func startTestServer(t testing.TB, opts ServerOptions) *testServer {
	t.Helper()
	ts := &testServer{
		log:   &syncBuffer{},
		block: make(chan error, 10),
		conns: make(chan *Conn, 10),
		notes: make(chan string, 10),

		dataBlocked: make(chan struct{}, 1),
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(ts.log)
	}
	ln, err := ListenPicked() // a test may start a server on the address again
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = ln.Addr().String()
	ts.srv = NewServer(newTestMux(ts), opts)
	served := make(chan error, 1)
	go func() { served <- ts.srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := ts.srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

func dialTest(t testing.TB, addr string, opts DialOptions) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// caller is what Conn and Peer have in common.
type caller interface {
	Call(ctx context.Context, method uint16, req, resp proto.Message) error
}

func echo(ctx context.Context, c caller, s string) (string, error) {
	var resp weftpb.ReadlinkReply
	err := c.Call(ctx, mEcho, msg(s), &resp)
	return resp.Target, err
}

func TestRoundTrip(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)

	got, err := echo(ctx, c, "hello")
	if err != nil || got != "echo:hello" {
		t.Fatalf("echo = %q, %v; want echo:hello", got, err)
	}
	// A nil response discards the reply.
	if err := c.Call(ctx, mEcho, msg("x"), nil); err != nil {
		t.Fatalf("call with nil resp: %v", err)
	}
	// A big message goes through in one frame.
	big := strings.Repeat("b", 3<<20)
	if got, err := echo(ctx, c, big); err != nil || got != "echo:"+big {
		t.Fatalf("big echo: len %d, %v", len(got), err)
	}
}

func TestHandlerErrorKeepsKindAndMessage(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	err := c.Call(testCtx(t), mFail, msg("foo"), &weftpb.Empty{})
	var e *errs.Error
	if !errors.As(err, &e) || e.Kind != errs.NotExist {
		t.Fatalf("err = %#v; want *errs.Error of kind NotExist", err)
	}
	want := errs.New(errs.NotExist, "lookup", "no entry %q", "foo").Error()
	if err.Error() != want {
		t.Fatalf("message %q; want %q", err.Error(), want)
	}
}

func TestUnknownMethod(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)
	if err := c.Call(ctx, 4242, msg("x"), nil); !errs.Is(err, errs.NotSupported) {
		t.Fatalf("unknown method: %v; want NotSupported", err)
	}
	// A one-way method called as a request is not served either.
	if err := c.Call(ctx, mNotify, msg("x"), nil); !errs.Is(err, errs.NotSupported) {
		t.Fatalf("one-way method as request: %v; want NotSupported", err)
	}
	if _, err := echo(ctx, c, "still"); err != nil {
		t.Fatalf("connection unusable after unknown method: %v", err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)
	const callers, calls = 32, 50
	var wg sync.WaitGroup
	errc := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			for i := range calls {
				s := fmt.Sprintf("%d/%d", g, i)
				got, err := echo(ctx, c, s)
				if err != nil || got != "echo:"+s {
					errc <- fmt.Errorf("echo %s = %q, %v", s, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func TestOutOfOrderResponses(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)
	type result struct {
		name string
		err  error
	}
	results := make(chan result, 2)
	for _, name := range []string{"first", "second"} {
		go func() {
			var resp weftpb.ReadlinkReply
			err := c.Call(ctx, mGate, msg(name), &resp)
			if err == nil && resp.Target != "opened:"+name {
				err = fmt.Errorf("got %q", resp.Target)
			}
			results <- result{name, err}
		}()
	}
	// Both requests are in flight; the second finishes first.
	close(ts.gate("second"))
	if r := <-results; r.name != "second" || r.err != nil {
		t.Fatalf("first completion: %+v; want second", r)
	}
	select {
	case r := <-results:
		t.Fatalf("%+v completed before its gate opened", r)
	case <-time.After(20 * time.Millisecond):
	}
	close(ts.gate("first"))
	if r := <-results; r.name != "first" || r.err != nil {
		t.Fatalf("second completion: %+v; want first", r)
	}
}

func TestDeadlineReachesHandler(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})

	// Without a deadline, CallTimeout is the deadline.
	var resp weftpb.ReadlinkReply
	if err := c.Call(context.Background(), mDeadline, &weftpb.Empty{}, &resp); err != nil {
		t.Fatal(err)
	}
	if left, err := time.ParseDuration(resp.Target); err != nil || left <= DefaultCallTimeout-time.Second || left > DefaultCallTimeout {
		t.Fatalf("without deadline: handler saw %q left; want about %v", resp.Target, DefaultCallTimeout)
	}
	unbounded := dialTest(t, ts.addr, DialOptions{CallTimeout: -1})
	if err := unbounded.Call(context.Background(), mDeadline, &weftpb.Empty{}, &resp); err != nil || resp.Target != "none" {
		t.Fatalf("without deadline or CallTimeout: %q, %v; want none", resp.Target, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Call(ctx, mDeadline, &weftpb.Empty{}, &resp); err != nil {
		t.Fatal(err)
	}
	left, err := time.ParseDuration(resp.Target)
	if err != nil || left <= 4*time.Second || left > 5*time.Second {
		t.Fatalf("handler saw %q left; want a little under 5s", resp.Target)
	}
}

func TestDeadlineExpires(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Call(ctx, mBlock, &weftpb.Empty{}, nil)
	if !errs.Is(err, errs.Timeout) {
		t.Fatalf("err = %v; want Timeout", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Call returned after %v", d)
	}
	select {
	case herr := <-ts.block:
		if !errors.Is(herr, context.DeadlineExceeded) && !errors.Is(herr, context.Canceled) {
			t.Fatalf("handler context ended with %v", herr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler context never ended")
	}
	// An already expired context fails without a round trip. (The server's
	// copy of the deadline may fire first and answer Timeout itself.)
	<-ctx.Done()
	if err := c.Call(ctx, mEcho, msg("late"), nil); !errs.Is(err, errs.Timeout) {
		t.Fatalf("expired ctx: %v; want Timeout", err)
	}
}

func TestCancelReachesHandler(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Call(ctx, mBlock, &weftpb.Empty{}, nil) }()
	time.Sleep(20 * time.Millisecond) // let the request reach the handler
	cancel()
	select {
	case err := <-errc:
		if !errs.Is(err, errs.Canceled) {
			t.Fatalf("err = %v; want Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Call did not return after cancel")
	}
	select {
	case herr := <-ts.block:
		// No deadline was set: only the cancel frame can have ended it.
		if !errors.Is(herr, context.Canceled) {
			t.Fatalf("handler context ended with %v; want Canceled", herr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancel never reached the handler")
	}
	if _, err := echo(testCtx(t), c, "after"); err != nil {
		t.Fatalf("connection unusable after cancel: %v", err)
	}
}

func TestOneWay(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)
	// Unknown one-way methods are dropped quietly.
	if err := c.Send(ctx, 4242, msg("lost")); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, mNotify, msg("ping")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ts.notes:
		if got != "ping" {
			t.Fatalf("got %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("one-way message never arrived")
	}
	if _, err := echo(ctx, c, "x"); err != nil {
		t.Fatal(err)
	}
}

func TestCallbackFromServer(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	clientMux := NewMux()
	notes := make(chan string, 1)
	Handle(clientMux, mEcho, func(ctx context.Context, req *weftpb.ReadlinkReply) (*weftpb.ReadlinkReply, error) {
		return msg("client:" + req.Target), nil
	})
	HandleOneWay(clientMux, mNotify, func(ctx context.Context, req *weftpb.ReadlinkReply) { notes <- req.Target })
	c := dialTest(t, ts.addr, DialOptions{Mux: clientMux})
	ctx := testCtx(t)

	// During a request: the handler calls the client back.
	var resp weftpb.ReadlinkReply
	if err := c.Call(ctx, mCallback, msg("hi"), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Target != "client said client:hi" {
		t.Fatalf("got %q", resp.Target)
	}
	// Later: the server kept the connection and calls again, and sends.
	sc := <-ts.conns
	if err := sc.Call(ctx, mEcho, msg("later"), &resp); err != nil || resp.Target != "client:later" {
		t.Fatalf("later callback: %q, %v", resp.Target, err)
	}
	if err := sc.Send(ctx, mNotify, msg("note")); err != nil {
		t.Fatal(err)
	}
	if got := <-notes; got != "note" {
		t.Fatalf("one-way callback got %q", got)
	}
	// A method the client does not serve.
	if err := sc.Call(ctx, mGate, msg("x"), nil); !errs.Is(err, errs.NotSupported) {
		t.Fatalf("unserved callback: %v; want NotSupported", err)
	}
}

func TestCallbackWithoutClientMux(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	err := c.Call(testCtx(t), mCallback, msg("hi"), nil)
	if !errs.Is(err, errs.NotSupported) {
		t.Fatalf("callback to a client without a Mux: %v; want NotSupported", err)
	}
}

func TestHandlerPanicIsRecovered(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)
	if err := c.Call(ctx, mPanic, &weftpb.Empty{}, nil); !errs.Is(err, errs.IO) {
		t.Fatalf("err = %v; want IO", err)
	}
	if _, err := echo(ctx, c, "alive"); err != nil {
		t.Fatalf("server unusable after a panic: %v", err)
	}
	if !strings.Contains(ts.log.String(), "handler panicked") {
		t.Fatalf("panic not logged; log:\n%s", ts.log)
	}
}

func TestServerCloseFailsPendingCalls(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	errc := make(chan error, 1)
	go func() { errc <- c.Call(context.Background(), mGate, msg("never"), nil) }()
	time.Sleep(20 * time.Millisecond)
	if err := ts.srv.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errs.Is(err, errs.Unavailable) {
			t.Fatalf("err = %v; want Unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pending call survived the server's close")
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection not done after the server closed")
	}
	if err := c.Call(context.Background(), mEcho, msg("x"), nil); !errs.Is(err, errs.Unavailable) {
		t.Fatalf("call on closed conn: %v; want Unavailable", err)
	}
	if err := c.Send(context.Background(), mNotify, msg("x")); !errs.Is(err, errs.Unavailable) {
		t.Fatalf("send on closed conn: %v; want Unavailable", err)
	}
}

func TestOversizedMessageIsRefusedBeforeSending(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{MaxFrameSize: 1 << 10})
	ctx := testCtx(t)
	if err := c.Call(ctx, mEcho, msg(strings.Repeat("x", 2<<10)), nil); !errs.Is(err, errs.TooBig) {
		t.Fatalf("err = %v; want TooBig", err)
	}
	if _, err := echo(ctx, c, "small"); err != nil {
		t.Fatalf("connection unusable after a refused message: %v", err)
	}
}
