package rpc

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// startRawProxy starts a server that forwards every test method to the
// server at upstream with CallRaw, as internal/edge does.
func startRawProxy(t *testing.T, upstream string) string {
	t.Helper()
	up := NewPeer(upstream, DialOptions{})
	t.Cleanup(func() { up.Close() })
	mux := NewMux()
	for _, m := range []uint16{mEcho, mFail, mDeadline, mData} {
		HandleRaw(mux, m, func(ctx context.Context, msg, data []byte) ([]byte, Attachment, error) {
			resp, respData, err := up.CallRaw(ctx, m, msg, data)
			return resp, Attachment{Data: respData, Release: func() { PutBuffer(respData) }}, err
		})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(mux, ServerOptions{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	return ln.Addr().String()
}

func TestRawForwardsMessagesErrorsAndDeadlines(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, startRawProxy(t, ts.addr), DialOptions{})
	ctx := testCtx(t)

	if got, err := echo(ctx, c, "through"); err != nil || got != "echo:through" {
		t.Fatalf("echo through the proxy = %q, %v", got, err)
	}
	// The upstream error arrives with its kind and exact message.
	err := c.Call(ctx, mFail, msg("x"), &weftpb.Empty{})
	var e *errs.Error
	if !errs.Is(err, errs.NotExist) || !errorsAs(err, &e) || e.Error() != `lookup: no entry "x"` {
		t.Fatalf("fail through the proxy: %v; want NotExist with the upstream's message", err)
	}
	// The caller's deadline reaches the upstream handler.
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var resp weftpb.ReadlinkReply
	if err := c.Call(dctx, mDeadline, &weftpb.Empty{}, &resp); err != nil {
		t.Fatal(err)
	}
	d, err := time.ParseDuration(resp.Target)
	if err != nil || d > 3*time.Second || d < time.Second {
		t.Fatalf("upstream saw a deadline of %q (%v); want at most the caller's 3s", resp.Target, err)
	}
	// An empty message passes as empty.
	out, _, err := c.CallRaw(ctx, mEcho, nil, nil)
	if err != nil || !strings.Contains(string(out), "echo:") {
		t.Fatalf("raw echo of an empty message = %q, %v", out, err)
	}
}

func errorsAs(err error, e **errs.Error) bool {
	x, ok := err.(*errs.Error)
	if ok {
		*e = x
	}
	return ok
}
