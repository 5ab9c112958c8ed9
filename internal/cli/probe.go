package cli

// A quick look, before a command's first request, at whether the meta
// servers run at all: a refused connection means a server is not running,
// and saying so at once beats retrying for the client's retry time.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
)

// probeTimeout bounds each connection attempt of probeMeta. A server that
// does not answer within it is left to the command's own deadlines: only
// a refusal is decisive.
const probeTimeout = 2 * time.Second

// probeMeta connects to every meta server of cfg at once and fails with
// errs.Unavailable, naming the server, if one refuses the connection.
func probeMeta(ctx context.Context, cfg *config.Cluster) error {
	errc := make([]error, len(cfg.Meta))
	var wg sync.WaitGroup
	for i, m := range cfg.Meta {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", m.Addr)
			if err == nil {
				conn.Close()
				return
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				errc[i] = notRunning("meta", i, m.Addr, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errc...)
}

// notRunning is the error of a server that refused a connection.
func notRunning(role string, id int, addr string, cause error) error {
	return &errs.Error{Kind: errs.Unavailable, Op: "connect", Err: cause,
		Msg: fmt.Sprintf("%s server %d at %s is not running (connection refused); start the cluster ('weft up' or 'weft cluster start') or check --cluster", role, id, addr)}
}

// explainRefused rewrites an error caused by a refused connection (a
// server that stopped during the command) to say that the server is not
// running.
func explainRefused(err error) error {
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		return err
	}
	var oe *net.OpError
	addr := "a server"
	if errors.As(err, &oe) && oe.Addr != nil {
		addr = oe.Addr.String()
	}
	return &errs.Error{Kind: errs.Unavailable, Op: "connect", Err: err,
		Msg: fmt.Sprintf("the server at %s is not running (connection refused)", addr)}
}
