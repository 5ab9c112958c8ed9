package edge_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/edge"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/linksim"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// dslUpstream writes a cluster file for p whose meta server 0 is reached
// across an emulated dsl link (15 ms each way).
func dslUpstream(t *testing.T, p *cluster.Procs) string {
	t.Helper()
	cfg := p.Config()
	link, err := linksim.Listen(cfg.Meta[0].Addr, linksim.DSL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	cfg.Meta[0].Addr = link.Addr()
	path := filepath.Join(t.TempDir(), "through-dsl.toml")
	if err := cfg.Write(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEdgeDelegatesWriteLeases: the edge grants a write lease on a write
// lease it holds upstream, so that taking it again costs no round trip
// across the dsl link; and a direct client's change under it recalls it
// through both levels: the upstream recalls the edge's, the edge its
// client's, before the change returns.
func TestEdgeDelegatesWriteLeases(t *testing.T) {
	p := startUpstream(t, 1)
	e := startEdge(t, dslUpstream(t, p))
	ctx := testCtx(t, 60*time.Second)
	direct := newClient(t, p.Config())
	d, err := direct.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	recalls := make(chan *weftpb.LeaseRecallRequest, 16)
	mux := rpc.NewMux()
	rpc.HandleOneWay(mux, weftpb.MethodLeaseRecall, func(_ context.Context, req *weftpb.LeaseRecallRequest) {
		recalls <- req
	})
	peer := rpc.NewPeer(e.cfg.Meta[0].Addr, rpc.DialOptions{Mux: mux})
	t.Cleanup(func() { peer.Close() })
	const session = 42
	acquire := func() (*weftpb.LeaseAcquireReply, time.Duration) {
		start := time.Now()
		var reply weftpb.LeaseAcquireReply
		if err := peer.Call(ctx, weftpb.MethodLeaseAcquire, &weftpb.LeaseAcquireRequest{
			Session: session, Mode: weftpb.LeaseMode_LEASE_WRITE, Keys: []uint64{uint64(d.Ino)}}, &reply); err != nil {
			t.Fatal(err)
		}
		if len(reply.Granted) != 1 || time.Duration(reply.TermMs)*time.Millisecond != edge.DefaultTerm {
			t.Fatalf("write lease through the edge: %v; want the directory granted for %v", &reply, edge.DefaultTerm)
		}
		return &reply, time.Since(start)
	}
	release := func(r *weftpb.LeaseAcquireReply) {
		if err := peer.Send(ctx, weftpb.MethodLeaseRelease, &weftpb.LeaseReleaseRequest{
			Session: session, Keys: r.Granted, Seqs: []uint64{r.Seq}}); err != nil {
			t.Fatal(err)
		}
	}
	r, first := acquire()
	release(r)
	// The link's round trip is 30 ms: a grant that crossed it takes longer.
	fast := 0
	for range 10 {
		r, took := acquire()
		if took < 15*time.Millisecond {
			fast++
		}
		release(r)
	}
	if fast < 8 {
		t.Fatalf("%d of 10 write leases taken again were granted within 15 ms (the first took %v): they crossed the link", fast, first)
	}
	t.Logf("first write lease %v; %d of 10 again within 15 ms", first, fast)

	r, _ = acquire()
	created := make(chan error, 1)
	start := time.Now()
	go func() {
		f, err := direct.CreateAt(ctx, d.Ino, "x", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			err = f.Close()
		}
		created <- err
	}()
	select {
	case rc := <-recalls:
		if rc.Session != session || len(rc.Keys) != 1 || rc.Keys[0] != uint64(d.Ino) {
			t.Fatalf("recall %v; want the directory's lease of session %d", rc, session)
		}
	case err := <-created:
		t.Fatalf("a direct create under the delegated write lease returned (%v) without recalling it", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no recall through the edge within 10 s")
	}
	select {
	case err := <-created:
		t.Fatalf("the direct create returned (%v) before the edge's client gave its write lease back", err)
	case <-time.After(100 * time.Millisecond):
	}
	release(r)
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	// Well before the terms (1 s here, 2 s upstream): the releases, not
	// the terms' ends, let it through.
	if took := time.Since(start); took > 900*time.Millisecond {
		t.Fatalf("the direct create took %v: it waited for a lease to end", took)
	}
}

// writeBackClient is a write-back client of cfg (WriteBack, a window of
// an hour: only fsync, a recall or the lease's end send its queue).
func writeBackClient(t *testing.T, cfg *config.Cluster) *client.Client {
	t.Helper()
	cc := cluster.ClientConfig(cfg, core.Root, nil)
	cc.WriteBack, cc.WriteBackWindow = true, time.Hour
	c, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestEdgeWriteBackRecallPassesThroughBothLevels: a write-back client of
// the edge completes creates under its delegated directory lease (a
// direct client without leases does not see them yet), and a direct
// client's read lease on the directory recalls the edge's lease, which
// recalls the client's, which sends its queue through the edge first: the
// reader sees every create, without waiting for any term to end.
func TestEdgeWriteBackRecallPassesThroughBothLevels(t *testing.T) {
	p := startUpstream(t, 2)
	e := startEdge(t, p.ClusterFile())
	ctx := testCtx(t, 60*time.Second)
	w := writeBackClient(t, e.cfg)
	plain := newClient(t, p.Config())
	reader := newClient(t, p.Config())
	reader.OnRecall(func([]client.LeaseKey) {})
	d, err := w.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	// The mkdir itself is written back: it reaches the upstream first
	// (an edge's client gets no lease on a directory it made, so until
	// then its creates there go synchronously and it backs off).
	if err := w.SyncDir(ctx, core.RootIno); err != nil {
		t.Fatal(err)
	}
	queued := 0
	for round := 0; queued == 0; round++ {
		if round == 5 {
			t.Fatal("no create was completed in the write-back client through the edge in 5 rounds: the edge delegated no write lease")
		}
		for i := range 10 {
			name := fmt.Sprintf("r%df%d", round, i)
			f, err := w.CreateAt(ctx, d.Ino, name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatalf("create %s: %v", name, err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := plain.LookupAt(ctx, d.Ino, name); errs.Is(err, errs.NotExist) {
				queued++
			}
		}
		if queued == 0 {
			if err := w.SyncDir(ctx, d.Ino); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := time.Now()
	if l := reader.ReadLease(ctx, reader.DirLeases(d.Ino)...); l.Denied() {
		t.Fatal("read lease denied")
	}
	took := time.Since(start)
	names := map[string]bool{}
	if err := reader.ReadDirAt(ctx, d.Ino, false, func(e core.DirEntry) error {
		names[e.Name] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for name := range names {
		if _, err := plain.LookupAt(ctx, d.Ino, name); err != nil {
			t.Errorf("%s listed but not found: %v", name, err)
		}
	}
	if len(names) < 10 {
		t.Fatalf("the reader lists %d names after the recall; want every create (at least 10)", len(names))
	}
	if took > 1500*time.Millisecond {
		t.Errorf("the read lease took %v: a lease term ended instead of the recall passing through", took)
	}
	t.Logf("%d creates queued in the client; the recall through the edge took %v", queued, took)
}

// TestEdgeKill9LosesNothingFsynced: a write-back client of the edge
// queues creates under a delegated lease and fsyncs the directory; a kill
// -9 of the edge then loses none of them (the edge holds no change of its
// own: the fsync's batch went upstream before it returned), and the
// upstream gives the dead edge's write lease away within its term.
func TestEdgeKill9LosesNothingFsynced(t *testing.T) {
	p := startUpstream(t, 1)
	e := startEdge(t, p.ClusterFile())
	ctx := testCtx(t, 60*time.Second)
	w := writeBackClient(t, e.cfg)
	d, err := w.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	var synced []string
	for i := range 30 {
		name := fmt.Sprintf("f%d", i)
		f, err := w.CreateAt(ctx, d.Ino, name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		synced = append(synced, name)
	}
	if err := w.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	for i := range 5 { // queued, not synced: these may be lost
		f, err := w.CreateAt(ctx, d.Ino, fmt.Sprintf("late%d", i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	e.kill9(t)
	direct := newClient(t, p.Config())
	start := time.Now()
	f, err := direct.CreateAt(ctx, d.Ino, "after", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("a direct create after the edge's kill -9: %v", err)
	}
	f.Close()
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("a direct create waited %v for the dead edge's lease; want at most one upstream term (2 s)", took)
	}
	for _, name := range synced {
		if _, err := direct.LookupAt(ctx, d.Ino, name); err != nil {
			t.Errorf("%s, fsynced through the edge, after its kill -9: %v", name, err)
		}
	}
}

// TestEdgeCacheFollowsChangesUnderItsWriteLease: the edge caches reads
// under a delegated write lease too, and a change it forwards under that
// lease (a write-back client's batch) recalls nothing upstream; the edge
// drops what it cached under the lease itself, so another client of the
// edge lists the batch's creates once the fsync returned.
func TestEdgeCacheFollowsChangesUnderItsWriteLease(t *testing.T) {
	p := startUpstream(t, 1)
	e := startEdge(t, p.ClusterFile())
	ctx := testCtx(t, 60*time.Second)
	w := writeBackClient(t, e.cfg)
	other := newClient(t, e.cfg)
	d, err := w.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	list := func() map[string]bool {
		names := map[string]bool{}
		if err := other.ReadDirAt(ctx, d.Ino, true, func(e core.DirEntry) error {
			names[e.Name] = true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return names
	}
	for i := range 5 {
		name := fmt.Sprintf("f%d", i)
		f, err := w.CreateAt(ctx, d.Ino, name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.SyncDir(ctx, d.Ino); err != nil {
			t.Fatal(err)
		}
		got := list()
		got2 := list() // the second from the edge's cache, if it kept one
		for j := range i + 1 {
			n := fmt.Sprintf("f%d", j)
			if !got[n] || !got2[n] {
				t.Fatalf("after the fsync of %s, another client of the edge lists %v then %v: %s missing", name, got, got2, n)
			}
		}
	}
}
