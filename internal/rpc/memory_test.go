package rpc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"runtime"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/proto/weftpb"
)

// heapObjectBytes is the live heap after a collection.
func heapObjectBytes() int64 {
	runtime.GC()
	s := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	rtmetrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// residentBytes is the process's RSS (VmRSS in /proc/self/status).
func residentBytes(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// headerOnly sends, on a connection past its handshake, the start of a
// request frame that declares a body of n bytes: with data, the attachment
// length and the whole (empty) message, so that the attachment is next;
// without, nothing of the body.
func headerOnly(t *testing.T, nc net.Conn, n int, data bool) {
	t.Helper()
	h := header{typ: frameRequest, method: mData, id: 1, bodyLen: n}
	var b []byte
	if data {
		h.flags = flagData
		var hb [headerLen]byte
		encodeHeader(&hb, &h)
		b = binary.BigEndian.AppendUint32(hb[:], uint32(n-attachLenSize))
	} else {
		var hb [headerLen]byte
		encodeHeader(&hb, &h)
		b = hb[:]
	}
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
}

// Issue 12 item 8: connections that declare large bodies and send nothing
// more must not make the server allocate what they declared.
func TestHeaderOnlyFramesCostLittleMemory(t *testing.T) {
	const (
		conns    = 200
		declared = 16 << 20
		limit    = 100 << 20
	)
	ts := startTestServer(t, ServerOptions{})
	heap0, rss0 := heapObjectBytes(), residentBytes(t)
	for i := range conns {
		nc, _ := rawConn(t, ts.addr, helloBytes())
		nc.SetDeadline(time.Time{})
		headerOnly(t, nc, declared, i%2 == 0)
	}
	waitfor.Until(t, 10*time.Second, "the server to read every header", func() bool {
		return ts.srv.bodiesInProgress() == conns
	})
	heap, rss := heapObjectBytes(), residentBytes(t)
	t.Logf("%d connections declaring %d MiB each: heap %+d MiB, RSS %+d MiB",
		conns, declared>>20, (heap-heap0)>>20, (rss-rss0)>>20)
	if heap-heap0 > limit {
		t.Errorf("heap grew by %d MiB; want at most %d", (heap-heap0)>>20, limit>>20)
	}
	if rss-rss0 > limit {
		t.Errorf("RSS grew by %d MiB; want at most %d", (rss-rss0)>>20, limit>>20)
	}
}

func helloBytes() []byte { h := hello(); return h[:] }

// A frame whose body stops coming closes its connection after FrameTimeout.
func TestHalfSentFrameIsClosed(t *testing.T) {
	const bound = 200 * time.Millisecond
	for _, data := range []bool{false, true} {
		ts := startTestServer(t, ServerOptions{FrameTimeout: bound})
		nc, _ := rawConn(t, ts.addr, helloBytes())
		start := time.Now()
		headerOnly(t, nc, 1<<20, data)
		waitClosed(t, nc)
		if d := time.Since(start); d > 10*bound {
			t.Errorf("data=%v: closed after %v; want about %v", data, d, bound)
		}
		// The server goes on serving others.
		c := dialTest(t, ts.addr, DialOptions{})
		if got, err := echo(testCtx(t), c, "x"); err != nil || got != "echo:x" {
			t.Fatalf("echo after a half-sent frame: %q, %v", got, err)
		}
	}
}

// A connection that never says hello is closed after HandshakeTimeout.
func TestSilentConnectionIsClosedBeforeHandshake(t *testing.T) {
	ts := startTestServer(t, ServerOptions{HandshakeTimeout: 200 * time.Millisecond})
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	start := time.Now()
	waitClosed(t, nc)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("closed after %v", d)
	}
}

// Bodies beyond the budget, read as they arrive, still arrive whole: both a
// large attachment and a large message.
func TestBodiesBeyondTheBudgetArriveWhole(t *testing.T) {
	ts := startTestServer(t, ServerOptions{MaxBodyInFlight: 1})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)
	for _, n := range []int{growStep - 1, growStep + 1, 5<<20 + 7} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte('a' + i%26)
		}
		var resp weftpb.ReadlinkReply
		got, err := c.CallData(ctx, mData, msg("echo"), data, &resp)
		if err != nil || !bytes.Equal(got, bytes.ToUpper(data)) {
			t.Fatalf("echo of %d bytes: %d bytes back, %v", n, len(got), err)
		}
		PutBuffer(got)
		long := strings.Repeat("x", n)
		if got, err := echo(ctx, c, long); err != nil || got != "echo:"+long {
			t.Fatalf("echo of a %d-byte message: %d bytes back, %v", n, len(got), err)
		}
	}
}

func TestReadGrowing(t *testing.T) {
	for _, n := range []int{1, growStep, growStep + 1, 3*growStep + 5} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i * 7)
		}
		got, err := readGrowing(iotest.HalfReader(bytes.NewReader(src)), n, nil, GetBuffer, PutBuffer)
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("n=%d: %d bytes, %v", n, len(got), err)
		}
		got, err = readGrowing(bytes.NewReader(src[:n-1]), n, nil, GetBuffer, PutBuffer)
		if err == nil || len(got) != n-1 || !bytes.Equal(got, src[:n-1]) {
			t.Fatalf("n=%d cut short: %d bytes, %v", n, len(got), err)
		}
	}
}
