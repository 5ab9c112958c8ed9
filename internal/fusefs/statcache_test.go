package fusefs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/weftbin"
)

// TestWriteBackStatsFromKernelCache is fusemeta's stat phase, small:
// files created (open O_CREAT|O_EXCL, close) in one directory by a mount
// in writeback mode with long leases are then stat-ed, twice over in two
// directories one after the other (the benchmark's repeats), and no stat
// reaches the mount: the create's reply let the kernel keep the entry and
// the attributes for the rest of the directory's read lease, and neither
// the close nor the write-back of the creates made it forget them.
func TestWriteBackStatsFromKernelCache(t *testing.T) {
	requireFUSE(t)
	// A term long enough that no entry runs out during the test even on a
	// loaded machine. The servers' grace period (one term) delays the
	// first write lease, and so the first create, by up to a term.
	const term = 10 * time.Second
	p, err := cluster.StartProcs(context.Background(), cluster.ProcsOptions{
		Binary: weftbin.Path(t), Dir: t.TempDir(), Meta: 1, Store: 1,
		Durability: config.DurabilitySync, Backend: "disk", LeaseTerm: term,
		Security: config.SecurityNone,
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := p.KillAll(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	cfg := cluster.ClientConfig(p.Config(), core.Root, nil)
	cfg.WriteBack = true
	c, err := client.New(cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close client: %v", err)
		}
	})
	m := mount(t, c, Options{})
	if !m.fsys.leases {
		t.Fatal("the mount caches under no leases: the test would measure nothing")
	}
	const files = 200
	for r := range 2 {
		dir := filepath.Join(m.Dir(), fmt.Sprintf("md%d", r))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for i := range files {
			fd, err := syscall.Open(filepath.Join(dir, fmt.Sprintf("f%d", i)), syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o644)
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if err := syscall.Close(fd); err != nil {
				t.Fatalf("close: %v", err)
			}
		}
		lookups, getattrs := m.fsys.calls.lookups.Load(), m.fsys.calls.fileGetattrs.Load()
		var st syscall.Stat_t
		for i := range files {
			if err := syscall.Stat(filepath.Join(dir, fmt.Sprintf("f%d", i)), &st); err != nil {
				t.Fatalf("stat: %v", err)
			}
		}
		if took := time.Since(start); took > term/2 {
			// The first creates' entries may have run out: a miss
			// would then be right.
			t.Skipf("round %d took %v, more than half the lease term", r, took)
		}
		if n := m.fsys.calls.lookups.Load() - lookups; n != 0 {
			t.Errorf("round %d: %d of %d stats sent a LOOKUP to the mount", r, n, files)
		}
		if n := m.fsys.calls.fileGetattrs.Load() - getattrs; n != 0 {
			t.Errorf("round %d: %d of %d stats sent a GETATTR to the mount", r, n, files)
		}
		for i := range files {
			if err := os.Remove(filepath.Join(dir, fmt.Sprintf("f%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
	}
}
