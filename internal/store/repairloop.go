package store

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/repair"
	"github.com/weftfs/weft/internal/rpc"
)

// RepairConfig configures a store's background repair: passes of
// internal/repair restricted to the copies placed on this store, pulling
// what it lacks or holds stale from the other stores.
type RepairConfig struct {
	ID          int      // this store's index in Peers
	Peers       []string // every store's address, index = store id, this one included
	Replication int
	// Interval is the pause between the end of a pass and the next;
	// default 10 minutes. After a pass that left work, the next starts
	// after a tenth of it.
	Interval time.Duration
	// RateBytes bounds the bytes a pass copies per second; default 64 MiB/s.
	RateBytes int64
	// Verify reads every copy placed here (the scrub: CRC-bad copies are
	// rewritten).
	Verify   bool
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// Dial is the template of the connections to the other stores: this
	// store's cluster identity, zero for plaintext.
	Dial rpc.DialOptions
	// Capability is repair.Config's: the capability of the pass's chunk
	// calls (nil: none).
	Capability func(ino uint64) []byte
}

const (
	defaultRepairInterval = 10 * time.Minute
	defaultRepairRate     = 64 << 20
)

// Repairer runs a store's background repair until Stop.
type Repairer struct {
	cfg    RepairConfig
	peers  []*rpc.Peer
	cancel context.CancelFunc
	done   chan struct{}
	m      repairMetrics
	kick   chan struct{}
}

type repairMetrics struct {
	passes          prometheus.Counter
	copiedBytes     prometheus.Counter
	underReplicated prometheus.Gauge
	lastClean       prometheus.Gauge
	collectors      []prometheus.Collector
	reg             *prometheus.Registry
}

// StartRepair starts the background repair of store cfg.ID. With a single
// store or replication 1 there is nothing to copy from: it returns a
// Repairer that does nothing.
func StartRepair(cfg RepairConfig) (*Repairer, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = defaultRepairInterval
	}
	if cfg.RateBytes <= 0 {
		cfg.RateBytes = defaultRepairRate
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	r := &Repairer{cfg: cfg, done: make(chan struct{}), kick: make(chan struct{}, 1)}
	if err := r.m.register(cfg.Registry, cfg.ID); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	if len(cfg.Peers) < 2 || cfg.Replication < 2 {
		close(r.done)
		return r, nil
	}
	for _, a := range cfg.Peers {
		r.peers = append(r.peers, rpc.NewPeer(a, cfg.Dial))
	}
	go r.loop(ctx)
	return r, nil
}

func (m *repairMetrics) register(reg *prometheus.Registry, id int) error {
	labels := prometheus.Labels{"store_id": strconv.Itoa(id)}
	m.passes = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "weft", Subsystem: "store", Name: "repair_passes_total",
		Help: "Background repair passes finished.", ConstLabels: labels})
	m.copiedBytes = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "weft", Subsystem: "store", Name: "repair_copied_bytes_total",
		Help: "Chunk bytes the background repair copied to this store.", ConstLabels: labels})
	m.underReplicated = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "weft", Subsystem: "store", Name: "under_replicated_chunks",
		Help: "Chunks placed on this store that its last repair pass found missing, stale or bad here.", ConstLabels: labels})
	m.lastClean = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "weft", Subsystem: "store", Name: "repair_last_clean_timestamp_seconds",
		Help: "When a repair pass last left nothing to copy (Unix time; 0: never).", ConstLabels: labels})
	cs := []prometheus.Collector{m.passes, m.copiedBytes, m.underReplicated, m.lastClean}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, u := range cs[:i] {
				reg.Unregister(u)
			}
			return err
		}
	}
	m.collectors, m.reg = cs, reg
	return nil
}

// Kick starts a pass now instead of at the next interval.
func (r *Repairer) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Stop ends the pass in progress and waits for the loop to end.
func (r *Repairer) Stop() {
	r.cancel()
	<-r.done
	for _, p := range r.peers {
		p.Close()
	}
	for _, c := range r.m.collectors {
		r.m.reg.Unregister(c)
	}
}

func (r *Repairer) loop(ctx context.Context) {
	defer close(r.done)
	log := r.cfg.Logger.With("component", "repair", "store_id", r.cfg.ID)
	stores := make([]repair.Store, len(r.peers))
	for i, p := range r.peers {
		stores[i] = p
	}
	for {
		rep, err := repair.Run(ctx, repair.Config{
			Stores: stores, Replication: r.cfg.Replication, Only: r.cfg.ID,
			Verify: r.cfg.Verify, RateBytes: r.cfg.RateBytes, Logger: log, Capability: r.cfg.Capability,
		})
		if ctx.Err() != nil {
			return
		}
		wait := r.cfg.Interval
		if err == nil {
			r.m.passes.Inc()
			r.m.copiedBytes.Add(float64(rep.CopiedBytes))
			r.m.underReplicated.Set(float64(rep.UnderReplicated - rep.Copied))
			if rep.Clean() {
				r.m.lastClean.SetToCurrentTime()
			} else {
				wait /= 10
			}
			if rep.UnderReplicated > 0 || !rep.Clean() {
				log.Info("repair pass", "report", rep.String())
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.kick:
			t.Stop()
		case <-t.C:
		}
	}
}
