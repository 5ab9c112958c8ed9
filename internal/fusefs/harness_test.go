package fusefs

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/posixtest"
)

// requireFUSE skips t unless real mounts can be made: the tests mount with
// mount(2) and act as other users, which needs root, and need /dev/fuse.
func requireFUSE(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("FUSE tests need root: they mount with mount(2) and act as other users")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("FUSE tests need /dev/fuse: %v", err)
	}
}

// testCluster is an embedded cluster for a test, stopped by t.Cleanup.
type testCluster struct {
	emb *cluster.Embedded
}

func startCluster(t testing.TB) *testCluster {
	t.Helper()
	emb, err := cluster.StartEmbedded(context.Background(), cluster.EmbeddedOptions{
		Dir:        t.TempDir(),
		Durability: "async", // the tests check semantics, not durability
		Backend:    "disk",
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := emb.Close(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	return &testCluster{emb: emb}
}

// client returns a new root client of the cluster with the conformance
// suite's chunk and inline sizes (or as tune sets them), closed by
// t.Cleanup.
func (tc *testCluster) client(t testing.TB, tune ...func(*client.Config)) *client.Client {
	t.Helper()
	cfg := cluster.ClientConfig(tc.emb.Config(), core.Root, nil)
	cfg.ChunkSize = posixtest.TestChunkSize
	cfg.InlineLimit = posixtest.TestInlineLimit
	cfg.RetryFor = 2 * time.Second
	for _, f := range tune {
		f(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close client: %v", err)
		}
	})
	return c
}

// mount mounts c on a new directory that every user may reach and
// unmounts it by t.Cleanup, within bounded time even if the mount hangs.
func mount(t testing.TB, c *client.Client, opts Options) *Mount {
	t.Helper()
	base := t.TempDir()
	// t.TempDir makes 0700 directories; other users must reach the mount.
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(base, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts.Client = c
	opts.AllowOther = true
	opts.Debug = opts.Debug || os.Getenv("WEFT_FUSE_DEBUG") != ""
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	m, err := New(dir, opts)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() { unmountBounded(t, m) })
	return m
}

// unmountBounded unmounts m, detaching it lazily if it stays busy, and
// gives up waiting after a while so that a hung mount fails the test
// instead of hanging the run.
func unmountBounded(t testing.TB, m *Mount) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- m.Unmount(true) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("unmount %s: %v", m.Dir(), err)
		}
	case <-time.After(20 * time.Second):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("unmount %s: still not done after 20s (a file left open?); aborting the connection. Goroutines:\n%s", m.Dir(), buf)
		_ = lazyUnmount(m.Dir())
		if err := m.Abort(); err != nil {
			t.Errorf("abort: %v", err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("unmount %s: still serving after the abort", m.Dir())
		}
	}
}

// testWriter sends log output to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// newMountedFS starts a cluster and mounts it: the usual fixture.
func newMountedFS(t testing.TB) (*Mount, *client.Client) {
	t.Helper()
	requireFUSE(t)
	tc := startCluster(t)
	c := tc.client(t)
	return mount(t, c, Options{}), c
}
