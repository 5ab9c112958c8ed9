package rpc

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/proto/weftpb"
)

// childServerEnv, set in a test binary's environment, makes it serve the
// test methods instead of running tests (TestMain): a real process for the
// tests to stop.
const childServerEnv = "WEFT_RPC_TEST_CHILD_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(childServerEnv) != "" {
		os.Exit(serveChild())
	}
	os.Exit(m.Run())
}

// serveChild serves the test methods on a loopback port, which it prints,
// until its standard input closes (the test ended, however).
func serveChild() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ts := &testServer{
		block:       make(chan error, 10),
		conns:       make(chan *Conn, 10),
		notes:       make(chan string, 10),
		dataBlocked: make(chan struct{}, 1),
	}
	srv := NewServer(newTestMux(ts), ServerOptions{})
	go srv.Serve(ln)
	fmt.Println(ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
	return 0
}

// startChildServer runs the test binary as a server process and returns it
// and its address. Cleanup resumes and kills it, and waits for it.
func startChildServer(t *testing.T) (*os.Process, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childServerEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		addr <- strings.TrimSpace(line)
	}()
	select {
	case a := <-addr:
		if a == "" {
			t.Fatal("the child server printed no address")
		}
		return cmd.Process, a
	case <-time.After(10 * time.Second):
		t.Fatal("the child server did not start")
	}
	return nil, ""
}

// Issue 12 item 2 with a real process: a server stopped with SIGSTOP fails
// the calls in flight to it within PeerTimeout, although their contexts
// allow much longer.
func TestStoppedServerProcessFailsCallsInFlight(t *testing.T) {
	const bound = 500 * time.Millisecond
	proc, addr := startChildServer(t)
	p := NewPeer(addr, DialOptions{PeerTimeout: bound})
	defer p.Close()
	ctx := testCtx(t) // 10 s
	if _, err := echo(ctx, p, "x"); err != nil {
		t.Fatalf("echo before the stop: %v", err)
	}
	c, err := p.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- p.Call(ctx, mGate, msg("never"), &weftpb.ReadlinkReply{}) }()
	waitfor.Until(t, 5*time.Second, "the call to be in flight", func() bool { return c.inFlight() == 1 })
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err := <-errc:
		if !errs.Is(err, errs.Unavailable) {
			t.Errorf("call to a stopped server: %v; want Unavailable", err)
		}
	case <-ctx.Done():
		t.Fatal("the call to a stopped server did not return")
	}
	if d := time.Since(start); d > 4*bound {
		t.Errorf("the call returned %v after the stop; want within about %v", d, bound)
	}
	// Resumed, the server answers again on a new connection.
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := echo(ctx, p, "y"); err != nil {
		t.Fatalf("echo after the server resumed: %v", err)
	}
}
