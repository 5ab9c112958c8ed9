package edge_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/edge"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/proto/weftpb"
)

// metricValue is the value of the metric name in reg (0 if absent).
func metricValue(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		v := 0.0
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				v += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				v += m.GetGauge().GetValue()
			}
		}
		return v
	}
	return 0
}

// TestEdgeDelegationMetrics: the edge counts the write leases it holds
// upstream, grants on them and gives back, the changes it sends upstream
// under them, and its cache's hits; and serves them at its metrics
// address.
func TestEdgeDelegationMetrics(t *testing.T) {
	p := startUpstream(t, 1)
	ctx := testCtx(t, 60*time.Second)
	e, err := edge.Start(ctx, edge.Config{Upstream: p.Config(), Listen: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	reg := e.Registry()
	for _, name := range []string{"weft_edge_write_leases_held", "weft_edge_write_leases_granted_total",
		"weft_edge_write_leases_recalled_total", "weft_edge_delegated_changes_total", "weft_edge_delegated_batches_total"} {
		if v := metricValue(t, reg, name); v != 0 {
			t.Errorf("%s = %v before any client came; want 0", name, v)
		}
	}
	w := writeBackClient(t, e.Cluster())
	d, err := w.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	// Rounds of creates and an fsync, until one was written back (a
	// lease granted too slowly to be worth queueing under, on a loaded
	// machine, leaves a round synchronous).
	held := 0.0 // the most write leases seen held, sampled after each create
	for round := 0; metricValue(t, reg, "weft_edge_delegated_batches_total") == 0; round++ {
		if round == 5 {
			t.Fatal("weft_edge_delegated_batches_total = 0 after 5 rounds of creates and an fsync through the edge")
		}
		for i := range 5 {
			f, err := w.CreateAt(ctx, d.Ino, fmt.Sprintf("r%df%d", round, i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			held = max(held, metricValue(t, reg, "weft_edge_write_leases_held"))
		}
		if err := w.SyncDir(ctx, d.Ino); err != nil {
			t.Fatal(err)
		}
	}
	if v := metricValue(t, reg, "weft_edge_write_leases_granted_total"); v < 1 {
		t.Errorf("weft_edge_write_leases_granted_total = %v after a write-back client's batch; want at least 1", v)
	}
	if held < 1 {
		t.Errorf("weft_edge_write_leases_held was %v after every create written back; want at least 1", held)
	}

	// A direct client's create in the directory recalls the edge's
	// lease. The write-back client may have let its lease lapse by now
	// (it renews what it uses), so a client of the edge that answers
	// recalls takes one just before: a few tries, in case a stall of the
	// machine outlasted even that one.
	direct := newClient(t, p.Config())
	mux := rpc.NewMux()
	var holder *rpc.Peer
	rpc.HandleOneWay(mux, weftpb.MethodLeaseRecall, func(ctx context.Context, req *weftpb.LeaseRecallRequest) {
		_ = holder.Send(ctx, weftpb.MethodLeaseRelease, &weftpb.LeaseReleaseRequest{Session: req.Session, Keys: req.Keys, Seqs: req.Seqs})
	})
	holder = rpc.NewPeer(e.Cluster().Meta[0].Addr, rpc.DialOptions{Mux: mux})
	t.Cleanup(func() { holder.Close() })
	for try := 0; metricValue(t, reg, "weft_edge_write_leases_recalled_total") == 0; try++ {
		if try == 3 {
			t.Fatal("weft_edge_write_leases_recalled_total = 0 after three direct creates under a delegated lease")
		}
		var reply weftpb.LeaseAcquireReply
		if err := holder.Call(ctx, weftpb.MethodLeaseAcquire, &weftpb.LeaseAcquireRequest{
			Session: 43, Mode: weftpb.LeaseMode_LEASE_WRITE, Keys: []uint64{uint64(d.Ino)}}, &reply); err != nil {
			t.Fatal(err)
		}
		if len(reply.Granted) != 1 {
			t.Fatalf("the edge granted no write lease on the directory: %v", &reply)
		}
		f, err := direct.CreateAt(ctx, d.Ino, fmt.Sprintf("direct%d", try), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Released upstream in the background once the client gave its back.
	waitfor.Until(t, 10*time.Second, "no write lease held by the edge after the recall", func() bool {
		return metricValue(t, reg, "weft_edge_write_leases_held") == 0
	})

	// Two stats of one name: the second is answered by the cache.
	other := newClient(t, e.Cluster())
	hits := metricValue(t, reg, "weft_edge_cache_hits_total")
	for range 2 {
		if _, err := other.Stat(ctx, "/d/direct0"); err != nil {
			t.Fatal(err)
		}
	}
	if v := metricValue(t, reg, "weft_edge_cache_hits_total"); v <= hits {
		t.Errorf("weft_edge_cache_hits_total = %v after a stat repeated; want more than %v", v, hits)
	}

	// The same over HTTP.
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(hctx, http.MethodGet, "http://"+e.MetricsAddr()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), "weft_edge_delegated_changes_total") {
		t.Errorf("GET /metrics does not list weft_edge_delegated_changes_total:\n%.2000s", body)
	}
}

// TestEdgeDelegatesUnlink: a write-back client's unlink that goes to the
// servers (a hard-linked file's) in its delegated directory, and a link
// there, are sent upstream under the edge's write lease: the upstream
// recalls nothing from the edge, and the client keeps its lease (its next
// create is queued again). But once the edge holds a write lease on a
// file (any client may ask for one), an unlink may write a delegated key
// it does not name, and goes upstream as before, recalling the edge's
// leases.
func TestEdgeDelegatesUnlink(t *testing.T) {
	p := startUpstream(t, 1)
	ctx := testCtx(t, 60*time.Second)
	e, err := edge.Start(ctx, edge.Config{Upstream: p.Config(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	reg := e.Registry()
	direct := newClient(t, p.Config())
	if err := direct.Mkdir(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(ctx, direct, "/d/h"); err != nil {
		t.Fatal(err)
	}
	if err := direct.Link(ctx, "/d/h", "/d/h2"); err != nil {
		t.Fatal(err)
	}
	w := writeBackClient(t, e.Cluster())
	d, err := w.Stat(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string) {
		t.Helper()
		f, err := w.CreateAt(ctx, d.Ino, name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// queued reports whether name is in w's queue only (the upstream
	// does not have it yet).
	queued := func(name string) bool {
		_, err := direct.LookupAt(ctx, d.Ino, name)
		return errs.Is(err, errs.NotExist)
	}
	// A create queued (not upstream yet) shows the client holds its
	// write lease; a lease granted too slowly to queue under (a loaded
	// machine) leaves a create synchronous: tried a few times.
	createQueued := func(prefix string) bool {
		for i := range 5 {
			name := fmt.Sprintf("%s%d", prefix, i)
			create(name)
			if queued(name) {
				return true
			}
		}
		return false
	}
	if !createQueued("before") {
		t.Fatal("5 creates of the write-back client went upstream at once: the edge delegated no write lease")
	}
	recalled := metricValue(t, reg, "weft_edge_write_leases_recalled_total")
	changes := metricValue(t, reg, "weft_edge_delegated_changes_total")
	if err := w.UnlinkAt(ctx, d.Ino, "h2"); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, reg, "weft_edge_delegated_changes_total"); v <= changes {
		t.Errorf("weft_edge_delegated_changes_total = %v after the unlink; want more than %v: it did not go under the delegated lease", v, changes)
	}
	if v := metricValue(t, reg, "weft_edge_write_leases_recalled_total"); v != recalled {
		t.Errorf("weft_edge_write_leases_recalled_total went from %v to %v: the unlink recalled the edge's write lease upstream", recalled, v)
	}
	if _, err := w.LinkAt(ctx, client.Ref{Ino: d.Ino}, d.Ino, "h3"); err == nil {
		t.Fatal("a link of a directory succeeded")
	}
	h, err := w.LookupAt(ctx, d.Ino, "h")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.LinkAt(ctx, client.Ref{Ino: h.Ino, Parent: d.Ino, Name: "h"}, d.Ino, "h3"); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, reg, "weft_edge_write_leases_recalled_total"); v != recalled {
		t.Errorf("weft_edge_write_leases_recalled_total went from %v to %v: the link recalled the edge's write lease upstream", recalled, v)
	}
	if err := w.UnlinkAt(ctx, d.Ino, "h3"); err != nil {
		t.Fatal(err)
	}
	if !createQueued("after") {
		t.Error("5 creates after the unlink went upstream at once: the client lost its write lease")
	}
	if _, err := direct.LookupAt(ctx, d.Ino, "h2"); !errs.Is(err, errs.NotExist) {
		t.Errorf("h2 after its unlink through the edge: %v; want NotExist", err)
	}
	a, err := direct.LookupAt(ctx, d.Ino, "h")
	if err != nil || a.Nlink != 1 {
		t.Errorf("h after the unlink of its other link: nlink %d, %v; want 1", a.Nlink, err)
	}
	if err := w.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"before0", "after0"} {
		if _, err := direct.LookupAt(ctx, d.Ino, name); err != nil {
			t.Errorf("%s after the fsync: %v", name, err)
		}
	}

	// A write lease on h's key (h has two names again), held by a
	// client that answers recalls at once.
	if _, err := w.LinkAt(ctx, client.Ref{Ino: h.Ino, Parent: d.Ino, Name: "h"}, d.Ino, "h4"); err != nil {
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
		Session: 42, Mode: weftpb.LeaseMode_LEASE_WRITE, Keys: []uint64{uint64(h.Ino)}}, &reply); err != nil {
		t.Fatal(err)
	}
	if len(reply.Granted) != 1 {
		t.Fatalf("the edge granted no write lease on a file's key: %v", &reply)
	}
	recalled = metricValue(t, reg, "weft_edge_write_leases_recalled_total")
	if err := w.UnlinkAt(ctx, d.Ino, "h4"); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, reg, "weft_edge_write_leases_recalled_total"); v <= recalled {
		t.Errorf("weft_edge_write_leases_recalled_total stayed %v: the unlink of a name of a file the edge holds a write lease on went under the delegated lease", v)
	}
	if a, err := direct.LookupAt(ctx, d.Ino, "h"); err != nil || a.Nlink != 1 {
		t.Errorf("h after the unlink of h4: nlink %d, %v; want 1", a.Nlink, err)
	}
}
