package rpc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// ServerOptions configure a Server. The zero value serves plain TCP, logs
// nothing and observes nothing.
type ServerOptions struct {
	TLS      *tls.Config
	Logger   *slog.Logger
	Observer Observer
	// OnClose is called once for each accepted connection when it closes.
	OnClose func(*Conn)
	// MaxFrameSize bounds the body of a frame either side may send on the
	// server's connections; 0 means DefaultMaxFrameSize.
	MaxFrameSize int
	// HandshakeTimeout bounds the TLS and protocol handshakes of an accepted
	// connection; 0 means 10 seconds.
	HandshakeTimeout time.Duration
	// FrameTimeout bounds how long the body of a frame may take to arrive
	// once its header has: a connection whose frame stops half-way is
	// closed. 0 means DefaultFrameTimeout; negative, no bound.
	FrameTimeout time.Duration
	// MaxBodyInFlight is the budget of frame bodies the server allocates in
	// full as soon as their headers arrive, over all its connections;
	// bodies beyond it are allocated as their bytes arrive (budget.go).
	// 0 means DefaultMaxBodyInFlight.
	MaxBodyInFlight int
	// PeerTimeout closes a connection when nothing at all has come from
	// the client for that long (keepalive.go). 0 means
	// DefaultPeerTimeout; negative, never.
	PeerTimeout time.Duration
	// CallTimeout bounds the server's calls back to its clients whose
	// contexts have no deadline, as DialOptions.CallTimeout.
	CallTimeout time.Duration
	// Identify, with TLS, returns the identity of a client from its
	// verified certificate chain (leaf first); an error refuses the
	// connection. Handlers find the identity with PeerIdentity.
	Identify func(chain []*x509.Certificate) (any, error)
	// Authorize, if set, is asked before every request and one-way
	// message is handled, with the method and the caller's identity (nil
	// if it has none); an error refuses the call with errs.Permission.
	Authorize func(method uint16, peer any) error
	// IntegrityOnly, with TLS, leaves TLS after its handshake for the
	// integrity-only record layer (integrity.go; security = "secure").
	IntegrityOnly bool
	// RecordsOnLoopback, with IntegrityOnly, refuses the bare loopback
	// path (loopback.go): every connection keeps the record layer.
	RecordsOnLoopback bool

	// takeoverDelay overrides how long a connection's reader runs a
	// handler itself before another goroutine reads on (tests).
	takeoverDelay time.Duration
}

// DefaultFrameTimeout is the default FrameTimeout: ample for the largest
// frame (65 MiB) on a slow link.
const DefaultFrameTimeout = 30 * time.Second

// Server accepts connections and serves a Mux on them.
type Server struct {
	mux  *Mux
	opts ServerOptions
	log  *slog.Logger
	// base is the context of in-process calls' handlers (local.go); Close
	// cancels it.
	base     context.Context
	stopBase context.CancelFunc
	// wg counts connection setups, read loops and handlers; Close waits for
	// all of them.
	wg     sync.WaitGroup
	budget *bodyBudget
	// tlsConfig is opts.TLS naming the record layer in its ALPN.
	tlsConfig *tls.Config

	mu struct {
		sync.Mutex
		closed    bool
		listeners map[net.Listener]struct{}
		conns     map[*Conn]struct{}
		raw       map[net.Conn]struct{} // accepted, still handshaking
	}
}

// NewServer returns a server for mux.
func NewServer(mux *Mux, opts ServerOptions) *Server {
	s := &Server{mux: mux, opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.opts.HandshakeTimeout <= 0 {
		s.opts.HandshakeTimeout = 10 * time.Second
	}
	if s.opts.FrameTimeout == 0 {
		s.opts.FrameTimeout = DefaultFrameTimeout
	}
	if s.opts.MaxBodyInFlight <= 0 {
		s.opts.MaxBodyInFlight = DefaultMaxBodyInFlight
	}
	s.budget = newBodyBudget(s.opts.MaxBodyInFlight)
	if s.opts.TLS != nil {
		s.tlsConfig = withALPN(s.opts.TLS, s.opts.IntegrityOnly)
	}
	s.base, s.stopBase = context.WithCancel(context.Background())
	s.mu.listeners = make(map[net.Listener]struct{})
	s.mu.conns = make(map[*Conn]struct{})
	s.mu.raw = make(map[net.Conn]struct{})
	return s
}

// errServerClosed is what Serve returns when Close stopped it.
var errServerClosed = errs.New(errs.Unavailable, "rpc serve", "server closed")

// Serve accepts connections on ln until ln fails or the server is closed.
// After Close it returns nil.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.mu.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.mu.listeners, ln)
		s.mu.Unlock()
	}()

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.mu.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and the like: wait, don't spin.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("rpc: accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return errs.Wrap(errs.Unavailable, "rpc serve", ln.Addr().String(), err)
		}
		backoff = 0
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.mu.raw[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.setup(nc)
	}
}

// setup runs the handshakes of an accepted connection and starts serving it.
func (s *Server) setup(nc net.Conn) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.HandshakeTimeout)
	defer cancel()
	raw := nc
	var features uint16
	var peerID any
	transport := TransportPlain
	err := func() (err error) {
		if s.opts.TLS != nil {
			tc := tls.Server(nc, s.tlsConfig)
			if err := tc.HandshakeContext(ctx); err != nil {
				return errs.Wrap(errs.Unavailable, "rpc tls handshake", nc.RemoteAddr().String(), err)
			}
			if peerID, err = s.identify(tc); err != nil {
				return err
			}
			if s.opts.IntegrityOnly {
				ic, f, bare, err := integrityHandshake(ctx, tc, nc, false, !s.opts.RecordsOnLoopback)
				if err == nil {
					nc, features, transport = ic, f, integrityTransport(bare)
				}
				return err
			}
			nc, transport = tc, TransportTLS
		} else if peerID, err = s.identify(nc); err != nil {
			return err
		}
		features, err = handshake(ctx, nc)
		return err
	}()

	s.mu.Lock()
	delete(s.mu.raw, raw)
	if err == nil && s.mu.closed {
		err = errServerClosed
	}
	if err != nil {
		s.mu.Unlock()
		s.log.Warn("rpc: rejecting connection", "remote", raw.RemoteAddr().String(), "err", err)
		nc.Close()
		return
	}
	c := newConn(nc, connConfig{
		mux:      s.mux,
		log:      s.log,
		serveObs: s.opts.Observer,
		maxFrame: s.opts.MaxFrameSize,
		onClose:  s.connClosed,
		handlers: &s.wg,
		budget:   s.budget,
		// A negative FrameTimeout means none; so does 0 here.
		frameTimeout: max(s.opts.FrameTimeout, 0),
		peerTimeout:  optTimeout(s.opts.PeerTimeout, DefaultPeerTimeout),
		callTimeout:  optTimeout(s.opts.CallTimeout, DefaultCallTimeout),
		peerFeatures: features,
		peerID:       peerID,
		authorize:    s.opts.Authorize,
		transport:    transport,

		takeoverDelay: s.opts.takeoverDelay,
	})
	s.mu.conns[c] = struct{}{}
	s.wg.Add(1) // the read loop; we still hold our own count, so not from zero
	s.mu.Unlock()
	s.log.Debug("rpc: accepted connection", "remote", raw.RemoteAddr().String(), "transport", transport)
	c.start()
}

func (s *Server) connClosed(c *Conn) {
	s.mu.Lock()
	delete(s.mu.conns, c)
	s.mu.Unlock()
	if s.opts.OnClose != nil {
		s.opts.OnClose(c)
	}
}

// Close stops all Serve loops, closes every connection, and waits for the
// handlers to return (their contexts are canceled; a handler that ignores
// its context delays Close).
func (s *Server) Close() error {
	s.mu.Lock()
	s.mu.closed = true
	var lns []net.Listener
	for ln := range s.mu.listeners {
		lns = append(lns, ln)
	}
	var conns []*Conn
	for c := range s.mu.conns {
		conns = append(conns, c)
	}
	for nc := range s.mu.raw {
		nc.Close() // setup notices and gives up
	}
	s.mu.Unlock()

	var err error
	for _, ln := range lns {
		if e := ln.Close(); e != nil && !errors.Is(e, net.ErrClosed) && err == nil {
			err = e
		}
	}
	for _, c := range conns {
		c.closeWithError(errs.New(errs.Unavailable, "rpc", "server closed"))
	}
	s.stopBase()
	s.wg.Wait()
	return err
}

// startHandler runs the handler of an incoming request or one-way message,
// inline on the reading goroutine or in a goroutine of its own; the handler
// owns bp (holding msg) and data from now on. retire says that the reading
// goroutine has been replaced (see runInline). An error closes the
// connection.
func (c *Conn) startHandler(h *header, bp *[]byte, msg, data []byte, inline bool) (retire bool, err error) {
	hd := c.cfg.mux.lookup(h.method)
	if hd == nil || hd.oneWay != (h.typ == frameOneWay) {
		putBuf(bp)
		PutBuffer(data)
		if h.typ == frameOneWay {
			c.cfg.log.Debug("rpc: dropping one-way message for an unknown method", "method", h.method)
			return false, nil
		}
		err := errs.New(errs.NotSupported, "rpc", "method %d (%s) is not served here", h.method, weftpb.MethodName(h.method))
		c.reply(h, nil, nil, err)
		c.observe(h.method, 0, len(msg)+len(data), 0, err)
		return false, nil
	}
	if err := authorize(c.cfg.authorize, h.method, c.cfg.peerID); err != nil {
		putBuf(bp)
		PutBuffer(data)
		c.cfg.log.Warn("rpc: refused a call", "method", weftpb.MethodName(h.method), "remote", c.nc.RemoteAddr().String(), "err", err)
		if h.typ == frameRequest {
			c.reply(h, nil, nil, err)
		}
		c.observe(h.method, 0, len(msg)+len(data), 0, err)
		return false, nil
	}

	ctx, cancel := c.ctx, context.CancelFunc(nil)
	if h.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, h.timeout)
	} else if h.typ == frameRequest {
		ctx, cancel = context.WithCancel(ctx)
	}
	if h.typ == frameRequest {
		c.mu.Lock()
		_, dup := c.mu.serving[h.id]
		if !dup {
			c.mu.serving[h.id] = cancel
		}
		c.mu.Unlock()
		if dup {
			cancel()
			putBuf(bp)
			PutBuffer(data)
			return false, errs.New(errs.Protocol, "rpc", "request id %d reused while still in flight", h.id)
		}
	}
	hh := *h
	if inline {
		return c.runInline(func() { c.serve(ctx, cancel, hh, hd, bp, msg, data) }), nil
	}
	c.cfg.handlers.Add(1)
	go func() {
		defer c.cfg.handlers.Done()
		c.serve(ctx, cancel, hh, hd, bp, msg, data)
	}()
	return false, nil
}

// cancelServing cancels the handler of the peer's request id, if it still
// runs.
func (c *Conn) cancelServing(id uint64) {
	c.mu.Lock()
	cancel := c.mu.serving[id]
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// serve runs one handler and sends its response. The request's buffers go
// back to their pools when the handler returns; the response's attachment
// is released once written.
func (c *Conn) serve(ctx context.Context, cancel context.CancelFunc, h header, hd *handler, bp *[]byte, msg, data []byte) {
	start := time.Now()
	out := getBuf()
	var resp []byte
	var att Attachment
	var err error
	if data != nil && !hd.withData {
		err = errs.New(errs.Protocol, "rpc "+weftpb.MethodName(h.method), "the request carries an attachment the method does not take")
	} else {
		resp, att, err = runHandler(ctx, c.cfg.log, c.nc.RemoteAddr, h.method, hd, msg, data, (*out)[:0])
	}
	reqBytes := len(msg) + len(data)
	putBuf(bp)
	PutBuffer(data)
	if h.typ == frameRequest {
		c.mu.Lock()
		delete(c.mu.serving, h.id)
		c.mu.Unlock()
	}
	if cancel != nil {
		cancel()
	}
	respBytes := 0
	if h.typ == frameRequest {
		if n := bodyLen(resp, att.Data); err == nil && n > c.cfg.maxFrame {
			err = errs.New(errs.TooBig, "rpc "+weftpb.MethodName(h.method), "response of %d bytes exceeds the frame limit of %d", n, c.cfg.maxFrame)
		}
		if err == nil {
			respBytes = len(resp) + len(att.Data)
		}
		c.reply(&h, resp, att.Data, err)
	}
	att.release()
	if resp != nil {
		*out = resp
	}
	putBuf(out)
	c.observe(h.method, time.Since(start), reqBytes, respBytes, err)
}

// runHandler runs a handler, turning a panic into an errs.IO error so that
// one bad request cannot take the server down; remote names the caller in
// the log.
func runHandler(ctx context.Context, log *slog.Logger, remote func() net.Addr, method uint16, hd *handler, msg, data, out []byte) (resp []byte, att Attachment, err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("rpc: handler panicked", "method", weftpb.MethodName(method), "remote", remote().String(),
				"panic", r, "stack", string(debug.Stack()))
			resp, att, err = nil, Attachment{}, errs.New(errs.IO, "rpc "+weftpb.MethodName(method), "handler failed unexpectedly")
		}
	}()
	return hd.serve(ctx, msg, data, out)
}

// enterLocal admits an in-process call (local.go). The handler's context
// has ctx's deadline, ends when the server closes and, if followCancel, when
// ctx does, and carries none of ctx's values; done must be called once the
// handler has returned. A closed server refuses with errs.Unavailable.
func (s *Server) enterLocal(ctx context.Context, followCancel bool) (hctx context.Context, done func(), err error) {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil, nil, errs.New(errs.Unavailable, "rpc", "server closed")
	}
	s.wg.Add(1)
	s.mu.Unlock()
	var cancel context.CancelFunc
	if dl, ok := ctx.Deadline(); ok {
		hctx, cancel = context.WithDeadline(s.base, dl)
	} else {
		hctx, cancel = context.WithCancel(s.base)
	}
	stop := func() bool { return false }
	if followCancel {
		stop = context.AfterFunc(ctx, cancel)
	}
	return hctx, func() {
		stop()
		cancel()
		s.wg.Done()
	}, nil
}

// maxFrame is the frame limit of the server's connections.
func (s *Server) maxFrame() int {
	if s.opts.MaxFrameSize > 0 {
		return s.opts.MaxFrameSize
	}
	return DefaultMaxFrameSize
}

// maxErrorMessage bounds the error text sent back; longer text is cut.
const maxErrorMessage = 4 << 10

// reply sends the response to request h: resp with the attachment data, or
// err with its kind.
func (c *Conn) reply(h *header, resp, data []byte, err error) {
	rh := header{typ: frameResponse, method: h.method, id: h.id}
	if err != nil {
		rh.flags = flagError
		rh.kind = wireKind(err)
		msg := err.Error()
		if len(msg) > maxErrorMessage {
			msg = msg[:maxErrorMessage]
		}
		resp, data = []byte(msg), nil
	}
	_ = c.writeFrame(context.Background(), &rh, resp, data) // a failure closes the connection; nobody to tell
}

// wireKind is the kind sent for a handler's error. Context errors from a
// handler that gave up get their natural kinds.
func wireKind(err error) errs.Kind {
	k := errs.KindOf(err)
	if k == errs.Other {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			k = errs.Timeout
		case errors.Is(err, context.Canceled):
			k = errs.Canceled
		}
	}
	return k
}

func (c *Conn) observe(method uint16, d time.Duration, reqBytes, respBytes int, err error) {
	if c.cfg.serveObs != nil {
		c.cfg.serveObs.Observe(method, d, reqBytes, respBytes, err)
	}
}

// bodiesInProgress is how many frame bodies the server is reading.
func (s *Server) bodiesInProgress() int64 { return s.budget.reading.Load() }
