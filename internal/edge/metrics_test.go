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

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/edge"
	"github.com/weftfs/weft/internal/waitfor"
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
	for i := range 5 {
		f, err := w.CreateAt(ctx, d.Ino, fmt.Sprintf("f%d", i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, reg, "weft_edge_write_leases_granted_total"); v < 1 {
		t.Errorf("weft_edge_write_leases_granted_total = %v after a write-back client's creates; want at least 1", v)
	}
	if v := metricValue(t, reg, "weft_edge_delegated_batches_total"); v < 1 {
		t.Errorf("weft_edge_delegated_batches_total = %v after an fsync of queued creates; want at least 1", v)
	}
	if v := metricValue(t, reg, "weft_edge_write_leases_held"); v < 1 {
		t.Errorf("weft_edge_write_leases_held = %v while the client holds its write lease; want at least 1", v)
	}

	// A direct client's create in the directory recalls the edge's lease.
	direct := newClient(t, p.Config())
	f, err := direct.CreateAt(ctx, d.Ino, "direct", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, reg, "weft_edge_write_leases_recalled_total"); v < 1 {
		t.Errorf("weft_edge_write_leases_recalled_total = %v after a direct create under the delegated lease; want at least 1", v)
	}
	// Released upstream in the background once the client gave its back.
	waitfor.Until(t, 10*time.Second, "no write lease held by the edge after the recall", func() bool {
		return metricValue(t, reg, "weft_edge_write_leases_held") == 0
	})

	// Two stats of one name: the second is answered by the cache.
	other := newClient(t, e.Cluster())
	hits := metricValue(t, reg, "weft_edge_cache_hits_total")
	for range 2 {
		if _, err := other.Stat(ctx, "/d/direct"); err != nil {
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
