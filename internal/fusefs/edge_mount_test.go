package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/internal/weftbin"
)

// TestMountThroughSecuredEdge: weft mount on the cluster file of a weft
// edge in front of a secure cluster, everything a separate process started
// as a user would (weft cluster start, weft ca issue, weft edge, weft
// mount). Files written through the mount with the cluster's admin identity
// read back through it and directly from the cluster, chunks included (the
// capabilities the meta server hands out pass through the edge to the
// store). A second mount of the same edge with a client identity for uid
// 65534 lets root read what everyone may and not root's 0600 file: the edge
// limits the credentials to the identity, as the meta server would.
func TestMountThroughSecuredEdge(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	clusterDir := filepath.Join(dir, "cluster")
	if out, err := weft(t, "cluster", "start", "--dir", clusterDir); err != nil {
		t.Fatalf("weft cluster start: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := weft(t, "cluster", "stop", "--dir", clusterDir, "--kill"); err != nil {
			t.Errorf("weft cluster stop: %v\n%s", err, out)
		}
	})
	upstream := filepath.Join(clusterDir, cluster.ClusterFileName)
	cfg, err := config.Load(upstream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SecurityMode() != config.SecuritySecure {
		t.Fatalf("a new cluster's security is %q; want secure", cfg.SecurityMode())
	}
	issue := func(name string, args ...string) string {
		out := filepath.Join(dir, "id", name)
		if o, err := weft(t, append([]string{"ca", "issue", "--cluster", upstream, "--out", out}, args...)...); err != nil {
			t.Fatalf("weft ca issue %s: %v\n%s", strings.Join(args, " "), err, o)
		}
		return out
	}
	edgeFile := startEdgeProcess(t, upstream, issue("edge", "--role", "edge"))

	// Through the edge with the admin identity (the edge's cluster file
	// keeps the upstream's), as root.
	mnt := filepath.Join(dir, "admin")
	mountEdge(t, edgeFile, mnt)
	chunked := bytes.Repeat([]byte("through the edge "), (5<<20)/17) // more than one 4 MiB chunk
	files := []struct {
		name string
		mode os.FileMode
		data []byte
	}{
		{"public", 0o644, []byte("for everyone\n")},
		{"secret", 0o600, []byte("root only\n")},
		{"public-big", 0o644, chunked},
		{"secret-big", 0o600, chunked},
	}
	for _, f := range files {
		path := filepath.Join(mnt, f.name)
		within(t, time.Minute, "write and read "+path, func() error {
			if err := os.WriteFile(path, f.data, f.mode); err != nil {
				return err
			}
			got, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, f.data) {
				return fmt.Errorf("read back %d bytes, not the %d written", len(got), len(f.data))
			}
			return nil
		})
	}
	// What the mount wrote is in the cluster: read directly, not through
	// the edge.
	direct, err := client.New(cluster.ClientConfig(cfg, core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	for _, f := range files {
		got, err := readDirect(ctx, direct, "/"+f.name)
		if err != nil || !bytes.Equal(got, f.data) {
			t.Fatalf("direct read of /%s, written through the edge's mount: %d bytes, %v; want %d bytes", f.name, len(got), err, len(f.data))
		}
		a, err := direct.Stat(ctx, "/"+f.name)
		if err != nil || a.Mode&0o777 != uint32(f.mode) || a.UID != 0 {
			t.Fatalf("direct stat of /%s: %+v, %v; want mode %#o, uid 0", f.name, a, err, f.mode)
		}
	}

	// Root on a mount with uid 65534's identity is nobody to weft.
	nobody := filepath.Join(dir, "nobody")
	mountEdge(t, edgeFile, nobody, "--identity", issue("nobody", "--role", "client", "--uid", "65534"))
	for _, f := range files {
		path := filepath.Join(nobody, f.name)
		within(t, time.Minute, "read "+path, func() error {
			got, err := os.ReadFile(path)
			switch {
			case f.mode&0o004 != 0 && (err != nil || !bytes.Equal(got, f.data)):
				return fmt.Errorf("a file everyone may read: %d bytes, %v; want its %d bytes", len(got), err, len(f.data))
			case f.mode&0o004 == 0 && !os.IsPermission(err):
				return fmt.Errorf("root's 0600 file read by root through uid 65534's identity: %d bytes, %v; want permission denied", len(got), err)
			}
			return nil
		})
	}
	within(t, time.Minute, "create in root's / through uid 65534's identity", func() error {
		err := os.WriteFile(filepath.Join(nobody, "planted"), []byte("x"), 0o644)
		if !os.IsPermission(err) {
			return fmt.Errorf("created a file in root's 0755 /: %v; want permission denied", err)
		}
		return nil
	})
	// A process of uid 65534 itself is refused by the kernel and by weft.
	cmd := exec.CommandContext(ctx, "cat", filepath.Join(nobody, "secret-big"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("uid 65534 read root's 0600 file through the edge: %d bytes", len(out))
	}
}

// startEdgeProcess runs weft edge in front of the cluster file upstream
// with the edge identity in identity, and returns the edge's cluster file
// once written. The process is killed when the test ends.
func startEdgeProcess(t *testing.T, upstream, identity string) string {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "edge.toml")
	log, err := os.Create(filepath.Join(dir, "edge.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(weftbin.Path(t), "edge", "--upstream", upstream, "--out", out,
		"--listen", "127.0.0.1:0", "--identity", identity)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		log.Close()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("weft edge (pid %d) still running 30 s after SIGKILL", cmd.Process.Pid)
		}
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("edge log:\n%s", b)
		}
	})
	waitfor.NoError(t, 60*time.Second, "the edge's cluster file", func() error {
		select {
		case <-done:
			return fmt.Errorf("weft edge exited")
		default:
		}
		_, err := config.Load(out)
		return err
	})
	return out
}

// mountEdge runs weft mount -d of clusterFile on a new directory mnt, with
// more arguments; t.Cleanup kills the mount process and clears the mount.
func mountEdge(t *testing.T, clusterFile, mnt string, more ...string) {
	t.Helper()
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	logf := filepath.Join(t.TempDir(), "mount.log")
	args := append([]string{"mount", "--cluster", clusterFile, "-d", "--log-file", logf}, more...)
	out, err := weft(t, append(args, mnt)...)
	if err != nil {
		t.Fatalf("weft mount -d %s: %v\n%s", strings.Join(more, " "), err, out)
	}
	// Cleanups run last-registered first: the log is read after the kill.
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logf)
			t.Logf("mount %s log:\n%s", mnt, b)
		}
	})
	daemonAtEnd(t, out, mnt)
}

// within runs fn and fails t if it errs or has not returned after d. A
// call stuck in the mount stays stuck until the cleanups kill the mount's
// process, which ends it with an error.
func within(t *testing.T, d time.Duration, what string, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(d):
		t.Fatalf("%s: no answer after %v", what, d)
	}
}

// readDirect reads path whole through c.
func readDirect(ctx context.Context, c *client.Client, path string) ([]byte, error) {
	f, err := c.Open(ctx, path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}
