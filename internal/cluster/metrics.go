package cluster

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weftfs/weft/internal/errs"
)

// NewRegistry returns a Prometheus registry with the Go runtime and process
// collectors. Each server instance gets its own (never the global default
// registry), so that tests can start many servers in one process.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// metricsServer serves one registry at /metrics, and the process's profiles
// at /debug/pprof/, over HTTP.
type metricsServer struct {
	addr string
	srv  *http.Server
	done chan struct{}
}

// startMetrics serves reg on ln, or, if ln is nil, on a new listener at addr.
func startMetrics(ctx context.Context, reg *prometheus.Registry, addr string, ln net.Listener, log *slog.Logger) (*metricsServer, error) {
	if ln == nil {
		var lc net.ListenConfig
		var err error
		if ln, err = lc.Listen(ctx, "tcp", addr); err != nil {
			return nil, errs.Wrap(listenKind(err), "listen", addr, err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// Go's profiles, as JuiceFS and CephFS serve theirs: the metrics address
	// is an operator's port, never a client's.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	m := &metricsServer{
		addr: ln.Addr().String(),
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(m.done)
		serveHTTP(m.srv, ln, log)
	}()
	return m, nil
}

// close shuts the HTTP server down, waiting for scrapes in progress until ctx
// ends, then drops the connections that remain.
func (m *metricsServer) close(ctx context.Context) error {
	err := m.srv.Shutdown(ctx)
	if err != nil {
		m.srv.Close()
	}
	<-m.done
	return errs.Wrap(errs.IO, "close metrics server", m.addr, err)
}
