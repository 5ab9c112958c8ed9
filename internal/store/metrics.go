package store

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/auth"
)

// metrics are the store's counters on the server's own registry. The
// store_id label lets several stores share one registry (weft cluster).
type metrics struct {
	bytesRead    prometheus.Counter
	bytesWritten prometheus.Counter
	corruptReads prometheus.Counter
	sameHost     prometheus.Counter
	scrubBad     prometheus.Counter
	scrubbed     prometheus.Counter
	capRefused   prometheus.Counter
	reg          *prometheus.Registry
	collectors   []prometheus.Collector
}

func newMetrics(reg *prometheus.Registry, id int, b Backend, caps *auth.Verifier, undo *undoTable) (*metrics, error) {
	labels := prometheus.Labels{"store_id": strconv.Itoa(id)}
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "weft", Subsystem: "store", Name: name, Help: help, ConstLabels: labels}
	}
	m := &metrics{
		bytesRead:    prometheus.NewCounter(opts("read_bytes_total", "Chunk bytes returned by ReadChunk.")),
		bytesWritten: prometheus.NewCounter(opts("written_bytes_total", "Chunk bytes written by WriteChunk.")),
		corruptReads: prometheus.NewCounter(opts("corrupt_reads_total", "Requests that found a block failing its checksum.")),
		sameHost:     prometheus.NewCounter(opts("same_host_requests_total", "Chunk reads and writes done on a client's file by the same-host path.")),
		scrubBad:     prometheus.NewCounter(opts("scrub_bad_chunks_total", "Chunks a scrub found corrupt, cut short or unreadable.")),
		scrubbed:     prometheus.NewCounter(opts("scrub_bytes_total", "Chunk bytes a scrub read and checked.")),
		capRefused:   prometheus.NewCounter(opts("capability_refused_total", "Chunk requests refused for their capability.")),
	}
	cs := []prometheus.Collector{
		m.bytesRead, m.bytesWritten, m.corruptReads, m.sameHost, m.scrubBad, m.scrubbed, m.capRefused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "weft", Subsystem: "store", Name: "chunks",
			Help: "Chunks stored.", ConstLabels: labels,
		}, func() float64 { return float64(b.ChunkCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "weft", Subsystem: "store", Name: "undo_bytes",
			Help: "Bytes kept in RAM for erasure-coded writes still to be released or undone (undo.go).", ConstLabels: labels,
		}, func() float64 { _, n := undo.held(); return float64(n) }),
	}
	if caps != nil {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "weft", Subsystem: "store", Name: "capability_revocations",
			Help: "Revoked capability generations remembered (bounded; internal/auth/revoke.go).", ConstLabels: labels,
		}, func() float64 { return float64(caps.Revocations().Len()) }))
	}
	if db, ok := b.(*diskBackend); ok {
		cs = append(cs, prometheus.NewCounterFunc(opts("syncs_total",
			"fdatasyncs of chunk files and fsyncs of their directories: the store's durable writes."),
			func() float64 { return float64(db.syncs.Load()) }))
	}
	if mb, ok := b.(*memBackend); ok {
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Namespace: "weft", Subsystem: "store", Name: "mem_used_bytes",
				Help: "Bytes of chunk data held in RAM.", ConstLabels: labels,
			}, func() float64 { return float64(mb.used.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Namespace: "weft", Subsystem: "store", Name: "mem_limit_bytes",
				Help: "The RAM backend's limit.", ConstLabels: labels,
			}, func() float64 { return float64(mb.limit) }))
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, r := range cs[:i] {
				reg.Unregister(r)
			}
			return nil, err
		}
	}
	m.reg, m.collectors = reg, cs
	return m, nil
}

// unregister frees the names for the next Open on the same registry.
func (m *metrics) unregister() {
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}
