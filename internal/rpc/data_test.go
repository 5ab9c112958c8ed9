package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// dataHandler serves mData. The request's Target says what to do:
//
//	"echo"      reply "len:N" with the request's attachment, upper-cased
//	"fill:N:c"  reply with an attachment of N bytes c
//	"fail"      return an error (after preparing an attachment)
//	"size"      reply "len:N", no attachment
//	"block"     say so on dataBlocked, wait for the context, report it on block
//
// Every response attachment is a pooled buffer released after its write.
func (ts *testServer) dataHandler(ctx context.Context, req *weftpb.ReadlinkReply, data []byte) (*weftpb.ReadlinkReply, Attachment, error) {
	lend := func(b []byte) Attachment {
		return Attachment{Data: b, Release: func() { PutBuffer(b); ts.released.Add(1) }}
	}
	switch op := req.Target; {
	case op == "echo":
		out := GetBuffer(len(data))
		copy(out, bytes.ToUpper(data))
		return msg(fmt.Sprint("len:", len(data))), lend(out), nil
	case strings.HasPrefix(op, "fill:"):
		f := strings.SplitN(op, ":", 3)
		n, err := strconv.Atoi(f[1])
		if err != nil || len(f[2]) != 1 {
			return nil, Attachment{}, errs.New(errs.Invalid, "fill", "bad op %q", op)
		}
		out := GetBuffer(n)
		for i := range out {
			out[i] = f[2][0]
		}
		return msg("filled"), lend(out), nil
	case op == "block":
		ts.dataBlocked <- struct{}{}
		<-ctx.Done()
		ts.block <- ctx.Err()
		return nil, Attachment{}, ctx.Err()
	case op == "size":
		return msg(fmt.Sprint("len:", len(data))), Attachment{}, nil
	case op == "fail":
		return nil, lend(GetBuffer(10)), errs.New(errs.NoSpace, "data", "no room for %d bytes", len(data))
	}
	return nil, Attachment{}, errs.New(errs.Invalid, "data", "unknown op %q", req.Target)
}

func TestCallDataRoundTrip(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)
	for _, n := range []int{0, 1, 100, writeBufSize - 30, writeBufSize + 1, 4<<20 + 3} {
		data := bytes.Repeat([]byte("ab"), n/2+1)[:n]
		var resp weftpb.ReadlinkReply
		got, err := c.CallData(ctx, mData, msg("echo"), data, &resp)
		if err != nil || resp.Target != fmt.Sprint("len:", n) || !bytes.Equal(got, bytes.ToUpper(data)) {
			t.Fatalf("echo of %d bytes: %q, %d bytes back, %v", n, resp.Target, len(got), err)
		}
		if n == 0 && got != nil {
			t.Fatalf("empty attachment came back as %d bytes", len(got))
		}
		PutBuffer(got)
	}
	// A handler's error still releases the attachment it prepared.
	before := ts.released.Load()
	if _, err := c.CallData(ctx, mData, msg("fail"), []byte("x"), nil); !errs.Is(err, errs.NoSpace) {
		t.Fatalf("fail: %v; want NoSpace", err)
	}
	ts.waitReleased(t, before+1)
}

// TestPooledBuffersDoNotLeak sends attachments of shrinking and growing
// sizes both ways: each must arrive exactly, with no byte of an earlier,
// larger one in the reused buffers.
func TestPooledBuffersDoNotLeak(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)
	sizes := []int{3 << 20, 1 << 20, 5000, 4097, 4096, 100, 1, 2 << 20, 7}
	for i, n := range sizes {
		fill := byte('a' + i)
		// Request side: the server's reused buffer must hold exactly our bytes.
		data := bytes.Repeat([]byte{fill}, n)
		got, err := c.CallData(ctx, mData, msg("echo"), data, nil)
		if err != nil || !bytes.Equal(got, bytes.ToUpper(data)) {
			t.Fatalf("echo %d: %d bytes, %v", n, len(got), err)
		}
		PutBuffer(got) // our next response reuses it
		// Response side.
		got, err = c.CallData(ctx, mData, msg(fmt.Sprintf("fill:%d:%c", n, fill)), nil, nil)
		if err != nil || len(got) != n || bytes.Count(got, []byte{fill}) != n {
			t.Fatalf("fill %d: %d bytes (%d right), %v", n, len(got), bytes.Count(got, []byte{fill}), err)
		}
		PutBuffer(got)
	}
	ts.waitReleased(t, int64(2*len(sizes)))
}

// waitReleased waits until the server has released want response
// attachments in all. A server releases one after writing it, so its
// client may have the reply a moment before that.
func (ts *testServer) waitReleased(t *testing.T, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for ts.released.Load() < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := ts.released.Load(); got != want {
		t.Fatalf("released %d attachments; want %d", got, want)
	}
}

func TestGetBufferSizes(t *testing.T) {
	for _, n := range []int{1, 4095, 4096, 4097, 1 << 20, 4 << 20, 64 << 20} {
		b := GetBuffer(n)
		if len(b) != n || cap(b) < n || cap(b)&(cap(b)-1) != 0 {
			t.Errorf("GetBuffer(%d): len %d cap %d", n, len(b), cap(b))
		}
		PutBuffer(b)
	}
	if b := GetBuffer(64<<20 + 1); len(b) != 64<<20+1 {
		t.Errorf("oversized GetBuffer: len %d", len(b))
	}
	if GetBuffer(0) != nil {
		t.Error("GetBuffer(0) is not nil")
	}
	PutBuffer(make([]byte, 5000)) // not a pooled size: dropped, no panic
	PutBuffer(nil)
}

func TestCallOnDataMethodNeedsCallData(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)
	if err := c.Call(ctx, mData, msg("fill:10:x"), nil); !errs.Is(err, errs.Protocol) || !strings.Contains(err.Error(), "CallData") {
		t.Fatalf("Call of a method replying with data: %v; want Protocol naming CallData", err)
	}
	// A request attachment for a method that takes none is refused, and
	// the connection goes on.
	if _, err := c.CallData(ctx, mEcho, msg("x"), []byte("unwanted"), nil); !errs.Is(err, errs.Protocol) {
		t.Fatalf("attachment to a plain method: %v; want Protocol", err)
	}
	if got, err := echo(ctx, c, "after"); err != nil || got != "echo:after" {
		t.Fatalf("connection unusable: %q, %v", got, err)
	}
	// A plain method called with CallData and no data works as Call.
	var resp weftpb.ReadlinkReply
	if got, err := c.CallData(ctx, mEcho, msg("y"), nil, &resp); err != nil || got != nil || resp.Target != "echo:y" {
		t.Fatalf("CallData of a plain method: %q %v, %v", resp.Target, got, err)
	}
}

// TestConcurrentDataCalls mixes large attachments, small ones and plain
// calls on one connection: frames must never interleave.
func TestConcurrentDataCalls(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				n := []int{1 << 20, 10, 40 << 10, 0}[(g+i)%4]
				data := bytes.Repeat([]byte{byte('a' + g)}, n)
				binary.BigEndian.AppendUint32(data[:0], uint32(i)) // a few distinct bytes
				got, err := c.CallData(ctx, mData, msg("echo"), data, nil)
				if err != nil || !bytes.Equal(got, bytes.ToUpper(data)) {
					errc <- fmt.Errorf("caller %d call %d (%d bytes): %d back, %v", g, i, n, len(got), err)
					return
				}
				PutBuffer(got)
				if s, err := echo(ctx, c, fmt.Sprint(g, i)); err != nil || s != fmt.Sprint("echo:", g, i) {
					errc <- fmt.Errorf("echo: %q, %v", s, err)
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

func TestPeerCallData(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	p := NewPeer(ts.addr, DialOptions{})
	t.Cleanup(func() { p.Close() })
	got, err := p.CallData(testCtx(t), mData, msg("echo"), []byte("peer"), nil)
	if err != nil || string(got) != "PEER" {
		t.Fatalf("Peer.CallData: %q, %v", got, err)
	}
}

// TestLargestChunkFits sends a whole chunk of the largest chunk size with
// the default frame limit.
func TestLargestChunkFits(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{})
	var resp weftpb.ReadlinkReply
	if _, err := c.CallData(testCtx(t), mData, msg("size"), make([]byte, 64<<20), &resp); err != nil || resp.Target != fmt.Sprint("len:", 64<<20) {
		t.Fatalf("64 MiB attachment: %q, %v", resp.Target, err)
	}
}

func TestOversizedAttachmentIsRefusedBeforeSending(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	c := dialTest(t, ts.addr, DialOptions{MaxFrameSize: 1 << 10})
	ctx := testCtx(t)
	if _, err := c.CallData(ctx, mData, msg("echo"), make([]byte, 1<<10), nil); !errs.Is(err, errs.TooBig) {
		t.Fatalf("err = %v; want TooBig", err)
	}
	if _, err := echo(ctx, c, "small"); err != nil {
		t.Fatalf("connection unusable after a refused attachment: %v", err)
	}
}

func TestOversizedResponseAttachment(t *testing.T) {
	ts := startTestServer(t, ServerOptions{MaxFrameSize: 1 << 10})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)
	before := ts.released.Load()
	if _, err := c.CallData(ctx, mData, msg("fill:2000:x"), nil, nil); !errs.Is(err, errs.TooBig) {
		t.Fatalf("err = %v; want TooBig", err)
	}
	ts.waitReleased(t, before+1)
}
