package rpc

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// recorder is an Observer that keeps what it saw.
type recorder struct {
	mu   sync.Mutex
	seen []string // method name and status label
}

func (r *recorder) Observe(method uint16, _ time.Duration, _, _ int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, weftpb.MethodName(method)+":"+StatusLabel(err))
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// localPeer returns a Peer that calls ts's server in this process.
func localPeerFor(t *testing.T, ts *testServer, opts DialOptions) *Peer {
	t.Helper()
	opts.Local = ts.srv
	p := NewPeer(ts.addr, opts)
	t.Cleanup(func() { p.Close() })
	return p
}

// TestLocalMatchesWire runs the same requests over a connection and in
// process: what the caller gets back must be the same.
func TestLocalMatchesWire(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	ctx := testCtx(t)
	wire := NewPeer(ts.addr, DialOptions{})
	t.Cleanup(func() { wire.Close() })
	local := localPeerFor(t, ts, DialOptions{})

	type outcome struct {
		target string
		data   []byte
		kind   errs.Kind
		msg    string
	}
	run := func(p *Peer, method uint16, req *weftpb.ReadlinkReply, data []byte, withData bool) outcome {
		var resp weftpb.ReadlinkReply
		var got []byte
		var err error
		if withData {
			got, err = p.CallData(ctx, method, req, data, &resp)
		} else {
			err = p.Call(ctx, method, req, &resp)
		}
		o := outcome{target: resp.Target, data: bytes.Clone(got)}
		PutBuffer(got)
		if err != nil {
			o.kind = errs.KindOf(err)
			o.msg = err.Error()
		}
		return o
	}
	big := bytes.Repeat([]byte("xy"), 3<<20)
	cases := []struct {
		name     string
		method   uint16
		req      string
		data     []byte
		withData bool
	}{
		{"echo", mEcho, "hi", nil, false},
		{"handler error", mFail, "nothing", nil, false},
		{"unknown method", 9999, "", nil, false},
		{"one-way method called", mNotify, "x", nil, true},
		{"data echo", mData, "echo", []byte("abc"), true},
		{"big data echo", mData, "echo", big, true},
		{"empty data", mData, "echo", []byte{}, true},
		{"data fill", mData, "fill:5:q", nil, true},
		{"data error", mData, "fail", []byte("x"), true},
		{"attachment without CallData", mData, "fill:5:q", nil, false},
		{"attachment to a method without", mEcho, "x", []byte("x"), true},
	}
	for _, tc := range cases {
		w := run(wire, tc.method, msg(tc.req), tc.data, tc.withData)
		l := run(local, tc.method, msg(tc.req), tc.data, tc.withData)
		if w.target != l.target || !bytes.Equal(w.data, l.data) || w.kind != l.kind || w.msg != l.msg {
			t.Errorf("%s: wire gave %q, %d bytes, %v %q; local gave %q, %d bytes, %v %q", tc.name,
				w.target, len(w.data), w.kind, w.msg, l.target, len(l.data), l.kind, l.msg)
		}
	}
}

func TestLocalPanicIsAnError(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	p := localPeerFor(t, ts, DialOptions{})
	err := p.Call(testCtx(t), mPanic, &weftpb.Empty{}, nil)
	if !errs.Is(err, errs.IO) {
		t.Fatalf("panicking handler: %v; want IO", err)
	}
	if !strings.Contains(ts.log.String(), "handler bug") {
		t.Errorf("panic not logged:\n%s", ts.log.String())
	}
	if _, err := echo(testCtx(t), p, "after"); err != nil {
		t.Fatalf("call after a panic: %v", err)
	}
}

func TestLocalDeadlineAndCancel(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	p := localPeerFor(t, ts, DialOptions{})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var resp weftpb.ReadlinkReply
	if err := p.Call(ctx, mDeadline, &weftpb.Empty{}, &resp); err != nil {
		t.Fatal(err)
	}
	if d, err := time.ParseDuration(resp.Target); err != nil || d <= 2*time.Second || d > 3*time.Second {
		t.Fatalf("handler saw deadline %q; want about 3s", resp.Target)
	}
	// Without a deadline, the Peer's CallTimeout bounds the call.
	if err := p.Call(context.Background(), mDeadline, &weftpb.Empty{}, &resp); err != nil {
		t.Fatal(err)
	}
	if d, err := time.ParseDuration(resp.Target); err != nil || d <= DefaultCallTimeout-time.Second || d > DefaultCallTimeout {
		t.Fatalf("no deadline: handler saw %q; want about %v", resp.Target, DefaultCallTimeout)
	}
	unbounded := localPeerFor(t, ts, DialOptions{CallTimeout: -1})
	if err := unbounded.Call(context.Background(), mDeadline, &weftpb.Empty{}, &resp); err != nil || resp.Target != "none" {
		t.Fatalf("no deadline, no CallTimeout: handler saw %q, %v", resp.Target, err)
	}

	// A caller that gives up cancels the handler.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	err := p.Call(ctx, mBlock, &weftpb.Empty{}, nil)
	if !errs.Is(err, errs.Canceled) {
		t.Fatalf("canceled call: %v; want Canceled", err)
	}
	select {
	case herr := <-ts.block:
		if herr != context.Canceled {
			t.Fatalf("handler's context ended with %v", herr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler still blocked after the caller gave up")
	}

	// A context that has already ended runs nothing.
	if err := p.Call(ctx, mEcho, msg("x"), nil); !errs.Is(err, errs.Canceled) {
		t.Fatalf("call with an ended context: %v", err)
	}
}

// TestLocalServerClose: Close cancels in-process handlers and waits for
// them; later calls fail as for a server that is gone.
func TestLocalServerClose(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	p := localPeerFor(t, ts, DialOptions{})
	errc := make(chan error, 1)
	go func() { errc <- p.Call(context.Background(), mBlock, &weftpb.Empty{}, nil) }()
	time.Sleep(20 * time.Millisecond)
	closed := make(chan struct{})
	go func() {
		ts.srv.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the in-process handler")
	}
	if herr := <-ts.block; herr != context.Canceled {
		t.Fatalf("handler's context ended with %v", herr)
	}
	if err := <-errc; err == nil {
		t.Fatal("blocked call returned no error when the server closed")
	}
	if _, err := echo(testCtx(t), p, "x"); !errs.Is(err, errs.Unavailable) {
		t.Fatalf("call after Close: %v; want Unavailable", err)
	}
	// A closed Peer fails the same way.
	q := localPeerFor(t, ts, DialOptions{})
	q.Close()
	if _, err := echo(testCtx(t), q, "x"); !errs.Is(err, errs.Unavailable) {
		t.Fatalf("call on a closed peer: %v; want Unavailable", err)
	}
}

func TestLocalFrameLimitAndOneWay(t *testing.T) {
	srvObs, callObs := &recorder{}, &recorder{}
	ts := startTestServer(t, ServerOptions{MaxFrameSize: 1 << 10, Observer: srvObs})
	p := localPeerFor(t, ts, DialOptions{Observer: callObs})
	ctx := testCtx(t)
	if _, err := echo(ctx, p, strings.Repeat("x", 2<<10)); !errs.Is(err, errs.TooBig) {
		t.Fatalf("oversized request: %v; want TooBig", err)
	}
	if _, err := p.CallData(ctx, mData, msg("fill:4096:z"), nil, nil); !errs.Is(err, errs.TooBig) {
		t.Fatalf("oversized response: %v; want TooBig", err)
	}
	if err := p.Send(ctx, mNotify, msg("note")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ts.notes:
		if got != "note" {
			t.Fatalf("one-way message delivered as %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("one-way message never delivered")
	}
	if _, err := echo(ctx, p, "ok"); err != nil {
		t.Fatal(err)
	}
	ts.srv.Close() // waits for the one-way handler's observation
	// Both ends observe: the oversized request never reached the server.
	if n := srvObs.count(); n != 3 {
		t.Errorf("server observed %d calls (%v); want 3", n, srvObs.seen)
	}
	if n := callObs.count(); n != 2 {
		t.Errorf("caller observed %d calls (%v); want 2 (one-way messages are not observed)", n, callObs.seen)
	}
}
