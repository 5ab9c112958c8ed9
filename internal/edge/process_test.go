package edge_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/internal/weftbin"
)

func TestMain(m *testing.M) { weftbin.Main(m) }

// startUpstream starts an upstream cluster of meta meta servers and one
// store, security "none", stopped when the test ends.
func startUpstream(t *testing.T, meta int) *cluster.Procs {
	t.Helper()
	p, err := cluster.StartProcs(context.Background(), cluster.ProcsOptions{
		Binary: weftbin.Path(t), Dir: t.TempDir(), Meta: meta, Store: 1, Security: config.SecurityNone,
		SplitThreshold: 8, // a directory of a few files spreads over the servers
	})
	if err != nil {
		t.Fatalf("StartProcs: %v", err)
	}
	t.Cleanup(func() {
		if err := p.KillAll(); err != nil {
			t.Errorf("KillAll: %v", err)
		}
	})
	return p
}

// edgeProc is a running weft edge process.
type edgeProc struct {
	cmd  *exec.Cmd
	cfg  *config.Cluster
	done chan struct{}
}

// startEdge runs weft edge in front of the cluster file upstream, with more
// arguments, and waits for the edge's cluster file. The process is killed
// when the test ends.
func startEdge(t *testing.T, upstream string, more ...string) *edgeProc {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "edge.toml")
	log, err := os.Create(filepath.Join(dir, "edge.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(weftbin.Path(t), append([]string{"edge", "--upstream", upstream, "--out", out, "--listen", "127.0.0.1:0"}, more...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &edgeProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		log.Close()
		close(e.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		<-e.done
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("edge log:\n%s", b)
		}
	})
	waitfor.NoError(t, 30*time.Second, "the edge's cluster file", func() error {
		select {
		case <-e.done:
			return fmt.Errorf("weft edge exited")
		default:
		}
		cfg, err := config.Load(out)
		e.cfg = cfg
		return err
	})
	return e
}

// kill9 kills the edge process and waits for it to be gone.
func (e *edgeProc) kill9(t *testing.T) {
	t.Helper()
	if err := e.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-e.done
}

func newClient(t *testing.T, cfg *config.Cluster) *client.Client {
	t.Helper()
	c, err := client.New(cluster.ClientConfig(cfg, core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// recallLog records the keys a client was asked to give back.
type recallLog struct {
	mu   sync.Mutex
	keys []client.LeaseKey
}

func (r *recallLog) add(keys []client.LeaseKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, keys...)
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustMode(t *testing.T, c *client.Client, ctx context.Context, path string, want uint32, who string) {
	t.Helper()
	a, err := c.Stat(ctx, path)
	if err != nil {
		t.Fatalf("%s: stat %s: %v", who, path, err)
	}
	if got := a.Mode & 0o7777; got != want {
		t.Fatalf("%s: stat %s: mode %#o; want %#o", who, path, got, want)
	}
}

func mustNotExist(t *testing.T, c *client.Client, ctx context.Context, path, who string) {
	t.Helper()
	if _, err := c.Stat(ctx, path); !errs.Is(err, errs.NotExist) {
		t.Fatalf("%s: stat %s: %v; want NotExist", who, path, err)
	}
}

// TestEdgeAndDirectClientsSeeEachOthersChanges: a change made on either
// side of the edge is seen by the next call on the other side, although
// the edge answers stat from its cache: the upstream recalls the edge's
// leases before it commits, the edge drops its cache and recalls its own
// clients' leases before it gives them back.
func TestEdgeAndDirectClientsSeeEachOthersChanges(t *testing.T) {
	p := startUpstream(t, 2)
	e := startEdge(t, p.ClusterFile())
	ctx := testCtx(t, 90*time.Second)
	direct := newClient(t, p.Config())
	viaEdge := newClient(t, e.cfg)
	other := newClient(t, e.cfg) // a second client of the same edge
	var recalls recallLog
	viaEdge.OnRecall(recalls.add)

	if err := direct.Mkdir(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 20 { // past the split threshold: entries on both servers
		if err := writeFile(ctx, direct, fmt.Sprintf("/d/f%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		path := fmt.Sprintf("/d/f%d", i)
		// create: seen through the edge at once (after a negative stat).
		mustMode(t, viaEdge, ctx, path, 0o644, "edge client")

		// chmod by the direct client, with the edge's cache and the edge
		// client's lease on the attributes.
		a, err := viaEdge.Stat(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		d, err := viaEdge.Stat(ctx, "/d")
		if err != nil {
			t.Fatal(err)
		}
		l := viaEdge.ReadLease(ctx, viaEdge.AttrLease(client.Ref{Ino: a.Ino, Parent: d.Ino, Name: fmt.Sprintf("f%d", i)}, a))
		if l.Remaining() == 0 {
			t.Fatalf("the edge granted no read lease on %s (denied %v)", path, l.Denied())
		}
		if err := direct.Chmod(ctx, path, 0o600); err != nil {
			t.Fatal(err)
		}
		if l.Remaining() != 0 {
			t.Fatalf("chmod of %s returned while the edge client still trusts its lease", path)
		}
		mustMode(t, viaEdge, ctx, path, 0o600, "edge client after a direct chmod")
		mustMode(t, other, ctx, path, 0o600, "other edge client after a direct chmod")

		// chmod through the edge: the direct client and the other edge
		// client see it.
		mustMode(t, other, ctx, path, 0o600, "other edge client")
		if err := viaEdge.Chmod(ctx, path, 0o640); err != nil {
			t.Fatal(err)
		}
		mustMode(t, direct, ctx, path, 0o640, "direct client after an edge chmod")
		mustMode(t, other, ctx, path, 0o640, "other edge client after an edge chmod")

		// rename by the direct client.
		renamed := path + ".r"
		if err := direct.Rename(ctx, path, renamed, 0); err != nil {
			t.Fatal(err)
		}
		mustNotExist(t, viaEdge, ctx, path, "edge client after a direct rename")
		mustMode(t, viaEdge, ctx, renamed, 0o640, "edge client after a direct rename")

		// unlink through the edge, then by the direct client.
		if err := other.Unlink(ctx, renamed); err != nil {
			t.Fatal(err)
		}
		mustNotExist(t, direct, ctx, renamed, "direct client after an edge unlink")
		mustNotExist(t, viaEdge, ctx, renamed, "edge client after an edge unlink")
	}
	recalls.mu.Lock()
	defer recalls.mu.Unlock()
	if len(recalls.keys) == 0 {
		t.Fatal("the edge client was never asked to give a lease back")
	}
}

// writeFile creates path with a little data, mode 0644.
func writeFile(ctx context.Context, c *client.Client, path string) error {
	f, err := c.Create(ctx, path, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(path)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TestTwoSitesShareANamespace: two edges in front of one cluster (two
// remote sites) and a direct client; a change through either edge is seen
// at once through the other, although both answer stat from their caches.
func TestTwoSitesShareANamespace(t *testing.T) {
	p := startUpstream(t, 2)
	a := newClient(t, startEdge(t, p.ClusterFile()).cfg)
	b := newClient(t, startEdge(t, p.ClusterFile()).cfg)
	direct := newClient(t, p.Config())
	ctx := testCtx(t, 90*time.Second)
	if err := a.Mkdir(ctx, "/s", 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		path := fmt.Sprintf("/s/f%d", i)
		mustNotExist(t, b, ctx, path, "site b before the create")
		if err := writeFile(ctx, a, path); err != nil {
			t.Fatal(err)
		}
		mustList(t, b, ctx, "/s", fmt.Sprintf("f%d", i), true, "site b after site a's create")
		mustMode(t, b, ctx, path, 0o644, "site b after site a's create")
		mustMode(t, a, ctx, path, 0o644, "site a") // both caches hold it now
		if err := b.Chmod(ctx, path, 0o600); err != nil {
			t.Fatal(err)
		}
		mustMode(t, a, ctx, path, 0o600, "site a after site b's chmod")
		if err := direct.Chmod(ctx, path, 0o640); err != nil {
			t.Fatal(err)
		}
		mustMode(t, a, ctx, path, 0o640, "site a after a direct chmod")
		mustMode(t, b, ctx, path, 0o640, "site b after a direct chmod")
		if err := a.Rename(ctx, path, path+".r", 0); err != nil {
			t.Fatal(err)
		}
		mustNotExist(t, b, ctx, path, "site b after site a's rename")
		mustMode(t, b, ctx, path+".r", 0o640, "site b after site a's rename")
		if err := b.Unlink(ctx, path+".r"); err != nil {
			t.Fatal(err)
		}
		mustNotExist(t, a, ctx, path+".r", "site a after site b's unlink")
		mustList(t, a, ctx, "/s", fmt.Sprintf("f%d.r", i), false, "site a after site b's unlink")
		if err := direct.Mkdir(ctx, path+".d", 0o755); err != nil {
			t.Fatal(err)
		}
		mustList(t, a, ctx, "/s", fmt.Sprintf("f%d.d", i), true, "site a after a direct mkdir")
	}
}

// mustList checks whether a listing of dir holds name.
func mustList(t *testing.T, c *client.Client, ctx context.Context, dir, name string, want bool, who string) {
	t.Helper()
	es, err := c.ReadDir(ctx, dir)
	if err != nil {
		t.Fatalf("%s: readdir %s: %v", who, dir, err)
	}
	if got := slices.ContainsFunc(es, func(e core.DirEntry) bool { return e.Name == name }); got != want {
		t.Fatalf("%s: readdir %s lists %s: %v; want %v", who, dir, name, got, want)
	}
}

// TestEdgeSparesTheRequestersLeases: as a meta server spares the leases of
// the client whose change it commits, the edge spares its client's leases
// on what the client's own change names while the change is in flight, and
// recalls them once it has returned. A FUSE mount cannot invalidate a
// directory whose lock its own create holds in the kernel: the client here
// does the same (its invalidation waits for the create to return), and
// without the sparing every create would wait for the client's bound on
// invalidations (500 ms).
func TestEdgeSparesTheRequestersLeases(t *testing.T) {
	p := startUpstream(t, 1)
	e := startEdge(t, p.ClusterFile())
	ctx := testCtx(t, 60*time.Second)
	c := newClient(t, e.cfg)
	d, err := c.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var creating chan struct{} // closed when the create in progress returned
	recalls := 0
	c.OnRecall(func([]client.LeaseKey) {
		mu.Lock()
		ch := creating
		recalls++
		mu.Unlock()
		if ch != nil {
			<-ch // the kernel's invalidation waits for the create
		}
	})
	for i := range 10 {
		name := fmt.Sprintf("f%d", i)
		// Refused while the previous create's spared lease is being
		// recalled: asked again until granted.
		waitfor.Until(t, 10*time.Second, "a lease on "+name+"'s entry", func() bool {
			return c.ReadLease(ctx, c.EntryLease(d.Ino, name)).Remaining() > 0
		})
		ch := make(chan struct{})
		mu.Lock()
		creating = ch
		mu.Unlock()
		start := time.Now()
		f, err := c.CreateAt(ctx, d.Ino, name, os.O_RDWR|os.O_EXCL, 0o644)
		took := time.Since(start)
		mu.Lock()
		creating = nil
		mu.Unlock()
		close(ch)
		if err != nil {
			t.Fatal(err)
		}
		// Such a wait ends only at the client's bound, which counts it
		// (a loaded machine makes slow creates that did not wait).
		if n := c.SlowRecalls(); n > 0 {
			t.Fatalf("creating %s took %v: %d recalls waited for its own client's invalidation", name, took, n)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		// The create recalled the edge's lease on the directory: the
		// client's, spared while it ran, is recalled too.
		waitfor.Until(t, 10*time.Second, "the spared lease recalled after creating "+name, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return recalls > i
		})
	}
}

// TestEdgeSplitDirectoryMtimeStaysBounded: a split directory's mtime is
// the latest over its partitions, and a create on another server's
// partition recalls no lease on the directory's owner. A client's kernel
// caches that for at most a term; the edge, which renews what is in use,
// reads such attributes again in the background and serves them for no
// longer than a term either.
func TestEdgeSplitDirectoryMtimeStaysBounded(t *testing.T) {
	p := startUpstream(t, 2)
	e := startEdge(t, p.ClusterFile())
	ctx := testCtx(t, 60*time.Second)
	direct := newClient(t, p.Config())
	viaEdge := newClient(t, e.cfg)
	if err := direct.Mkdir(ctx, "/big", 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 40 { // past the split threshold (8)
		if err := writeFile(ctx, direct, fmt.Sprintf("/big/f%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := direct.Stat(ctx, "/big")
	if err != nil {
		t.Fatal(err)
	}
	owner := direct.InodeLease(d.Ino).Server
	// A name whose entry lives on the other server's partition.
	name := ""
	for i := 0; name == ""; i++ {
		if n := fmt.Sprintf("other%d", i); direct.EntryLease(d.Ino, n).Server != owner {
			name = n
		}
		if i > 1000 {
			t.Skip("the directory did not split")
		}
	}
	before, err := viaEdge.Stat(ctx, "/big")
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(ctx, direct, "/big/"+name); err != nil {
		t.Fatal(err)
	}
	after, err := direct.Stat(ctx, "/big")
	if err != nil {
		t.Fatal(err)
	}
	if after.Mtime.Equal(before.Mtime) {
		t.Skip("the create did not move the directory's mtime")
	}
	// Kept in use all along: polled every few ms.
	start := time.Now()
	waitfor.Until(t, 2*lease.DefaultTerm, "the new mtime through the edge", func() bool {
		a, err := viaEdge.Stat(ctx, "/big")
		return err == nil && a.Mtime.Equal(after.Mtime)
	})
	t.Logf("the edge served the old mtime for %v", time.Since(start))
}
