package lease

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the lease service's counters on a server's registry. A nil
// *Metrics counts nothing.
type Metrics struct {
	grants, recalls, expiries prometheus.Counter
	latency                   prometheus.Histogram
	held                      func() int // set by New
}

// NewMetrics registers the lease metrics on reg (nil: none registered, but
// counted).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		grants: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_lease_granted_total",
			Help: "Leases granted (renewals included)."}),
		recalls: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_lease_recalled_total",
			Help: "Leases recalled because someone wanted to change or lock what they cover."}),
		expiries: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_lease_expired_total",
			Help: "Recalled leases whose holder never released them: they ended with their term."}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "weft_lease_recall_seconds",
			Help:    "Time from a recall to the holder's release.",
			Buckets: []float64{100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5}}),
	}
	if reg != nil {
		held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weft_lease_held",
			Help: "Leases held by clients now."}, func() float64 {
			if m.held == nil {
				return 0
			}
			return float64(m.held())
		})
		reg.MustRegister(m.grants, m.recalls, m.expiries, m.latency, held)
	}
	return m
}

func (m *Metrics) granted(n int) {
	if m != nil {
		m.grants.Add(float64(n))
	}
}

func (m *Metrics) recalled() {
	if m != nil {
		m.recalls.Inc()
	}
}

func (m *Metrics) expired() {
	if m != nil {
		m.expiries.Inc()
	}
}

func (m *Metrics) recallLatency(d time.Duration) {
	if m != nil {
		m.latency.Observe(d.Seconds())
	}
}
