package edge

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/internal/rpc"
)

// DefaultTerm is the term of the read leases the edge grants its clients:
// half the upstream's default, so that a grant always ends before the
// upstream lease it rests on, renewed when less than this is left.
const DefaultTerm = lease.DefaultTerm / 2

// Config configures an edge server.
type Config struct {
	// Upstream is the authoritative cluster's file.
	Upstream *config.Cluster
	// Listen is host:port of the listener for upstream meta server 0;
	// listener i takes port+i. Port 0: each listener takes a free port.
	Listen string
	// Term is the term of the clients' read leases; default DefaultTerm.
	Term time.Duration
	// Dial is the template of the upstream connections (timeouts).
	Dial rpc.DialOptions
	// IdentityDir is the edge's identity (weft ca issue --role edge),
	// which a secured upstream needs: the edge dials upstream with it and
	// serves its clients with it (security.go).
	IdentityDir string
	// MetricsAddr, if set, is where the edge serves its Prometheus
	// metrics (metrics.go) at /metrics.
	MetricsAddr string
	// WriteBack: the edge completes its clients' chmods and utimes of
	// one-link files itself under write leases it holds upstream, and
	// sends them upstream within WriteBackWindow (default
	// DefaultWriteBackWindow), at a client's sync_meta (fsync) or at a
	// recall (writeback.go). Off: every change is durable upstream
	// before the edge answers it.
	WriteBack       bool
	WriteBackWindow time.Duration
	Log             *slog.Logger

	// ignoreRecalls breaks the edge on purpose, for the test that shows
	// the two-site history check can fail (export_test.go): an upstream
	// recall is released at once, with nothing dropped or recalled here.
	ignoreRecalls bool
}

// Server is a running edge server.
type Server struct {
	log     *slog.Logger
	cfg     *config.Cluster // the edge's cluster file
	ups     []*upstream
	servers []*rpc.Server
	served  sync.WaitGroup
	life    context.Context
	stop    context.CancelFunc
	reg     *prometheus.Registry
	metrics *metrics
	dirs    dirSet // directories seen in replies (dirs.go)
	// writeBack and wbWindow: Config.WriteBack, WriteBackWindow.
	writeBack bool
	wbWindow  time.Duration
	// metricsSrv serves reg at metricsAddr, if Config.MetricsAddr is set.
	metricsSrv  *http.Server
	metricsAddr string
	bg          struct {
		sync.Mutex
		closed bool
		wg     sync.WaitGroup // recalls in progress
	}
}

// spawn runs fn in the background unless the server is closing.
func (s *Server) spawn(fn func()) {
	s.bg.Lock()
	defer s.bg.Unlock()
	if s.bg.closed {
		return
	}
	s.bg.wg.Go(fn)
}

// Start listens and serves until Close.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	const op = "edge start"
	if cfg.Upstream == nil || len(cfg.Upstream.Meta) == 0 {
		return nil, errs.New(errs.Invalid, op, "no upstream meta servers")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	serve, err := secure(&cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Term <= 0 {
		cfg.Term = DefaultTerm
	}
	host, portText, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, errs.Wrap(errs.Invalid, op, "--listen "+cfg.Listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port+len(cfg.Upstream.Meta) > 65536 {
		return nil, errs.New(errs.Invalid, op, "--listen %s: port must be a number from 0 to %d", cfg.Listen, 65536-len(cfg.Upstream.Meta))
	}
	if cfg.WriteBackWindow <= 0 {
		cfg.WriteBackWindow = DefaultWriteBackWindow
	}
	s := &Server{log: cfg.Log, cfg: cfg.Upstream.Clone(), reg: newRegistry(), writeBack: cfg.WriteBack, wbWindow: cfg.WriteBackWindow}
	s.metrics = newMetrics(s.reg, s)
	for i := range s.cfg.Store {
		// A client file: where each store keeps its data is not the
		// site's business. (Its identity directory stays: a secured
		// cluster's file names one for every server.)
		s.cfg.Store[i].Dir, s.cfg.Store[i].MetricsAddr = "", ""
	}
	s.cfg.CapabilitySecret = "" // the stores' and meta servers' secret: not for clients
	s.life, s.stop = context.WithCancel(context.Background())
	session, wsession := newSession(), newSession()
	for wsession == session {
		wsession = newSession()
	}
	var lns []net.Listener
	for i, m := range cfg.Upstream.Meta {
		addr := net.JoinHostPort(host, "0")
		if port != 0 {
			addr = net.JoinHostPort(host, strconv.Itoa(port+i))
		}
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			s.stop()
			return nil, errs.Wrap(errs.Unavailable, op, addr, err)
		}
		lns = append(lns, ln)
		u := newUpstream(s, i, m.Addr, session, wsession, cfg)
		s.ups = append(s.ups, u)
		s.cfg.Meta[i] = config.MetaServer{Addr: ln.Addr().String(), Identity: cfg.IdentityDir}
	}
	if cfg.MetricsAddr != "" {
		if err := s.serveMetrics(ctx, s.reg, cfg.MetricsAddr); err != nil {
			for _, l := range lns {
				l.Close()
			}
			s.stop()
			return nil, err
		}
	}
	for i, ln := range lns {
		srv := rpc.NewServer(s.ups[i].mux(), serve)
		s.servers = append(s.servers, srv)
		s.served.Go(func() { _ = srv.Serve(ln) })
	}
	return s, nil
}

// newSession returns a random nonzero session id: the edge's cache
// session (read leases) or write session on every upstream meta server.
func newSession() uint64 {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// Cluster returns the edge's cluster file: the edge's listeners as the meta
// servers, the upstream's stores as the stores, the upstream's settings.
func (s *Server) Cluster() *config.Cluster { return s.cfg.Clone() }

// Addrs returns the listeners' addresses, in upstream server order.
func (s *Server) Addrs() []string {
	out := make([]string, len(s.cfg.Meta))
	for i, m := range s.cfg.Meta {
		out[i] = m.Addr
	}
	return out
}

// Close stops serving, waits for the recalls in progress (bounded by the
// clients' lease term) and closes the upstream connections.
func (s *Server) Close() error {
	for _, srv := range s.servers {
		srv.Close()
	}
	if s.metricsSrv != nil {
		s.metricsSrv.Close()
	}
	s.served.Wait()
	// What the edge answered and still holds goes upstream before the
	// connections close (bounded: a kill -9 would lose it anyway).
	ctx, cancel := context.WithTimeout(s.life, wbCloseWait)
	for _, u := range s.ups {
		u.wbClose(ctx)
	}
	cancel()
	s.stop()
	s.bg.Lock()
	s.bg.closed = true
	s.bg.Unlock()
	s.bg.wg.Wait()
	for _, u := range s.ups {
		u.close()
	}
	return nil
}
