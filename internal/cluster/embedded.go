package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
)

// ClusterFileName is the name of the cluster file weft up writes in its data
// directory.
const ClusterFileName = "weft.toml"

// DefaultEmbeddedMemLimit bounds the mem backend of weft up when no limit is
// given.
const DefaultEmbeddedMemLimit = 1 << 30

// EmbeddedOptions configure StartEmbedded. Empty settings keep what the
// existing cluster file says, or take the defaults on a first start.
type EmbeddedOptions struct {
	// Dir holds the cluster file and both servers' data. Required.
	Dir string
	// Durability is "sync" or "async".
	Durability string
	// Backend is the store's backend, "disk" or "mem". It cannot change
	// once the directory holds a cluster.
	Backend string
	// MemLimit bounds the mem backend; 0 means the file's or
	// DefaultEmbeddedMemLimit.
	MemLimit int64
	// Logger receives both servers' logs; nil discards them.
	Logger *slog.Logger
	// MetricsAddr, if set, serves both servers' metrics at /metrics. Port 0
	// picks a free port, which is then recorded in the cluster file.
	MetricsAddr string
	// Security is a new cluster's security mode; "" means secure. An
	// existing cluster keeps its file's.
	Security string
}

// Embedded is one meta and one store server running in this process, as weft
// up runs them.
type Embedded struct {
	file  string
	cfg   *config.Cluster
	meta  *Server
	store *Server

	closeOnce sync.Once
	closeErr  error
}

// StartEmbedded starts one meta and one store server with their data under
// opts.Dir and writes Dir/weft.toml describing them. On a first start it
// picks free loopback ports; when Dir already holds a cluster file it reuses
// that file's addresses and settings, so clients configured with the file
// keep working across restarts.
//
// Both servers share one metrics registry, served by the meta server's
// metrics address: one process, one scrape target.
func StartEmbedded(ctx context.Context, opts EmbeddedOptions) (_ *Embedded, err error) {
	const op = "start embedded cluster"
	if opts.Dir == "" {
		return nil, errs.New(errs.Invalid, op, "no data directory given")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, errs.Wrap(errs.Invalid, op, opts.Dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, errs.Wrap(errs.IO, op, dir, err)
	}
	file := filepath.Join(dir, ClusterFileName)

	cfg, err := embeddedConfig(file, dir, opts)
	if err != nil {
		return nil, err
	}

	var listeners []net.Listener
	defer func() {
		if err != nil {
			for _, ln := range listeners {
				ln.Close()
			}
		}
	}()
	listen := func(addr *string) (net.Listener, error) {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", *addr)
		if err != nil {
			return nil, errs.Wrap(listenKind(err), op, *addr,
				fmt.Errorf("%w (is another weft up using %s?)", err, dir))
		}
		listeners = append(listeners, ln)
		*addr = ln.Addr().String() // a picked port becomes the recorded one
		return ln, nil
	}
	metaLn, err := listen(&cfg.Meta[0].Addr)
	if err != nil {
		return nil, err
	}
	storeLn, err := listen(&cfg.Store[0].Addr)
	if err != nil {
		return nil, err
	}
	var metricsLn net.Listener
	if cfg.Meta[0].MetricsAddr != "" {
		if metricsLn, err = listen(&cfg.Meta[0].MetricsAddr); err != nil {
			return nil, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, errs.WithPath(err, op, file)
	}
	if err := ensureCapabilitySecret(cfg); err != nil {
		return nil, err
	}

	reg := NewRegistry()
	e := &Embedded{file: file, cfg: cfg}
	// From here the servers own the listeners.
	listeners = nil
	e.store, err = StartStore(ctx, cfg, 0, Options{Logger: opts.Logger, Listener: storeLn, Registry: reg})
	if err != nil {
		metaLn.Close()
		if metricsLn != nil {
			metricsLn.Close()
		}
		return nil, err
	}
	e.meta, err = StartMeta(ctx, cfg, 0, Options{Logger: opts.Logger, Listener: metaLn, MetricsListener: metricsLn, Registry: reg})
	if err != nil {
		return nil, errors.Join(err, e.store.Close())
	}
	// Written once the servers run, so the file never names a cluster that
	// failed to start for the first time. Data directories are recorded
	// relative to the file, so the directory can be moved as a whole.
	onDisk := cfg.Clone()
	onDisk.Meta[0].Dir = "meta0"
	onDisk.Store[0].Dir = "store0"
	relativeSecurityPaths(onDisk, dir)
	if rel, err := filepath.Rel(dir, cfg.CapabilitySecret); err == nil && cfg.CapabilitySecret != "" && filepath.Dir(rel) == "." {
		onDisk.CapabilitySecret = rel
	}
	if err := onDisk.Write(file); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	return e, nil
}

// embeddedConfig returns the cluster to run: the one in file with opts
// applied, or a new one on loopback ports below the ephemeral range, which
// stay free for its restarts (rpc.PickAddrs).
func embeddedConfig(file, dir string, opts EmbeddedOptions) (*config.Cluster, error) {
	const op = "start embedded cluster"
	cfg, err := config.Load(file)
	switch {
	case errs.Is(err, errs.NotExist):
		addrs, err := rpc.PickAddrs(2)
		if err != nil {
			return nil, err
		}
		cfg = config.Default()
		cfg.Meta = []config.MetaServer{config.DefaultMetaServer(addrs[0], "")}
		cfg.Store = []config.StoreServer{config.DefaultStoreServer(addrs[1], "")}
		cfg.Security = opts.Security
		if err := InitSecurity(cfg, dir); err != nil {
			return nil, errs.WithPath(err, op, dir)
		}
		if cfg.Secured() {
			// Capabilities come with the mode; none checks nothing.
			cfg.CapabilitySecret = filepath.Join(dir, CapabilitySecretName)
		}
	case err != nil:
		return nil, err
	case len(cfg.Meta) != 1 || len(cfg.Store) != 1:
		return nil, errs.New(errs.Invalid, op, "%s describes %d meta and %d store servers, not an embedded cluster; run them with weft meta and weft store",
			file, len(cfg.Meta), len(cfg.Store))
	case opts.Backend != "" && opts.Backend != cfg.Store[0].Backend:
		return nil, errs.New(errs.Invalid, op, "%s was created with the %s backend; start it with --backend %s, or use another data directory for %s",
			dir, cfg.Store[0].Backend, cfg.Store[0].Backend, opts.Backend)
	}
	// Data always lives under dir, whatever the file says, so that a moved
	// directory keeps working.
	cfg.Meta[0].Dir = filepath.Join(dir, "meta0")
	cfg.Store[0].Dir = filepath.Join(dir, "store0")
	if opts.Durability != "" {
		cfg.Durability = opts.Durability
	}
	if opts.Backend != "" {
		cfg.Store[0].Backend = opts.Backend
	}
	if opts.MemLimit != 0 {
		cfg.Store[0].MemLimit = config.ByteSize(opts.MemLimit)
	}
	if cfg.Store[0].Backend == config.BackendMem && cfg.Store[0].MemLimit == 0 {
		cfg.Store[0].MemLimit = DefaultEmbeddedMemLimit
	}
	if opts.MetricsAddr != "" {
		cfg.Meta[0].MetricsAddr = opts.MetricsAddr
	}
	return cfg, nil
}

// ClusterFile returns the path of the cluster file describing the servers.
func (e *Embedded) ClusterFile() string { return e.file }

// Config returns a copy of the running cluster's configuration, with
// absolute data directories.
func (e *Embedded) Config() *config.Cluster { return e.cfg.Clone() }

// Registry returns the registry holding both servers' metrics.
func (e *Embedded) Registry() *prometheus.Registry { return e.store.Registry() }

// MetaAddr returns the meta server's address.
func (e *Embedded) MetaAddr() string { return e.meta.Addr() }

// StoreAddr returns the store server's address.
func (e *Embedded) StoreAddr() string { return e.store.Addr() }

// Local returns the two servers by address, for a client in this process
// to call directly (client.Config.Local): weft up --mount does.
func (e *Embedded) Local() map[string]*rpc.Server {
	return map[string]*rpc.Server{e.meta.Addr(): e.meta.rpc, e.store.Addr(): e.store.rpc}
}

// MetricsAddr returns where metrics are served, or "".
func (e *Embedded) MetricsAddr() string { return e.meta.MetricsAddr() }

// Close stops the meta server, then the store server. Safe to call more than
// once.
func (e *Embedded) Close() error {
	e.closeOnce.Do(func() {
		e.closeErr = errors.Join(e.meta.Close(), e.store.Close())
	})
	return e.closeErr
}
