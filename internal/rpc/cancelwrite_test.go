package rpc

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestEndedContextKeepsAFlowingWrite: a caller whose context ends as its
// frame is being written (the loser of a hedged read, canceled as the
// winner answers) does not cut that write while the peer reads it. The
// connection is shared: cutting it fails every other call in flight on
// it, and a client reading a stripe with two stores down then lacks a
// third unit (EIO; docs/design.md, "Wrong bytes on a degraded read after a
// truncate"). Only a write still going cutGrace after the caller gave up
// is cut (TestCancelReturnsPromptly covers a stuck one).
func TestEndedContextKeepsAFlowingWrite(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	// Another caller's call, in flight on the connection meanwhile.
	other := make(chan error, 1)
	go func() {
		_, err := c.CallData(testCtx(t), mData, msg("block"), []byte("x"), nil)
		other <- err
	}()
	select {
	case <-ts.dataBlocked:
	case <-time.After(5 * time.Second):
		t.Fatal("the other call never reached its handler")
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	data := bytes.Repeat([]byte("x"), 16<<20) // a write that takes a while, flowing
	h := header{typ: frameRequest, method: mData, id: c.nextID.Add(1), timeout: time.Second}
	bp, err := c.marshal(msg("size"), mData, data)
	if err != nil {
		t.Fatal(err)
	}
	werr := c.writeFrame(ended, &h, *bp, data)
	putBuf(bp)
	if c.isClosed() {
		t.Fatalf("a write whose caller's context had ended closed the connection (%v): the other call fails with %v", werr, <-other)
	}
	if got, err := echo(testCtx(t), c, "after"); err != nil || got != "echo:after" {
		t.Fatalf("a call after it: %q, %v", got, err)
	}
}
