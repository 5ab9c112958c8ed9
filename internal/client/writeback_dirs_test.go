package client_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// methodCounter counts a client's meta calls by method (an rpc Observer).
type methodCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *methodCounter) Observe(method uint16, _ time.Duration, _, _ int, _ error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[weftpb.MethodName(method)]++
}

func (m *methodCounter) count(method string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[method]
}

// startLongLeaseCluster starts metas meta servers and a store with 30 s
// leases, so that no lease runs out (and no window's end sends a queue)
// on a loaded machine during a test that counts requests.
func startLongLeaseCluster(t *testing.T, metas int) *config.Cluster {
	t.Helper()
	return startServers(t, metas, func(cfg *config.Cluster) { cfg.LeaseTerm = config.Duration(30 * time.Second) })
}

// newCountedClient is newClientOf whose meta calls count in m.
func newCountedClient(t *testing.T, cfg *config.Cluster, writeBack bool, m *methodCounter) *client.Client {
	t.Helper()
	cc := cluster.ClientConfig(cfg, core.Root, nil)
	cc.WriteBack, cc.WriteBackWindow = writeBack, time.Hour
	cc.Dial.Observer = m
	c, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wbCreateClose creates and closes name in dir.
func wbCreateClose(t *testing.T, ctx context.Context, c *client.Client, dir core.Ino, name string) {
	t.Helper()
	f, err := c.CreateAt(ctx, dir, name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", name, err)
	}
}

// A mkdir in a directory under write-back completes in the client, which
// holds the new directory's write lease from the start: creates in it, a
// mkdir and rmdir below it, are queued too, with no synchronous request.
// Another client sees the new directory and its entries at once (its read
// leases recall the writer's, which sends the queues in order).
func TestWriteBackMkdirRmdir(t *testing.T) {
	for _, metas := range []int{1, 2} {
		t.Run(fmt.Sprintf("metas=%d", metas), func(t *testing.T) { testWriteBackMkdirRmdir(t, metas) })
	}
}

func testWriteBackMkdirRmdir(t *testing.T, metas int) {
	cfg := startLongLeaseCluster(t, metas)
	ctx := context.Background()
	var calls methodCounter
	count := func(m string) int { return calls.count(m) }
	a := newCountedClient(t, cfg, true, &calls)
	b := newClientOf(t, cfg, false)
	b.OnRecall(func([]client.LeaseKey) {})
	top, err := b.MkdirAt(ctx, core.RootIno, "top", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	// The write lease on top, taken by the first change in it.
	wbCreateClose(t, ctx, a, top.Ino, "first")
	methods := []string{"mkdir", "rmdir", "create", "setattr", "apply_batch", "lease_acquire", "getattr", "lookup", "readdir"}
	before := map[string]int{}
	for _, m := range methods {
		before[m] = count(m)
	}
	d, err := a.MkdirAt(ctx, top.Ino, "d", 0o750)
	if err != nil {
		t.Fatal(err)
	}
	if !d.IsDir() || d.Mode&core.ModeBits != 0o750 || d.Nlink != 2 {
		t.Errorf("new directory: mode %#o nlink %d", d.Mode, d.Nlink)
	}
	for i := range 10 {
		wbCreateClose(t, ctx, a, d.Ino, fmt.Sprintf("f%d", i))
	}
	sub, err := a.MkdirAt(ctx, d.Ino, "sub", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	wbCreateClose(t, ctx, a, sub.Ino, "g")
	if err := a.RmdirAt(ctx, d.Ino, "sub"); !errs.Is(err, errs.NotEmpty) {
		t.Errorf("rmdir of a directory with a queued create: %v, want NotEmpty", err)
	}
	if err := a.UnlinkAt(ctx, sub.Ino, "g"); err != nil {
		t.Fatal(err)
	}
	if err := a.RmdirAt(ctx, d.Ino, "sub"); err != nil {
		t.Fatalf("rmdir of an emptied directory: %v", err)
	}
	// tar's chmod and utimes of a directory it made, after its entries.
	mode, mtime := uint32(0o705), time.Unix(1_600_000_000, 0)
	if got, err := a.SetAttr(ctx, client.Ref{Ino: d.Ino, Parent: top.Ino, Name: "d"}, client.SetAttr{Mode: &mode, Mtime: &mtime}); err != nil ||
		got.Mode&core.ModeBits != mode || !got.Mtime.Equal(mtime) {
		t.Errorf("setattr of d: %+v, %v", got, err)
	}
	if _, err := a.MkdirAt(ctx, top.Ino, "d", 0o755); !errs.Is(err, errs.Exist) {
		t.Errorf("mkdir over a queued mkdir: %v, want Exist", err)
	}
	if _, err := a.MkdirAt(ctx, top.Ino, "e", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := a.RmdirAt(ctx, top.Ino, "e"); err != nil {
		t.Fatalf("rmdir of a queued mkdir: %v", err)
	}
	// The writer sees its own tree.
	if got, err := a.LookupAt(ctx, top.Ino, "d"); err != nil || got.Ino != d.Ino {
		t.Errorf("lookup d: %v %v", got.Ino, err)
	}
	if _, err := a.LookupAt(ctx, d.Ino, "f3"); err != nil {
		t.Errorf("lookup d/f3: %v", err)
	}
	if _, err := a.LookupAt(ctx, d.Ino, "sub"); !errs.Is(err, errs.NotExist) {
		t.Errorf("lookup of the removed d/sub: %v", err)
	}
	if ta, err := a.GetAttr(ctx, client.Ref{Ino: top.Ino}); err != nil || ta.Nlink != 3 {
		t.Errorf("top's nlink %d (%v), want 3 (d's ..)", ta.Nlink, err)
	}
	for _, m := range methods {
		if got := count(m) - before[m]; got != 0 {
			t.Errorf("%d %s requests for mkdir, creates and rmdir under write-back, want 0", got, m)
		}
	}
	// Nothing reached the servers: a client without leases sees nothing.
	if _, err := b.LookupAt(ctx, top.Ino, "d"); !errs.Is(err, errs.NotExist) {
		t.Errorf("a client without leases sees the queued mkdir at once (%v)", err)
	}
	// With read leases, another client sees everything at once.
	if l := b.ReadLease(ctx, b.DirLeases(top.Ino)...); l.Denied() {
		t.Fatal("read lease on top denied")
	}
	bd, err := b.LookupAt(ctx, top.Ino, "d")
	if err != nil || bd.Ino != d.Ino {
		t.Fatalf("the other client's lookup of d: %v %v", bd.Ino, err)
	}
	if l := b.ReadLease(ctx, b.DirLeases(d.Ino)...); l.Denied() {
		t.Fatal("read lease on d denied")
	}
	want := map[string]uint32{}
	for i := range 10 {
		want[fmt.Sprintf("f%d", i)] = 0o644
	}
	checkNames(t, ctx, b, d.Ino, want, []string{"sub"})
	if got, err := b.GetAttr(ctx, client.Ref{Ino: d.Ino}); err != nil || got.Mode&core.ModeBits != mode || !got.Mtime.Equal(mtime) || got.Nlink != 2 {
		t.Errorf("the other client's stat of d: mode %#o mtime %v nlink %d (%v), want %#o %v 2", got.Mode&core.ModeBits, got.Mtime, got.Nlink, err, mode, mtime)
	}
	if _, err := b.LookupAt(ctx, top.Ino, "e"); !errs.Is(err, errs.NotExist) {
		t.Errorf("e, made and removed under write-back: %v", err)
	}
	if got := count("apply_batch") - before["apply_batch"]; got < 2 || got > 8 {
		t.Errorf("%d apply_batch requests, want a few (top's and d's queues, in order)", got)
	}
	// The writer's errors are none.
	for _, dir := range []core.Ino{top.Ino, d.Ino} {
		if err := a.SyncDir(ctx, dir); err != nil {
			t.Errorf("a batch was refused: %v", err)
		}
	}
	for _, m := range []string{"mkdir", "rmdir", "create", "setattr"} {
		if got := count(m) - before[m]; got != 0 {
			t.Errorf("%d %s requests, want 0", got, m)
		}
	}
}

// rmdir under write-back of a directory the servers hold with entries
// (not all known to the client) is refused or goes to the servers: never
// a lost entry.
func TestWriteBackRmdirNotEmptyOnServers(t *testing.T) {
	cfg := startLongLeaseCluster(t, 1)
	ctx := context.Background()
	a := newClientOf(t, cfg, true)
	plain := newClientOf(t, cfg, false)
	top, err := plain.MkdirAt(ctx, core.RootIno, "top", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	d, err := plain.MkdirAt(ctx, top.Ino, "d", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	wbCreateClose(t, ctx, plain, d.Ino, "x")
	wbCreateClose(t, ctx, a, top.Ino, "first")
	if err := a.RmdirAt(ctx, top.Ino, "d"); !errs.Is(err, errs.NotEmpty) {
		t.Fatalf("rmdir of a directory with an entry on the servers: %v, want NotEmpty", err)
	}
	if err := a.UnlinkAt(ctx, d.Ino, "x"); err != nil {
		t.Fatal(err)
	}
	if err := a.RmdirAt(ctx, top.Ino, "d"); err != nil {
		t.Fatalf("rmdir after the unlink: %v", err)
	}
	if err := a.SyncDir(ctx, top.Ino); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if _, err := plain.LookupAt(ctx, top.Ino, "d"); !errs.Is(err, errs.NotExist) {
		t.Errorf("d after a synced rmdir: %v", err)
	}
}

// mkdirSent makes directory name in parent on a write-back client and
// sends the mkdir: the tests hand the new number to other clients, which
// would otherwise learn it from a lookup in parent (whose read lease
// recalls the writer's, which sends the mkdir first).
func mkdirSent(t *testing.T, ctx context.Context, c *client.Client, parent core.Ino, name string, mode uint32) core.Attr {
	t.Helper()
	a, err := c.MkdirAt(ctx, parent, name, mode)
	if err != nil {
		t.Fatalf("mkdir %s: %v", name, err)
	}
	if err := c.SyncDir(ctx, parent); err != nil {
		t.Fatalf("sync of mkdir %s: %v", name, err)
	}
	return a
}
