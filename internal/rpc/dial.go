package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// DialOptions configure a dialed connection.
type DialOptions struct {
	TLS *tls.Config
	// Mux serves the requests the server sends back on this connection
	// (callbacks); nil answers them with errs.NotSupported.
	Mux    *Mux
	Logger *slog.Logger
	// Observer, if set, observes the calls made on the connection.
	Observer Observer
	// MaxFrameSize bounds the body of a frame; 0 means DefaultMaxFrameSize.
	MaxFrameSize int
	// Local, for a Peer, is the server at the Peer's address when it runs
	// in this process: calls run its handlers directly, without a
	// connection (local.go). Dial ignores it.
	Local *Server
	// PeerTimeout declares the connection dead when nothing at all has
	// come from the server for that long (keepalive.go): its calls fail
	// with errs.Unavailable. It also bounds the connect and handshakes of
	// a dial. 0 means DefaultPeerTimeout; negative, never.
	PeerTimeout time.Duration
	// CallTimeout bounds a call whose context has no deadline: it is the
	// deadline the request carries and the longest the caller waits.
	// 0 means DefaultCallTimeout; negative, no bound.
	CallTimeout time.Duration
	// Identity is the identity in-process calls (Local) carry to the
	// server's handlers and policy: what the TLS certificate would say on
	// a connection.
	Identity any
	// IntegrityOnly, with TLS, leaves TLS after its handshake for the
	// integrity-only record layer (integrity.go; security = "secure").
	// The server must be configured alike.
	IntegrityOnly bool
	// RecordsOnLoopback, with IntegrityOnly, keeps the record layer on a
	// connection between two loopback addresses too. Without it such a
	// connection carries its frames bare after the TLS handshake
	// (loopback.go), as plaintext costs on one machine; it is for
	// measuring what the record layer costs.
	RecordsOnLoopback bool
}

// DefaultCallTimeout bounds a call whose context has no deadline. A dead
// or stopped server is found sooner, by the keepalive; this bounds a
// handler that never answers. It must exceed the longest wait a request
// asks a server for (a blocking lock waits in slices of 30 s).
const DefaultCallTimeout = 60 * time.Second

// optTimeout is the duration an option asks for: 0 is def, negative none
// (0).
func optTimeout(opt, def time.Duration) time.Duration {
	switch {
	case opt == 0:
		return def
	case opt < 0:
		return 0
	}
	return opt
}

// defaultHandshakeTimeout bounds the connect and handshakes of a dial whose
// context has no earlier deadline and whose PeerTimeout is longer.
const defaultHandshakeTimeout = 10 * time.Second

// Dial connects to a weft server at addr (host:port) and runs the
// handshakes. Failing to connect is errs.Unavailable; a peer that speaks
// another protocol version is errs.Protocol; a context that ends first gives
// errs.Timeout or errs.Canceled.
func Dial(ctx context.Context, addr string, opts DialOptions) (*Conn, error) {
	peerTimeout := optTimeout(opts.PeerTimeout, DefaultPeerTimeout)
	// A server that does not answer the handshake within the keepalive
	// bound is as silent as one that stops later (a stopped process's
	// kernel still accepts connections).
	hsTimeout := defaultHandshakeTimeout
	if peerTimeout > 0 {
		hsTimeout = min(hsTimeout, peerTimeout)
	}
	nc, features, transport, err := dial(ctx, addr, opts, hsTimeout)
	if err != nil {
		if ctxEnded(ctx) {
			return nil, ctxError(ctx, "rpc dial "+addr)
		}
		return nil, err
	}
	c := newConn(nc, connConfig{
		mux:      opts.Mux,
		log:      opts.Logger,
		callObs:  opts.Observer,
		maxFrame: opts.MaxFrameSize,
		handlers: new(sync.WaitGroup),

		peerTimeout:  peerTimeout,
		callTimeout:  optTimeout(opts.CallTimeout, DefaultCallTimeout),
		peerFeatures: features,
		transport:    transport,
	})
	c.cfg.handlers.Add(1)
	c.start()
	return c, nil
}

// dial connects and runs the TLS and protocol handshakes; transport names
// what carries the frames (Conn.Transport).
func dial(ctx context.Context, addr string, opts DialOptions, timeout time.Duration) (nc net.Conn, features uint16, transport string, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	nc, err = d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, "", errs.Wrap(errs.Unavailable, "rpc dial", addr, err)
	}
	transport = TransportPlain
	if opts.TLS != nil {
		cfg := withALPN(opts.TLS, opts.IntegrityOnly)
		if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				nc.Close()
				return nil, 0, "", errs.Wrap(errs.Invalid, "rpc dial", addr, err)
			}
			cfg.ServerName = host
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, 0, "", errs.Wrap(errs.Unavailable, "rpc tls handshake", addr, err)
		}
		if opts.IntegrityOnly {
			ic, features, bare, err := integrityHandshake(ctx, tc, nc, true, !opts.RecordsOnLoopback)
			if err != nil {
				nc.Close()
				return nil, 0, "", err
			}
			return ic, features, integrityTransport(bare), nil
		}
		nc, transport = tc, TransportTLS
	}
	if features, err = handshake(ctx, nc); err != nil {
		nc.Close()
		return nil, 0, "", err
	}
	return nc, features, transport, nil
}

// handshake exchanges hellos and returns the peer's feature bits. Both
// sides write before reading, so each learns the other's version and can say
// exactly what is wrong.
func handshake(ctx context.Context, nc net.Conn) (features uint16, err error) {
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		nc.SetDeadline(time.Unix(1, 0)) // unblock the read or write
		close(fired)
	})
	remote := nc.RemoteAddr().String()
	h := hello()
	_, err = nc.Write(h[:])
	var peer [helloLen]byte
	if err == nil {
		_, err = io.ReadFull(nc, peer[:])
	}
	if !stop() {
		<-fired // its deadline must not land after ours is cleared
	}
	if err != nil {
		return 0, errs.Wrap(errs.Unavailable, "rpc handshake", remote, err)
	}
	if err := checkHello(peer); err != nil {
		err.Path = remote
		return 0, err
	}
	return helloFeatures(peer), nc.SetDeadline(time.Time{})
}

// Refused reports whether err says that nothing listens at the address
// dialed (ECONNREFUSED): the server is down or not yet up, which Dial and a
// Peer report at once as errs.Unavailable. Only a caller knows whether to
// wait for a restart; one that retries Unavailable should not spend its
// whole retry budget on a refusal.
func Refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
