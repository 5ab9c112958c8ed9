package rpc

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

func TestMetricsCountRequests(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := startTestServer(t, ServerOptions{Observer: NewMetrics(reg, "weft")})
	c := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)
	for range 3 {
		if _, err := echo(ctx, c, "x"); err != nil {
			t.Fatal(err)
		}
	}
	c.Call(ctx, mFail, msg("y"), &weftpb.Empty{})
	// Observations happen after the response is written: close the server to
	// wait for the handlers.
	ts.srv.Close()

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	count := func(family string, labels map[string]string) float64 {
		f := byName[family]
		if f == nil {
			t.Fatalf("no metric %s", family)
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
		return 0
	}
	// Test methods are not in the method table: they count as "unknown".
	if n := count("weft_rpc_requests_total", map[string]string{"method": "unknown", "status": "ok"}); n != 3 {
		t.Errorf("ok requests = %v; want 3", n)
	}
	if n := count("weft_rpc_requests_total", map[string]string{"method": "unknown", "status": "not_exist"}); n != 1 {
		t.Errorf("not_exist requests = %v; want 1", n)
	}
	if n := count("weft_rpc_request_duration_seconds", map[string]string{"method": "unknown"}); n != 4 {
		t.Errorf("latency samples = %v; want 4", n)
	}
	if n := count("weft_rpc_response_bytes_total", map[string]string{"method": "unknown"}); n != 3*float64(len(mustMarshal(t, msg("echo:x")))) {
		t.Errorf("response bytes = %v", n)
	}
}

func TestStatusLabelsCoverEveryKind(t *testing.T) {
	seen := map[string]errs.Kind{}
	for k := errs.Kind(0); k.Valid(); k++ {
		l := StatusLabel(errs.E(k, "op"))
		if prev, dup := seen[l]; dup || l == "" || strings.HasPrefix(l, "kind_") {
			t.Errorf("kind %d (%v) has label %q (also kind %d)", k, k, l, prev)
		}
		seen[l] = k
	}
	if StatusLabel(nil) != "ok" {
		t.Errorf("nil error label %q", StatusLabel(nil))
	}
}
