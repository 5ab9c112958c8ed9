package client_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/meta"
)

// searchCluster is a cluster for the search tests: metas meta servers with
// a tiny split threshold (so that directories split) and one store, in
// this process, which the test can stop to read the meta stores offline.
type searchCluster struct {
	t      testing.TB
	cfg    *config.Cluster
	c      *client.Client
	closes []func() error
}

func newSearchCluster(t testing.TB, metas, threshold int) *searchCluster {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.SplitThreshold = threshold
	sc := &searchCluster{t: t, cfg: cfg}
	t.Cleanup(sc.stop)
	var lns []net.Listener
	for i := range metas {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		cfg.Meta = append(cfg.Meta, config.DefaultMetaServer(ln.Addr().String(), filepath.Join(dir, fmt.Sprintf("meta%d", i))))
	}
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = []config.StoreServer{config.DefaultStoreServer(sln.Addr().String(), filepath.Join(dir, "store0"))}
	ctx := context.Background()
	for i := range metas {
		m, err := cluster.StartMeta(ctx, cfg, i, cluster.Options{Listener: lns[i]})
		if err != nil {
			t.Fatalf("start meta %d: %v", i, err)
		}
		sc.closes = append(sc.closes, m.Close)
	}
	s, err := cluster.StartStore(ctx, cfg, 0, cluster.Options{Listener: sln})
	if err != nil {
		t.Fatalf("start store: %v", err)
	}
	sc.closes = append(sc.closes, s.Close)
	sc.c, err = client.New(cluster.ClientConfig(cfg, core.Root, nil))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	sc.closes = append(sc.closes, sc.c.Close)
	return sc
}

// stop closes the client and the servers (last started, first closed).
func (sc *searchCluster) stop() {
	for i := len(sc.closes) - 1; i >= 0; i-- {
		sc.closes[i]()
	}
	sc.closes = nil
}

// checkIndexes stops the cluster and checks every meta store's index
// against its records.
func (sc *searchCluster) checkIndexes() {
	sc.t.Helper()
	sc.stop()
	for i, m := range sc.cfg.Meta {
		off, err := meta.OpenOffline(m.Dir)
		if err != nil {
			sc.t.Fatalf("open meta %d offline: %v", i, err)
		}
		problems, err := off.CheckIndex()
		off.Close()
		if err != nil {
			sc.t.Fatalf("check index of meta %d: %v", i, err)
		}
		for _, p := range problems {
			sc.t.Errorf("meta %d: %s", i, p)
		}
	}
}

// TestSearchIndexFollowsEveryWrite: after creates that split directories,
// hard links across servers, renames across directories, extended
// attributes, chmod, chown, truncate, unlinks and rmdirs on four meta
// servers, every server's index is exactly what its records imply.
func TestSearchIndexFollowsEveryWrite(t *testing.T) {
	sc := newSearchCluster(t, 4, 20)
	c, ctx := sc.c, context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for d := range 6 {
		must(c.MkdirAll(ctx, fmt.Sprintf("/t/d%d/sub", d), 0o755))
		for i := range 40 {
			f, err := c.Create(ctx, fmt.Sprintf("/t/d%d/f%d", d, i), 0o644)
			must(err)
			if i%3 == 0 {
				_, err = f.Write([]byte("some bytes"))
				must(err)
			}
			must(f.Close())
		}
	}
	must(c.Symlink(ctx, "/t/d0/f1", "/t/d1/link"))
	must(c.SetXattrPath(ctx, "/t/d0/f30", "user.empty", nil, 0)) // an empty value is a value
	for i := range 10 {
		must(c.Link(ctx, fmt.Sprintf("/t/d0/f%d", i), fmt.Sprintf("/t/d2/h%d", i)))
		must(c.Link(ctx, fmt.Sprintf("/t/d0/f%d", i), fmt.Sprintf("/t/d3/sub/h%d", i)))
		must(c.SetXattrPath(ctx, fmt.Sprintf("/t/d1/f%d", i), "user.tag", []byte("x"), 0))
		must(c.SetXattrPath(ctx, fmt.Sprintf("/t/d0/f%d", i+10), "user.tag", []byte("y"), 0))
		must(c.Chmod(ctx, fmt.Sprintf("/t/d4/f%d", i), 0o600))
		must(c.Chown(ctx, fmt.Sprintf("/t/d4/f%d", i+10), 1000, 1000))
		must(c.Truncate(ctx, fmt.Sprintf("/t/d5/f%d", i), 12345))
		must(c.Rename(ctx, fmt.Sprintf("/t/d1/f%d", i), fmt.Sprintf("/t/d5/moved%d", i), 0))
		must(c.Unlink(ctx, fmt.Sprintf("/t/d2/f%d", i)))
	}
	for i := range 5 {
		// Back to one link: the attributes move into an entry again.
		must(c.Unlink(ctx, fmt.Sprintf("/t/d2/h%d", i)))
		must(c.Unlink(ctx, fmt.Sprintf("/t/d3/sub/h%d", i)))
		must(c.RemoveXattrPath(ctx, fmt.Sprintf("/t/d5/moved%d", i), "user.tag"))
	}
	must(c.Rename(ctx, "/t/d3", "/t/d4/d3", 0))
	must(c.Chmod(ctx, "/t/d4/d3", 0o700))
	must(c.RemoveAll(ctx, "/t/d4/d3/sub"))
	sc.checkIndexes()
}
