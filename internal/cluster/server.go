// Package cluster starts weft's servers inside a process: one meta or store
// server from its cluster file entry (weft meta, weft store), the embedded
// one-meta-one-store cluster of weft up, and, for tests and benchmarks,
// clusters on loopback ports.
//
// A started server owns four things that must go away in order on Close:
// the metrics HTTP server, the RPC server (which stops accepting, closes
// connections and waits for running handlers), and only then the role's
// state (Pebble, chunk files), because a handler still running against a
// closed Pebble would crash the process. Close is bounded in time; if
// handlers do not finish, the role's state is left open rather than closed
// under them, and Close reports it.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/meta"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/store"
	"github.com/weftfs/weft/proto/weftpb"
)

// CloseTimeout bounds how long Close waits for running requests.
const CloseTimeout = 10 * time.Second

// Options adjust how StartMeta and StartStore run a server. The zero value
// runs the server exactly as its cluster file entry says.
type Options struct {
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Dir, if set, replaces the entry's data directory.
	Dir string
	// MetricsAddr, if set, replaces the entry's metrics_addr.
	MetricsAddr string
	// Listener, if set, is served instead of listening on the entry's
	// address. The server closes it.
	Listener net.Listener
	// MetricsListener, if set, serves metrics instead of listening on the
	// metrics address. The server closes it.
	MetricsListener net.Listener
	// Registry, if set, receives the server's metrics; its owner is
	// expected to have added the Go and process collectors. If nil, the
	// server gets its own registry with them.
	Registry *prometheus.Registry
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// NoSearchIndex runs a meta server without its search index (weft
	// find refused), for measuring what the index costs.
	NoSearchIndex bool
}

// Server is one running meta or store server.
type Server struct {
	role    string
	id      int
	log     *slog.Logger
	addr    string
	rpc     *rpc.Server
	served  chan struct{} // closed when the RPC Serve loop returns
	state   io.Closer     // *meta.Server or *store.Server
	metrics *metricsServer
	reg     *prometheus.Registry

	closeOnce sync.Once
	closeErr  error
}

// StartMeta opens meta server id of cfg and serves it. ctx bounds the start
// only; the server runs until Close.
func StartMeta(ctx context.Context, cfg *config.Cluster, id int, opts Options) (*Server, error) {
	if id < 0 || id >= len(cfg.Meta) {
		return nil, errs.New(errs.Invalid, "start meta", "id %d: the cluster file has meta servers 0..%d", id, len(cfg.Meta)-1)
	}
	entry := cfg.Meta[id]
	dir := pick(opts.Dir, entry.Dir)
	if dir == "" {
		return nil, errs.New(errs.Invalid, "start meta", "meta[%d].dir is empty: set dir in the cluster file or pass --data", id)
	}
	var peers []string
	if len(cfg.Meta) > 1 {
		for _, m := range cfg.Meta {
			peers = append(peers, m.Addr)
		}
	}
	var stores []string
	for _, st := range cfg.Store {
		stores = append(stores, st.Addr)
	}
	sec, err := loadSecurity(cfg, entry.Identity)
	if err != nil {
		return nil, errs.WithPath(err, "start meta", fmt.Sprintf("meta[%d]", id))
	}
	return start(ctx, "meta", id, entry.Addr, pick(opts.MetricsAddr, entry.MetricsAddr), opts, sec,
		func(log *slog.Logger, reg *prometheus.Registry, mux *rpc.Mux, _ string) (io.Closer, error) {
			minter, err := metaMinter(cfg, id, opts.Now)
			if err != nil {
				return nil, err
			}
			leaseTerm, leaseGrace := cfg.Lease()
			s, err := meta.Open(meta.Config{
				ID:             id,
				Dir:            dir,
				Durability:     cfg.Durability,
				InlineLimit:    cfg.InlineLimit,
				Logger:         log,
				Registry:       reg,
				Now:            opts.Now,
				Peers:          peers,
				SplitThreshold: cfg.SplitThreshold,
				SplitBits:      cfg.SplitBits,
				Stores:         stores,
				ChunkSize:      int64(cfg.ChunkSize),
				Replication:    cfg.Replication,
				Dial:           sec.dial(),
				Capabilities:   minter,
				LeaseTerm:      leaseTerm,
				LeaseGrace:     leaseGrace,
				NoSearchIndex:  opts.NoSearchIndex,
			})
			if err != nil {
				return nil, err
			}
			s.Register(mux)
			return s, nil
		})
}

// StartStore opens store server id of cfg and serves it. ctx bounds the
// start only; the server runs until Close.
func StartStore(ctx context.Context, cfg *config.Cluster, id int, opts Options) (*Server, error) {
	if id < 0 || id >= len(cfg.Store) {
		return nil, errs.New(errs.Invalid, "start store", "id %d: the cluster file has store servers 0..%d", id, len(cfg.Store)-1)
	}
	entry := cfg.Store[id]
	dir := pick(opts.Dir, entry.Dir)
	if dir == "" && entry.Backend == config.BackendDisk {
		return nil, errs.New(errs.Invalid, "start store", "store[%d].dir is empty: the disk backend needs a data directory; set dir in the cluster file or pass --data", id)
	}
	var addrs []string
	for _, st := range cfg.Store {
		addrs = append(addrs, st.Addr)
	}
	sec, err := loadSecurity(cfg, entry.Identity)
	if err != nil {
		return nil, errs.WithPath(err, "start store", fmt.Sprintf("store[%d]", id))
	}
	return start(ctx, "store", id, entry.Addr, pick(opts.MetricsAddr, entry.MetricsAddr), opts, sec,
		func(log *slog.Logger, reg *prometheus.Registry, mux *rpc.Mux, addr string) (io.Closer, error) {
			replacement := false
			if entry.Backend == config.BackendMem || store.Unformatted(dir) {
				replacement = peersHoldChunks(ctx, addrs, id, sec.dial(), log)
			}
			verifier, repairCap, err := storeCapabilities(cfg, id, opts.Now)
			if err != nil {
				return nil, err
			}
			s, err := store.Open(store.Config{
				ID:           id,
				Dir:          dir,
				Backend:      entry.Backend,
				MemLimit:     int64(entry.MemLimit),
				Replacement:  replacement,
				Logger:       log,
				Registry:     reg,
				Capabilities: verifier,
			})
			if err != nil {
				return nil, err
			}
			s.Register(mux)
			st := &storeState{Server: s}
			st.repair, err = store.StartRepair(store.RepairConfig{
				ID: id, Peers: addrs, Replication: cfg.Replication, Logger: log, Registry: reg, Dial: sec.dial(),
				Capability: repairCap,
			})
			if err != nil {
				s.Close()
				return nil, err
			}
			st.same, err = s.ServeSameHost(rpc.SameHostName(addr))
			if err != nil {
				// Clients on this machine then send their bytes over TCP.
				log.Warn("no same-host path", "err", err)
			}
			return st, nil
		})
}

// peersHoldChunks reports whether any other store of the cluster that
// answers holds chunks: a store starting empty then replaces one that held
// data (a lost disk, a restarted RAM store) and must not answer for chunks
// it lacks until repair has refilled it. Stores that do not answer within
// a short bound are left out: a whole cluster restarted with a lost disk
// and its peers still down is not detected (docs/design.md).
func peersHoldChunks(ctx context.Context, addrs []string, self int, dial rpc.DialOptions, log *slog.Logger) bool {
	found := make(chan bool, len(addrs))
	for i, a := range addrs {
		if i == self {
			found <- false
			continue
		}
		go func() {
			p := rpc.NewPeer(a, dial)
			defer p.Close()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var r weftpb.StoreStatFSReply
			err := p.Call(cctx, weftpb.MethodStoreStatFS, &weftpb.StoreStatFSRequest{}, &r)
			found <- err == nil && r.GetChunks() > 0
		}()
	}
	any := false
	for range addrs {
		any = <-found || any
	}
	if any {
		log.Warn("this store starts empty in a cluster that holds data: it serves no reads until repair has copied its chunks back")
	}
	return any
}

// storeState is a store server with its same-host path, closed first.
type storeState struct {
	*store.Server
	same   *rpc.SameHostServer // nil without a same-host path
	repair *store.Repairer
}

func (s *storeState) Close() error {
	s.repair.Stop()
	var err error
	if s.same != nil {
		err = s.same.Close()
	}
	return errors.Join(err, s.Server.Close())
}

// openFunc opens a role's state and registers its methods on mux; addr is
// the address the server listens on.
type openFunc func(log *slog.Logger, reg *prometheus.Registry, mux *rpc.Mux, addr string) (io.Closer, error)

// start does what both roles share: registry, listeners, role state, RPC
// and metrics servers. On failure everything opened so far is closed.
func start(ctx context.Context, role string, id int, addr, metricsAddr string, opts Options, sec *security, open openFunc) (_ *Server, err error) {
	op := "start " + role
	if err := ctx.Err(); err != nil {
		return nil, errs.Wrap(errs.Canceled, op, "", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// One attribute naming the server; the role packages add their own
	// details (meta logs "id", store "store_id").
	log = log.With("server", fmt.Sprintf("%s%d", role, id))
	reg := opts.Registry
	if reg == nil {
		reg = NewRegistry()
	}

	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()

	ln := opts.Listener
	if ln == nil {
		var lc net.ListenConfig
		if ln, err = lc.Listen(ctx, "tcp", addr); err != nil {
			return nil, errs.Wrap(listenKind(err), op, fmt.Sprintf("%s[%d] listen %s", role, id, addr), err)
		}
	}
	cleanup = append(cleanup, func() { ln.Close() })

	var ms *metricsServer
	if opts.MetricsListener != nil || metricsAddr != "" {
		ms, err = startMetrics(ctx, reg, metricsAddr, opts.MetricsListener, log)
		if err != nil {
			return nil, errs.WithPath(err, op, fmt.Sprintf("%s[%d] metrics", role, id))
		}
		cleanup = append(cleanup, func() { ms.close(context.Background()) })
	}

	mux := rpc.NewMux()
	state, err := open(log, reg, mux, ln.Addr().String())
	if err != nil {
		return nil, errs.WithPath(err, op, fmt.Sprintf("%s[%d]", role, id))
	}

	s := &Server{
		role:    role,
		id:      id,
		log:     log,
		addr:    ln.Addr().String(),
		state:   state,
		metrics: ms,
		reg:     reg,
		served:  make(chan struct{}),
	}
	sopts := rpc.ServerOptions{
		Logger:   log,
		Observer: rpc.NewMetrics(reg, "weft_"+role),
	}
	sec.serverOptions(&sopts)
	s.rpc = rpc.NewServer(mux, sopts)
	go func() {
		defer close(s.served)
		if err := s.rpc.Serve(ln); err != nil {
			log.Error("rpc server stopped", "err", err)
		}
	}()
	attrs := []any{"addr", s.addr}
	if ms != nil {
		attrs = append(attrs, "metrics_addr", ms.addr)
	}
	log.Info(role+" server started", attrs...)
	return s, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.addr }

// MetricsAddr returns the address of the metrics HTTP server, or "" if it
// serves none.
func (s *Server) MetricsAddr() string {
	if s.metrics == nil {
		return ""
	}
	return s.metrics.addr
}

// Registry returns the Prometheus registry holding the server's metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Close stops the server gracefully within CloseTimeout. It is safe to call
// more than once; later calls return the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close(CloseTimeout) })
	return s.closeErr
}

func (s *Server) close(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var errList []error
	if s.metrics != nil {
		if err := s.metrics.close(ctx); err != nil {
			errList = append(errList, err)
		}
	}

	rpcDone := make(chan error, 1)
	go func() { rpcDone <- s.rpc.Close() }()
	select {
	case err := <-rpcDone:
		if err != nil {
			errList = append(errList, errs.Wrap(errs.IO, "close "+s.role, "rpc", err))
		}
	case <-ctx.Done():
		// Requests still running use the role's state: leave it open.
		s.log.Error("requests still running at close; data directory left open", "waited", timeout)
		errList = append(errList, errs.New(errs.Timeout, "close "+s.role,
			"requests still running after %v; %s[%d] state left open", timeout, s.role, s.id))
		return errors.Join(errList...)
	}
	<-s.served

	if err := s.state.Close(); err != nil {
		errList = append(errList, errs.WithPath(err, "close "+s.role, fmt.Sprintf("%s[%d]", s.role, s.id)))
	}
	s.log.Info(s.role + " server stopped")
	return errors.Join(errList...)
}

func pick(override, fromFile string) string {
	if override != "" {
		return override
	}
	return fromFile
}

// serveHTTP runs srv on ln; http.ErrServerClosed after Shutdown is expected.
func serveHTTP(srv *http.Server, ln net.Listener, log *slog.Logger) {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("metrics server stopped", "err", err)
	}
}

// listenKind classifies a failure to listen on a server's address: the
// address is taken (another server, or an earlier one not yet gone), or
// the port needs privileges. Neither is an unreachable server (exit code 4).
func listenKind(err error) errs.Kind {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return errs.Busy
	case errors.Is(err, syscall.EACCES):
		return errs.Permission
	}
	return errs.Other
}
