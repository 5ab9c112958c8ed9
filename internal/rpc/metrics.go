package rpc

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Observer is told about every request served (ServerOptions.Observer) or
// call made (DialOptions.Observer): its method, how long it took, the sizes
// of the request and response bodies, and its error (nil on success).
// Implementations must be safe for concurrent use and fast: they run on the
// request path.
type Observer interface {
	Observe(method uint16, d time.Duration, reqBytes, respBytes int, err error)
}

// metrics is the Prometheus Observer.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	bytesIn  *prometheus.CounterVec
	bytesOut *prometheus.CounterVec
}

// LatencyBuckets are the latency histogram's bucket bounds in seconds:
// 50 µs to 1 s, roughly doubling.
var LatencyBuckets = []float64{
	50e-6, 100e-6, 200e-6, 500e-6,
	1e-3, 2e-3, 5e-3, 10e-3, 20e-3, 50e-3,
	100e-3, 200e-3, 500e-3, 1,
}

// NewMetrics registers request counts (by method and status), a latency
// histogram (by method) and byte counters (by method) in reg under
// namespace, and returns an Observer that feeds them. "in" is the request
// body and "out" the response body, from the point of view of the side that
// serves. It panics if the metrics are already registered in reg, as
// registering twice is a programming error.
func NewMetrics(reg *prometheus.Registry, namespace string) Observer {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "rpc", Name: "requests_total",
			Help: "RPC requests by method and status (ok or the error kind).",
		}, []string{"method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "rpc", Name: "request_duration_seconds",
			Help:    "RPC request latency by method.",
			Buckets: LatencyBuckets,
		}, []string{"method"}),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "rpc", Name: "request_bytes_total",
			Help: "Bytes of request bodies by method.",
		}, []string{"method"}),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "rpc", Name: "response_bytes_total",
			Help: "Bytes of response bodies by method.",
		}, []string{"method"}),
	}
	reg.MustRegister(m.requests, m.latency, m.bytesIn, m.bytesOut)
	return m
}

func (m *metrics) Observe(method uint16, d time.Duration, reqBytes, respBytes int, err error) {
	name := weftpb.MethodName(method)
	m.requests.WithLabelValues(name, StatusLabel(err)).Inc()
	m.latency.WithLabelValues(name).Observe(d.Seconds())
	m.bytesIn.WithLabelValues(name).Add(float64(reqBytes))
	m.bytesOut.WithLabelValues(name).Add(float64(respBytes))
}

// statusNames are short metric labels for error kinds.
var statusNames = [...]string{
	errs.Other:        "other",
	errs.NotExist:     "not_exist",
	errs.Exist:        "exist",
	errs.NotDir:       "not_dir",
	errs.IsDir:        "is_dir",
	errs.NotEmpty:     "not_empty",
	errs.Permission:   "permission",
	errs.NotPermitted: "not_permitted",
	errs.Invalid:      "invalid",
	errs.NameTooLong:  "name_too_long",
	errs.NoSpace:      "no_space",
	errs.Loop:         "loop",
	errs.CrossDevice:  "cross_device",
	errs.NoData:       "no_data",
	errs.Range:        "range",
	errs.Stale:        "stale",
	errs.IO:           "io",
	errs.Corrupt:      "corrupt",
	errs.Unavailable:  "unavailable",
	errs.Timeout:      "timeout",
	errs.Canceled:     "canceled",
	errs.Busy:         "busy",
	errs.TooBig:       "too_big",
	errs.NotSupported: "not_supported",
	errs.BadHandle:    "bad_handle",
	errs.Protocol:     "protocol",
	errs.WrongServer:  "wrong_server",
	errs.ReadOnly:     "read_only",
	errs.Lost:         "lost",

	errs.CapabilityRefused: "capability_refused",
}

// StatusLabel is the metric label for a request's outcome: "ok", or a short
// name of the error's kind.
func StatusLabel(err error) string {
	if err == nil {
		return "ok"
	}
	k := wireKind(err)
	if int(k) < len(statusNames) && statusNames[k] != "" {
		return statusNames[k]
	}
	return fmt.Sprintf("kind_%d", uint8(k))
}
