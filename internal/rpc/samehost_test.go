package rpc

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weftfs/weft/internal/errs"
)

// sameHostRefuse is the refuse function of the same-host test servers: it
// names the kind of the reason, so tests can tell refusals apart.
func sameHostRefuse(err error) proto.Message {
	return wrapperspb.String("refused: " + errs.KindOf(err).String() + ": " + err.Error())
}

// refusedPrefix is how sameHostRefuse's reply for a reason of kind k begins.
func refusedPrefix(k errs.Kind) string { return "refused: " + k.String() + ": " }

// sameHostPwrite is a handler that decodes a StringValue request, writes its
// value at offset 0 of the descriptor and replies "done".
func sameHostPwrite(msg []byte, fd int, _ PeerCred) proto.Message {
	var req wrapperspb.StringValue
	if err := proto.Unmarshal(msg, &req); err != nil {
		return wrapperspb.String("bad request: " + err.Error())
	}
	if _, err := unix.Pwrite(fd, []byte(req.GetValue()), 0); err != nil {
		return wrapperspb.String("pwrite: " + err.Error())
	}
	return wrapperspb.String("done")
}

type sameHostTest struct {
	addr string // the TCP address the same-host path belongs to
	name string // SameHostName(addr)
	srv  *SameHostServer
	log  *syncBuffer
}

// startSameHost serves handle on the same-host path of a fresh TCP address
// on 127.0.0.1; the TCP listener stays open, unserved, to keep the address
// (and so the socket name) this test's own. Cleanup closes the server, and
// fails the test if that takes more than a few seconds.
func startSameHost(t *testing.T, handle SameHostHandler) *sameHostTest {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	st := &sameHostTest{addr: ln.Addr().String(), log: &syncBuffer{}}
	st.name = SameHostName(st.addr)
	st.srv, err = ServeSameHost(st.name, handle, sameHostRefuse, testLogger(st.log))
	if err != nil {
		t.Fatalf("ServeSameHost: %v", err)
	}
	t.Cleanup(func() { closeSameHostWithin(t, st.srv, 5*time.Second) })
	return st
}

// closeSameHostWithin closes s and fails the test if Close takes longer than
// d or returns an error other than the listener's being closed already.
func closeSameHostWithin(t *testing.T, s *SameHostServer, d time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil && !strings.Contains(err.Error(), "use of closed network connection") {
			t.Errorf("SameHostServer.Close: %v", err)
		}
	case <-time.After(d):
		t.Errorf("SameHostServer.Close did not return within %v", d)
	}
}

// dialSameHostTest dials the same-host path of addr; cleanup closes it.
func dialSameHostTest(t *testing.T, addr string) *SameHostConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialSameHost(ctx, addr)
	if err != nil {
		t.Fatalf("DialSameHost(%s): %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// tempFile creates an empty file in the test's temporary directory, open for
// reading and writing; cleanup closes it.
func tempFile(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// sameHostCall makes one call with a StringValue request and reply.
func sameHostCall(ctx context.Context, c *SameHostConn, req string, f *os.File) (string, error) {
	var resp wrapperspb.StringValue
	if err := c.Call(ctx, wrapperspb.String(req), f.Fd(), &resp); err != nil {
		return "", err
	}
	return resp.GetValue(), nil
}

// rawSameHost sends msg with the descriptors fds on a connection of its own
// to the socket name, bypassing SameHostConn, and returns the decoded reply.
func rawSameHost(t *testing.T, name string, msg []byte, fds ...int) string {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		t.Fatalf("dial %s: %v", name, err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.WriteMsgUnix(msg, oob, nil)
	if err != nil || n != len(msg) || oobn != len(oob) {
		t.Fatalf("send: %d of %d bytes, %d of %d control bytes, %v", n, len(msg), oobn, len(oob), err)
	}
	buf := make([]byte, 2*maxSameHostMessage)
	n, err = c.Read(buf)
	if err != nil {
		t.Fatalf("read reply: %v", err)
	}
	if n == 0 || buf[0] != sameHostVersion {
		t.Fatalf("reply of %d bytes without the version byte", n)
	}
	var resp wrapperspb.StringValue
	if err := proto.Unmarshal(buf[1:n], &resp); err != nil {
		t.Fatalf("decode reply: %v", err)
	}
	return resp.GetValue()
}

func readFileString(t *testing.T, f *os.File) string {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSameHostRoundTrip(t *testing.T) {
	st := startSameHost(t, sameHostPwrite)
	c := dialSameHostTest(t, st.addr)
	ctx := testCtx(t)
	for i, body := range []string{"first", "second request", "3"} {
		f := tempFile(t, "f")
		got, err := sameHostCall(ctx, c, body, f)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got != "done" {
			t.Fatalf("call %d: reply %q, want %q", i, got, "done")
		}
		if content := readFileString(t, f); content != body {
			t.Fatalf("call %d: file holds %q, want %q", i, content, body)
		}
	}
	// The same file again: the handler writes through the descriptor the
	// client sent, not a copy.
	f := tempFile(t, "again")
	for _, body := range []string{"aaaa", "bb"} {
		if got, err := sameHostCall(ctx, c, body, f); err != nil || got != "done" {
			t.Fatalf("call %q: %q, %v", body, got, err)
		}
	}
	if content := readFileString(t, f); content != "bbaa" {
		t.Fatalf("file holds %q, want %q", content, "bbaa")
	}
}

func TestSameHostRefusals(t *testing.T) {
	var handled atomic.Int64
	st := startSameHost(t, func(msg []byte, fd int, _ PeerCred) proto.Message {
		handled.Add(1)
		return sameHostPwrite(msg, fd, PeerCred{})
	})
	f1, f2 := tempFile(t, "one"), tempFile(t, "two")
	fd1, fd2 := int(f1.Fd()), int(f2.Fd())
	req, err := proto.MarshalOptions{}.MarshalAppend([]byte{sameHostVersion}, wrapperspb.String("must not be written"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		msg  []byte
		fds  []int
		want string // in the reply, after the prefix
	}{
		{"no descriptor", req, nil, "want one file descriptor, got 0"},
		{"two descriptors", req, []int{fd1, fd2}, "want one file descriptor, got 2"},
		{"too many descriptors", req, []int{fd1, fd2, fd1, fd2, fd1}, "cut short"},
		{"message too long", make([]byte, maxSameHostMessage+1), []int{fd1}, "cut short"},
		{"no version byte", req[1:], []int{fd1}, "not a version 1 packet"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			got := rawSameHost(t, st.name, tc.msg, tc.fds...)
			if !strings.HasPrefix(got, refusedPrefix(errs.Protocol)) || !strings.Contains(got, tc.want) {
				t.Fatalf("reply %q; want a protocol refusal mentioning %q", got, tc.want)
			}
		})
	}
	if n := handled.Load(); n != 0 {
		t.Fatalf("handler ran %d times for refused requests", n)
	}
	for _, f := range []*os.File{f1, f2} {
		if content := readFileString(t, f); content != "" {
			t.Fatalf("%s written by a refused request: %q", f.Name(), content)
		}
	}

	// The server goes on serving, and the client's descriptors are still
	// open and usable.
	c := dialSameHostTest(t, st.addr)
	if got, err := sameHostCall(testCtx(t), c, "after", f1); err != nil || got != "done" {
		t.Fatalf("call after refusals: %q, %v", got, err)
	}
	if content := readFileString(t, f1); content != "after" {
		t.Fatalf("file holds %q, want %q", content, "after")
	}
	// A refused request does not end its connection either.
	if got := rawSameHost(t, st.name, req); !strings.HasPrefix(got, refusedPrefix(errs.Protocol)) {
		t.Fatalf("reply %q; want a refusal", got)
	}
}

func TestSameHostRefusalKeepsConnection(t *testing.T) {
	st := startSameHost(t, sameHostPwrite)
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: st.name, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	f := tempFile(t, "f")
	req, err := proto.MarshalOptions{}.MarshalAppend([]byte{sameHostVersion}, wrapperspb.String("kept"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, maxSameHostMessage)
	for i, oob := range [][]byte{nil, unix.UnixRights(int(f.Fd()))} {
		if _, _, err := c.WriteMsgUnix(req, oob, nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		var resp wrapperspb.StringValue
		if err := proto.Unmarshal(buf[1:n], &resp); err != nil {
			t.Fatal(err)
		}
		want := "done"
		if oob == nil {
			want = refusedPrefix(errs.Protocol)
		}
		if !strings.HasPrefix(resp.GetValue(), want) {
			t.Fatalf("reply %d: %q, want %q...", i, resp.GetValue(), want)
		}
	}
	if content := readFileString(t, f); content != "kept" {
		t.Fatalf("file holds %q, want %q", content, "kept")
	}
}

func TestSameHostHandlerPanic(t *testing.T) {
	st := startSameHost(t, func(msg []byte, fd int, _ PeerCred) proto.Message {
		var req wrapperspb.StringValue
		if err := proto.Unmarshal(msg, &req); err == nil && req.GetValue() == "panic" {
			panic("same-host handler bug")
		}
		return sameHostPwrite(msg, fd, PeerCred{})
	})
	c := dialSameHostTest(t, st.addr)
	ctx := testCtx(t)
	f := tempFile(t, "f")
	got, err := sameHostCall(ctx, c, "panic", f)
	if err != nil {
		t.Fatalf("call that panics: %v", err)
	}
	if !strings.HasPrefix(got, refusedPrefix(errs.IO)) {
		t.Fatalf("reply %q; want an IO refusal", got)
	}
	if !strings.Contains(st.log.String(), "same-host handler bug") {
		t.Errorf("panic not logged; log:\n%s", st.log.String())
	}
	// Same connection, then a new one.
	if got, err := sameHostCall(ctx, c, "after panic", f); err != nil || got != "done" {
		t.Fatalf("call after the panic: %q, %v", got, err)
	}
	c2 := dialSameHostTest(t, st.addr)
	if got, err := sameHostCall(ctx, c2, "new conn ok", f); err != nil || got != "done" {
		t.Fatalf("call on a new connection after the panic: %q, %v", got, err)
	}
	// As long as "after panic", so it overwrites it whole.
	if content := readFileString(t, f); content != "new conn ok" {
		t.Fatalf("file holds %q, want %q", content, "new conn ok")
	}
}

// blockingSameHost starts a server whose handler signals on entered and then
// blocks until the test ends.
func blockingSameHost(t *testing.T) (st *sameHostTest, entered chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	entered = make(chan struct{}, 10)
	st = startSameHost(t, func(msg []byte, fd int, _ PeerCred) proto.Message {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		return wrapperspb.String("released")
	})
	// Registered after startSameHost's cleanup, so it runs first and Close
	// does not wait on a blocked handler.
	t.Cleanup(func() { close(release) })
	return st, entered
}

func TestSameHostDeadline(t *testing.T) {
	st, entered := blockingSameHost(t)
	f := tempFile(t, "f")
	// Several calls at once, each on its own connection with its own 100ms
	// deadline: how a call ends past its deadline must not depend on
	// timing.
	const calls = 16
	conns := make([]*SameHostConn, calls)
	for i := range conns {
		conns[i] = dialSameHostTest(t, st.addr)
	}
	type result struct {
		err     error
		elapsed time.Duration
	}
	results := make(chan result, calls)
	for _, c := range conns {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := sameHostCall(ctx, c, "block", f)
			results <- result{err, time.Since(start)}
		}()
	}
	timeout := time.After(5 * time.Second)
	for range calls {
		select {
		case r := <-results:
			if !errs.Is(r.err, errs.Timeout) {
				t.Errorf("call past its deadline: %v (kind %v); want Timeout", r.err, errs.KindOf(r.err))
			}
			if r.elapsed > 3*time.Second {
				t.Errorf("call returned after %v, deadline was 100ms", r.elapsed)
			}
		case <-timeout:
			t.Fatal("calls with a 100ms deadline still running after 5s")
		}
	}
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler never ran")
	}
}

func TestSameHostCancel(t *testing.T) {
	st, entered := blockingSameHost(t)
	c := dialSameHostTest(t, st.addr)
	f := tempFile(t, "f")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The call's own bound, should cancellation not end it.
	ctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	go func() {
		select {
		case <-entered:
			cancel()
		case <-time.After(5 * time.Second):
		}
	}()
	start := time.Now()
	got, err := sameHostCall(ctx, c, "block", f)
	if !errs.Is(err, errs.Canceled) {
		t.Fatalf("canceled call: %q, %v (kind %v); want Canceled", got, err, errs.KindOf(err))
	}
	if elapsed := time.Since(start); elapsed > 6*time.Second {
		t.Fatalf("canceled call returned after %v", elapsed)
	}
}

func TestSameHostDialUnavailable(t *testing.T) {
	// A TCP address of this test's with no same-host path beside it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ctx := testCtx(t)
	for _, addr := range []string{
		ln.Addr().String(),
		"0.0.0.0:1234",
		"[::]:1234",
		":1234",
		"not an address",
		"127.0.0.1", // no port
	} {
		c, err := DialSameHost(ctx, addr)
		if err == nil {
			c.Close()
			t.Errorf("DialSameHost(%q) succeeded; want Unavailable", addr)
			continue
		}
		if !errs.Is(err, errs.Unavailable) {
			t.Errorf("DialSameHost(%q): %v (kind %v); want Unavailable", addr, err, errs.KindOf(err))
		}
	}
}

func TestSameHostDialResolvesAddress(t *testing.T) {
	// The server's name comes from the listener's address; a client may
	// spell the address differently and still reach it.
	st := startSameHost(t, sameHostPwrite)
	_, port, err := net.SplitHostPort(st.addr)
	if err != nil {
		t.Fatal(err)
	}
	alias := net.JoinHostPort("localhost", port)
	if a, err := net.ResolveTCPAddr("tcp", alias); err != nil || a.String() != st.addr {
		t.Skipf("%s resolves to %v (%v), not %s", alias, a, err, st.addr)
	}
	c := dialSameHostTest(t, alias)
	if got, err := sameHostCall(testCtx(t), c, "x", tempFile(t, "f")); err != nil || got != "done" {
		t.Fatalf("call: %q, %v", got, err)
	}
}

func TestSameHostClose(t *testing.T) {
	st := startSameHost(t, sameHostPwrite)
	c := dialSameHostTest(t, st.addr)
	ctx := testCtx(t)
	f := tempFile(t, "f")
	// One call first, so the server has taken the connection and waits on
	// it for the next request.
	if got, err := sameHostCall(ctx, c, "before", f); err != nil || got != "done" {
		t.Fatalf("call before Close: %q, %v", got, err)
	}
	start := time.Now()
	closeSameHostWithin(t, st.srv, 2*time.Second)
	t.Logf("Close took %v", time.Since(start))

	if got, err := sameHostCall(ctx, c, "after", f); err == nil {
		t.Fatalf("call after Close succeeded: %q", got)
	} else {
		t.Logf("call after Close: %v (kind %v)", err, errs.KindOf(err))
	}
	if content := readFileString(t, f); content != "before" {
		t.Fatalf("file holds %q, want %q", content, "before")
	}
	// The name is free again: nobody answers.
	if c2, err := DialSameHost(ctx, st.addr); err == nil {
		c2.Close()
		t.Fatal("DialSameHost after Close succeeded")
	} else if !errs.Is(err, errs.Unavailable) {
		t.Fatalf("DialSameHost after Close: %v; want Unavailable", err)
	}
}

// TestSameHostEmptyMessages: a request and a reply that encode to nothing
// (all fields default, as a read of a missing chunk answers) still travel:
// an empty packet would read as the end of the connection.
func TestSameHostEmptyMessages(t *testing.T) {
	var got atomic.Int64
	st := startSameHost(t, func(msg []byte, fd int, _ PeerCred) proto.Message {
		var req wrapperspb.StringValue
		if err := proto.Unmarshal(msg, &req); err != nil {
			return wrapperspb.String("bad request: " + err.Error())
		}
		got.Add(1)
		return wrapperspb.String(req.GetValue()) // empty in, empty out
	})
	c := dialSameHostTest(t, st.addr)
	ctx := testCtx(t)
	f := tempFile(t, "f")
	for i := range 3 {
		reply, err := sameHostCall(ctx, c, "", f)
		if err != nil || reply != "" {
			t.Fatalf("empty call %d: reply %q, %v", i, reply, err)
		}
	}
	if got.Load() != 3 {
		t.Fatalf("handler saw %d empty requests, want 3", got.Load())
	}
}

// A same-host call whose context has no deadline is bounded by the
// connection's Timeout (DefaultCallTimeout unless changed): a store
// stopped in the middle of a request does not hang its client.
func TestSameHostCallWithoutDeadlineIsBounded(t *testing.T) {
	st, _ := blockingSameHost(t)
	c := dialSameHostTest(t, st.addr)
	if c.Timeout != DefaultCallTimeout {
		t.Errorf("Timeout = %v; want DefaultCallTimeout", c.Timeout)
	}
	c.Timeout = 100 * time.Millisecond
	f := tempFile(t, "f")
	start := time.Now()
	if _, err := sameHostCall(context.Background(), c, "block", f); !errs.Is(err, errs.Timeout) {
		t.Fatalf("call that never ends: %v; want Timeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("returned after %v; want about 100ms", d)
	}
}

// TestSameHostPeerCred: the handler learns who connected (SO_PEERCRED), so
// a server can check the caller against what the request claims.
func TestSameHostPeerCred(t *testing.T) {
	got := make(chan PeerCred, 1)
	st := startSameHost(t, func(msg []byte, fd int, peer PeerCred) proto.Message {
		got <- peer
		return wrapperspb.String("done")
	})
	c := dialSameHostTest(t, st.addr)
	if _, err := sameHostCall(context.Background(), c, "x", tempFile(t, "f")); err != nil {
		t.Fatal(err)
	}
	p := <-got
	if int(p.UID) != os.Getuid() || int(p.GID) != os.Getgid() || int(p.PID) != os.Getpid() {
		t.Fatalf("peer %+v, want uid %d gid %d pid %d", p, os.Getuid(), os.Getgid(), os.Getpid())
	}
}
