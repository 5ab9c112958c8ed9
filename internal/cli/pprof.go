package cli

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// servePprof serves this process's Go profiles (net/http/pprof, under
// /debug/pprof/) at addr until stop is called. The servers have theirs on
// their metrics address; a mount daemon has none, and its CPU profile is
// what shows where a mount spends its time per request (docs/benchmarks.md,
// issue 13). addr must be a loopback address: a profile names files and
// arguments, and the port is an operator's, on this machine only.
func servePprof(addr string, log *slog.Logger) (bound net.Addr, stop func(), err error) {
	if err := checkPprofAddr(addr); err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, errs.Wrap(errs.Unavailable, "pprof", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof: serving stopped", "addr", addr, "err", err)
		}
	}()
	return ln.Addr(), func() {
		srv.Close() // a profile in progress is cut: the process is stopping
		<-done
	}, nil
}

// checkPprofAddr accepts only a loopback address with a port.
func checkPprofAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return errs.Wrap(errs.Invalid, "pprof", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return errs.New(errs.Invalid, "pprof", "%s is not a loopback address (127.0.0.1:PORT, [::1]:PORT or localhost:PORT)", addr)
	}
	return nil
}
