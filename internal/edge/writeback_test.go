package edge_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/edge"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// chmodQueued chmods ref through c (a client of a write-back edge) to
// modes in turn until the upstream, read by direct (no lease, so it
// recalls nothing), does not have the new mode yet: the edge completed the
// chmod itself. It returns the last mode set. The edge's first setattr of
// a file goes upstream (it learns the file's attributes from it), and a
// write lease the loaded machine grants too slowly leaves one synchronous:
// tried a few times.
func chmodQueued(t *testing.T, ctx context.Context, c, direct *client.Client, ref client.Ref) uint32 {
	t.Helper()
	for i := range 6 {
		mode := uint32(0o600 | i%2*0o044)
		a, err := c.SetAttr(ctx, ref, client.SetAttr{Mode: &mode})
		if err != nil {
			t.Fatalf("chmod through the edge: %v", err)
		}
		if a.Mode&0o7777 != mode {
			t.Fatalf("chmod through the edge answered mode %#o; want %#o", a.Mode&0o7777, mode)
		}
		up, err := direct.LookupAt(ctx, ref.Parent, ref.Name)
		if err != nil {
			t.Fatal(err)
		}
		if up.Mode&0o7777 != mode {
			return mode
		}
	}
	t.Fatal("6 chmods through the write-back edge were all upstream at once: the edge completed none itself")
	return 0
}

// TestEdgeWriteBackSetAttrSeenAfterRecall: a write-back edge completes a
// chmod itself under its write leases (the upstream does not have it yet),
// and a direct client's read lease on the directory recalls the edge's
// lease, which sends the queued chmod first: the reader sees it. Another
// client of the edge sees it at once (the edge sends its queue before it
// forwards a read of the keys).
func TestEdgeWriteBackSetAttrSeenAfterRecall(t *testing.T) {
	p := startUpstream(t, 1)
	ctx := testCtx(t, 60*time.Second)
	// A window far past the test: only a recall, a read through the
	// edge or the lease's own end sends the queue.
	e, err := edge.Start(ctx, edge.Config{Upstream: p.Config(), Listen: "127.0.0.1:0", WriteBack: true, WriteBackWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	direct := newClient(t, p.Config())
	reader := newClient(t, p.Config())
	reader.OnRecall(func([]client.LeaseKey) {})
	if err := direct.Mkdir(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(ctx, direct, "/d/f"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, e.Cluster())
	other := newClient(t, e.Cluster())
	a, err := c.Stat(ctx, "/d/f")
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Stat(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	ref := client.Ref{Ino: a.Ino, Parent: d.Ino, Name: "f"}
	mode := chmodQueued(t, ctx, c, direct, ref)
	if v := metricValue(t, e.Registry(), "weft_edge_writeback_setattrs_total"); v < 1 {
		t.Errorf("weft_edge_writeback_setattrs_total = %v after a chmod the upstream does not have; want at least 1", v)
	}
	mustMode(t, other, ctx, "/d/f", mode, "another client of the edge")

	mode = chmodQueued(t, ctx, c, direct, ref)
	start := time.Now()
	if l := reader.ReadLease(ctx, reader.DirLeases(d.Ino)...); l.Denied() {
		t.Fatal("read lease denied")
	}
	took := time.Since(start)
	mustMode(t, reader, ctx, "/d/f", mode, "a direct client after its read lease recalled the edge's")
	if took > 1500*time.Millisecond {
		t.Errorf("the read lease took %v: a lease term ended instead of the recall sending the queue", took)
	}
}

// TestEdgeWriteBackKill9LosesNothingFsynced: the chmods a write-back edge
// completed itself are upstream once the client's fsync returned (the
// client sends a sync_meta when a reply said queued, and the edge sends
// its queue before it answers); a kill -9 of the edge then loses none of
// them, and the upstream gives the dead edge's write leases away within
// its term.
func TestEdgeWriteBackKill9LosesNothingFsynced(t *testing.T) {
	p := startUpstream(t, 1)
	e := startEdge(t, p.ClusterFile(), "--durability", "writeback", "--writeback-window", "1h")
	ctx := testCtx(t, 90*time.Second)
	direct := newClient(t, p.Config())
	if err := direct.Mkdir(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"/d/f", "/d/g"} {
		if err := writeFile(ctx, direct, name); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, e.cfg)
	d, err := c.Stat(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	refOf := func(name string) client.Ref {
		a, err := c.LookupAt(ctx, d.Ino, name)
		if err != nil {
			t.Fatal(err)
		}
		return client.Ref{Ino: a.Ino, Parent: d.Ino, Name: name}
	}
	fRef, gRef := refOf("f"), refOf("g")
	// Opened first: an open goes upstream, and sends the queue before it.
	f, err := c.OpenRef(ctx, fRef, os.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	fMode := chmodQueued(t, ctx, c, direct, fRef)
	gMode := chmodQueued(t, ctx, c, direct, gRef)
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync through the edge: %v", err)
	}
	f.Close()
	// Queued after the fsync: may be lost.
	late := uint32(0o640)
	if _, err := c.SetAttr(ctx, gRef, client.SetAttr{Mode: &late}); err != nil {
		t.Fatal(err)
	}
	e.kill9(t)
	for name, want := range map[string]uint32{"f": fMode, "g": gMode} {
		a, err := direct.LookupAt(ctx, d.Ino, name)
		if err != nil {
			t.Fatal(err)
		}
		got := a.Mode & 0o7777
		if name == "g" && got == late {
			continue // the late chmod made it too
		}
		if got != want {
			t.Errorf("%s after the edge's kill -9: mode %#o; want %#o, fsynced through the edge", name, got, want)
		}
	}
	start := time.Now()
	mode := uint32(0o604)
	if err := direct.Chmod(ctx, "/d/f", mode); err != nil {
		t.Fatalf("a direct chmod after the edge's kill -9: %v", err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("a direct chmod waited %v for the dead edge's lease; want at most one upstream term (2 s)", took)
	}
	mustMode(t, direct, ctx, "/d/f", mode, "direct")
}

// TestEdgeDelegatesRenameAndRmdir: a write-back client of the edge holding
// its delegated write lease on a directory renames over a name there and
// removes an empty subdirectory, synchronously (the client writes back
// neither); both go upstream under the edge's write lease and recall
// nothing, so the client keeps its lease. While the edge holds a write
// lease on another key of the server too (which the rmdir might write
// without naming it), an rmdir goes on fwd and recalls the edge's lease.
func TestEdgeDelegatesRenameAndRmdir(t *testing.T) {
	p := startUpstream(t, 1)
	ctx := testCtx(t, 60*time.Second)
	e, err := edge.Start(ctx, edge.Config{Upstream: p.Config(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	reg := e.Registry()
	direct := newClient(t, p.Config())
	for _, dir := range []string{"/d", "/d/sub", "/d/sub2", "/e"} {
		if err := direct.Mkdir(ctx, dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"/d/a", "/d/b"} {
		if err := writeFile(ctx, direct, name); err != nil {
			t.Fatal(err)
		}
	}
	a, err := direct.Stat(ctx, "/d/a")
	if err != nil {
		t.Fatal(err)
	}
	w := writeBackClient(t, e.Cluster())
	d, err := w.Stat(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	createQueued := func(prefix string) bool {
		for i := range 5 {
			name := prefix + string(rune('0'+i))
			f, err := w.CreateAt(ctx, d.Ino, name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := direct.LookupAt(ctx, d.Ino, name); err != nil {
				return true // queued in w: it holds the lease
			}
		}
		return false
	}
	if !createQueued("before") {
		t.Fatal("5 creates of the write-back client went upstream at once: the edge delegated no write lease")
	}
	recalled := metricValue(t, reg, "weft_edge_write_leases_recalled_total")
	changes := metricValue(t, reg, "weft_edge_delegated_changes_total")
	if err := w.RenameAt(ctx, d.Ino, "a", d.Ino, "b", 0); err != nil {
		t.Fatal(err)
	}
	if err := w.RmdirAt(ctx, d.Ino, "sub"); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, reg, "weft_edge_write_leases_recalled_total"); v != recalled {
		t.Errorf("weft_edge_write_leases_recalled_total went from %v to %v: the rename or rmdir recalled the edge's write lease upstream", recalled, v)
	}
	if v := metricValue(t, reg, "weft_edge_delegated_changes_total"); v < changes+2 {
		t.Errorf("weft_edge_delegated_changes_total = %v after a rename and an rmdir; want at least %v: they did not go under the delegated lease", v, changes+2)
	}
	if !createQueued("after") {
		t.Error("5 creates after the rename and rmdir went upstream at once: the client lost its write lease")
	}
	if b, err := direct.LookupAt(ctx, d.Ino, "b"); err != nil || b.Ino != a.Ino {
		t.Errorf("b after the rename of a over it: ino %d, %v; want %d", b.Ino, err, a.Ino)
	}
	mustNotExist(t, direct, ctx, "/d/a", "direct")
	mustNotExist(t, direct, ctx, "/d/sub", "direct")

	// A write lease on /e too, held at the edge by a client that answers
	// recalls at once: an rmdir in /d no longer names every delegated key.
	ed, err := direct.Stat(ctx, "/e")
	if err != nil {
		t.Fatal(err)
	}
	mux := rpc.NewMux()
	var peer *rpc.Peer
	rpc.HandleOneWay(mux, weftpb.MethodLeaseRecall, func(ctx context.Context, req *weftpb.LeaseRecallRequest) {
		_ = peer.Send(ctx, weftpb.MethodLeaseRelease, &weftpb.LeaseReleaseRequest{Session: req.Session, Keys: req.Keys, Seqs: req.Seqs})
	})
	peer = rpc.NewPeer(e.Cluster().Meta[0].Addr, rpc.DialOptions{Mux: mux})
	t.Cleanup(func() { peer.Close() })
	var reply weftpb.LeaseAcquireReply
	if err := peer.Call(ctx, weftpb.MethodLeaseAcquire, &weftpb.LeaseAcquireRequest{
		Session: 42, Mode: weftpb.LeaseMode_LEASE_WRITE, Keys: []uint64{uint64(ed.Ino)}}, &reply); err != nil {
		t.Fatal(err)
	}
	if len(reply.Granted) != 1 {
		t.Fatalf("the edge granted no write lease on /e: %v", &reply)
	}
	if !createQueued("again") {
		t.Fatal("5 creates went upstream at once: the client holds no write lease on /d")
	}
	recalled = metricValue(t, reg, "weft_edge_write_leases_recalled_total")
	if err := w.RmdirAt(ctx, d.Ino, "sub2"); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, reg, "weft_edge_write_leases_recalled_total"); v <= recalled {
		t.Errorf("weft_edge_write_leases_recalled_total stayed %v: an rmdir went under the delegated lease while the edge held another write lease it does not name", v)
	}
	mustNotExist(t, direct, ctx, "/d/sub2", "direct")
	if err := w.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"before0", "after0", "again0"} {
		if _, err := direct.LookupAt(ctx, d.Ino, name); err != nil {
			t.Errorf("%s after the fsync: %v", name, err)
		}
	}
}
