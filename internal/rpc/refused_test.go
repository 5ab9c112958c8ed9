package rpc

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// Issue 12 item 10: a refused connection (nothing listens there) is
// reported at once, as errs.Unavailable that Refused recognises, by Dial
// and by a Peer's call, however long the caller's context allows: the
// caller's retry policy decides what to do about it.
func TestRefusedConnectionFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	p := NewPeer(addr, DialOptions{})
	defer p.Close()
	for name, try := range map[string]func() error{
		"dial": func() error { _, err := Dial(ctx, addr, DialOptions{}); return err },
		"peer": func() error { _, err := echo(ctx, p, "x"); return err },
	} {
		start := time.Now()
		err := try()
		if !errs.Is(err, errs.Unavailable) || !Refused(err) {
			t.Errorf("%s: %v; want Unavailable, refused", name, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: refused after %v; want at once", name, d)
		}
	}
	// A dial that times out is not a refusal.
	if Refused(errs.New(errs.Timeout, "rpc dial", "timed out")) {
		t.Error("a timeout counts as refused")
	}
}
