package edge

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weftfs/weft/internal/errs"
)

// metrics are the edge's counters, on its own registry (Server.Registry;
// served at Config.MetricsAddr). They say how much the site's work stays
// at the edge: the delegated write leases it holds upstream, the write
// leases it grants its clients on them, the recalls that take them back,
// and the changes it sends upstream under them; and how often a read is
// answered from its cache.
type metrics struct {
	writeGranted   prometheus.Counter
	writeRecalled  prometheus.Counter
	delegated      prometheus.Counter
	delegatedBatch prometheus.Counter
	cacheHits      prometheus.Counter
	cacheMisses    prometheus.Counter
	// The edge's own write-back (writeback.go).
	wbQueued  prometheus.Counter
	wbBatches prometheus.Counter
	wbLost    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	m := &metrics{
		writeGranted: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_edge_write_leases_granted_total",
			Help: "Write leases granted to the edge's clients on write leases the edge holds upstream (renewals included), per key."}),
		writeRecalled: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_edge_write_leases_recalled_total",
			Help: "Upstream recalls of the edge's write leases (passed on to its clients before the edge releases), per key."}),
		delegated: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_edge_delegated_changes_total",
			Help: "Client changes the edge sent upstream under its delegated write leases (a write-back batch counts once)."}),
		delegatedBatch: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_edge_delegated_batches_total",
			Help: "Write-back batches among weft_edge_delegated_changes_total."}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_edge_cache_hits_total",
			Help: "Lookups, getattrs and readdirs answered from the edge's cache."}),
		cacheMisses: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_edge_cache_misses_total",
			Help: "Lookups, getattrs and readdirs sent upstream."}),
		wbQueued: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_edge_writeback_setattrs_total",
			Help: "Setattrs the edge completed itself under its write leases (--durability writeback)."}),
		wbBatches: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_edge_writeback_batches_total",
			Help: "Batches of the edge's own queued setattrs applied upstream."}),
		wbLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_edge_writeback_lost_total",
			Help: "Setattrs the edge answered and could not send upstream (its write lease ended, or the upstream refused)."}),
	}
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weft_edge_write_leases_held",
		Help: "Write leases the edge holds upstream and trusts now (its delegated keys)."},
		func() float64 { return float64(s.writeLeasesHeld()) })
	reg.MustRegister(m.writeGranted, m.writeRecalled, m.delegated, m.delegatedBatch, m.cacheHits, m.cacheMisses, m.wbQueued, m.wbBatches, m.wbLost, held)
	return m
}

// writeLeasesHeld counts the write leases the edge holds upstream and
// still trusts.
func (s *Server) writeLeasesHeld() int {
	n := 0
	now := time.Now()
	for _, u := range s.ups {
		u.mu.Lock()
		for _, h := range u.mu.held {
			if h.write && now.Before(h.trusted) {
				n++
			}
		}
		u.mu.Unlock()
	}
	return n
}

// newRegistry is the edge's registry, with the Go runtime's and the
// process's collectors (as every weft server's).
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// serveMetrics serves reg at addr/metrics until Close.
func (s *Server) serveMetrics(ctx context.Context, reg *prometheus.Registry, addr string) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return errs.Wrap(errs.Unavailable, "edge metrics", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	s.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	s.metricsAddr = ln.Addr().String()
	s.served.Go(func() {
		if err := s.metricsSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("edge metrics server stopped", "err", err)
		}
	})
	return nil
}

// Registry is the edge's metrics registry.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// MetricsAddr is where the edge serves its metrics ("" if nowhere).
func (s *Server) MetricsAddr() string { return s.metricsAddr }
