package fusefs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
)

// multiClient starts metas meta servers (GIGA+, splitting at threshold
// entries) and one store on loopback ports in this process, and returns a
// function that makes root clients of that cluster (as tune sets them).
// Everything stops by t.Cleanup.
func multiClient(t *testing.T, metas, threshold int, tune ...func(*client.Config)) func() *client.Client {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.SplitThreshold = threshold
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	var lns []net.Listener
	for i := range metas {
		lns = append(lns, listen())
		cfg.Meta = append(cfg.Meta, config.DefaultMetaServer(lns[i].Addr().String(), filepath.Join(dir, fmt.Sprintf("meta%d", i))))
	}
	sln := listen()
	cfg.Store = []config.StoreServer{config.DefaultStoreServer(sln.Addr().String(), filepath.Join(dir, "store0"))}
	ctx := context.Background()
	for i := range metas {
		m, err := cluster.StartMeta(ctx, cfg, i, cluster.Options{Listener: lns[i]})
		if err != nil {
			t.Fatalf("start meta %d: %v", i, err)
		}
		t.Cleanup(func() { m.Close() })
	}
	s, err := cluster.StartStore(ctx, cfg, 0, cluster.Options{Listener: sln})
	if err != nil {
		t.Fatalf("start store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return func() *client.Client {
		cc := cluster.ClientConfig(cfg, core.Root, nil)
		for _, f := range tune {
			f(&cc)
		}
		c, err := client.New(cc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// TestTwoMountsSingleImageSplit is TestTwoMountsSingleImage on 4 meta
// servers with a directory split over all of them: leases are per
// partition, and changes that span servers (renames between partitions
// and directories, mkdir and rmdir of directories placed elsewhere) recall
// them on every server they write. It also checks that a mount's own
// changes do not wait for its own leases.
func TestTwoMountsSingleImageSplit(t *testing.T) {
	requireFUSE(t)
	newClient := multiClient(t, 4, 8)
	// Clients are closed after the mounts (cleanups run in reverse).
	ca, cb := newClient(), newClient()
	a := mount(t, ca, Options{}).Dir()
	b := mount(t, cb, Options{}).Dir()
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	exists := func(path string) bool {
		t.Helper()
		_, err := os.Stat(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return err == nil
	}
	var slowest time.Duration
	timed := func(fn func() error) {
		t.Helper()
		start := time.Now()
		check(fn())
		slowest = max(slowest, time.Since(start))
	}

	const n = 100
	check(os.Mkdir(a+"/big", 0o755))
	check(os.Mkdir(a+"/other", 0o755))
	for i := range n {
		check(os.WriteFile(fmt.Sprintf("%s/big/f%d", a, i), nil, 0o644))
	}
	// B caches every name (a listing, then a stat of each).
	ents, err := os.ReadDir(b + "/big")
	if err != nil || len(ents) != n {
		t.Fatalf("listing on B: %d entries, %v", len(ents), err)
	}
	for i := range n {
		if !exists(fmt.Sprintf("%s/big/f%d", b, i)) {
			t.Fatalf("f%d missing on B", i)
		}
	}
	for i := 0; i < n; i += 3 {
		f, g := fmt.Sprintf("/big/f%d", i), fmt.Sprintf("/big/g%d", i)
		timed(func() error { return os.Rename(a+f, a+g) })
		if exists(b+f) || !exists(b+g) {
			t.Fatalf("rename %s %s: B sees old %v, new %v", f, g, exists(b+f), exists(b+g))
		}
	}
	for i := 1; i < n; i += 3 {
		f := fmt.Sprintf("/big/f%d", i)
		timed(func() error { return os.Remove(a + f) })
		if exists(b + f) {
			t.Fatalf("unlink %s: B still sees it", f)
		}
	}
	for i := 2; i < n; i += 9 {
		f := fmt.Sprintf("/big/f%d", i)
		timed(func() error { return os.Chmod(a+f, 0o600) })
		if st, err := os.Stat(b + f); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("chmod %s: B sees %v, %v", f, st.Mode(), err)
		}
		timed(func() error { return os.Rename(a+f, a+"/other/x") })
		if exists(b+f) || !exists(b+"/other/x") {
			t.Fatalf("rename %s /other/x: B sees old %v, new %v", f, exists(b+f), exists(b+"/other/x"))
		}
		d := fmt.Sprintf("/big/d%d", i)
		timed(func() error { return os.Mkdir(a+d, 0o755) })
		if !exists(b + d) {
			t.Fatalf("mkdir %s: B does not see it", d)
		}
		timed(func() error { return os.Remove(a + d) })
		if exists(b + d) {
			t.Fatalf("rmdir %s: B still sees it", d)
		}
	}
	t.Logf("slowest change on A: %v", slowest)
	// A change may wait for B's release (a recall round trip), never for
	// a lease term or the client's invalidation bound: counted, not timed
	// (a loaded machine makes slow changes that waited for neither).
	if n := ca.SlowRecalls() + cb.SlowRecalls(); n > 0 {
		t.Errorf("%d recalls waited out the invalidation bound (slowest change on A %v)", n, slowest)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n, err := ca.LeasesExpired(ctx); err != nil || n > 0 {
		t.Errorf("%d leases ran out their term instead of being released (slowest change on A %v; %v)", n, slowest, err)
	}
}
