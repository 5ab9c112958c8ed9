package rpc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Conn is one framed connection. It is symmetric: either end may Call or Send,
// and either end serves the requests of the other with its Mux (the Server's,
// or DialOptions.Mux for callbacks on a dialed connection). A Conn is safe for
// concurrent use.
type Conn struct {
	nc     net.Conn
	cfg    connConfig
	nextID atomic.Uint64

	// ctx is the parent of every handler context: closing the connection
	// cancels all its handlers. It carries the Conn for ConnFromContext.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	// writers counts goroutines that are writing or waiting to write a
	// frame. The one that brings it back to zero flushes, so a burst of
	// concurrent frames leaves in few system calls and a lone frame at once.
	writers atomic.Int32
	// w is the write side, guarded by the lock sem (write.go).
	w struct {
		sem chan struct{}
		buf []byte    // frames not yet written; capacity writeBufSize
		vec [3][]byte // backing array of the writev of a large frame
		err error     // sticky: after a failed write the connection is dead
	}

	// rd is the reading role: exactly one goroutine reads frames at a time.
	// Usually that is the read loop; see takeOverReading for when it moves.
	rd struct {
		br       *bufio.Reader
		rbuf     []byte      // response bodies, decoded by the reader
		takeover *time.Timer // fires takeOverReading
		mu       struct {
			sync.Mutex
			inline bool   // the reader is running a handler itself
			gen    uint64 // counts takeovers
		}
	}

	// ka detects a peer that has gone silent (keepalive.go).
	ka keepalive

	mu struct {
		sync.Mutex
		closed  bool
		err     error                         // why the connection closed
		pending map[uint64]*call              // our requests awaiting a response
		serving map[uint64]context.CancelFunc // the peer's requests being handled
	}
}

// connConfig is what a Conn needs from DialOptions or ServerOptions.
type connConfig struct {
	mux      *Mux
	log      *slog.Logger
	serveObs Observer // observes requests this side serves
	callObs  Observer // observes calls this side makes
	maxFrame int
	onClose  func(*Conn)
	// handlers counts the read loop and every handler goroutine. The read
	// loop holds a count while it spawns handlers, so Add never races Wait
	// from zero.
	handlers *sync.WaitGroup
	// budget bounds the bodies allocated before they arrive; nil for a
	// dialed connection.
	budget *bodyBudget
	// frameTimeout bounds the arrival of a frame's body once its header
	// is in; 0 means none.
	frameTimeout time.Duration
	// peerTimeout is how long the peer may stay silent before the
	// connection is declared dead; 0 means never (keepalive.go).
	peerTimeout time.Duration
	// peerFeatures are the feature bits of the peer's handshake.
	peerFeatures uint16
	// callTimeout bounds calls whose context has no deadline; 0 means
	// none.
	callTimeout time.Duration
	// peerID is the peer's identity (identity.go), nil if unknown;
	// authorize is the server's policy, nil for none.
	peerID    any
	authorize func(method uint16, peer any) error
	// transport names what carries the frames (Conn.Transport).
	transport string
	// takeoverDelay overrides the package's takeoverDelay (tests); 0
	// keeps it.
	takeoverDelay time.Duration
}

type connKey struct{}

// ConnFromContext returns the connection a request arrived on, inside a
// handler; nil elsewhere. Servers keep it to call the client back later.
func ConnFromContext(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}

// call is one outstanding request of ours. done is buffered: exactly one
// goroutine (the read loop, or close) sends to it, and only after taking the
// call out of mu.pending; the caller receives exactly once unless it took the
// call out itself. That makes calls reusable through callPool.
type call struct {
	resp      proto.Message
	wantData  bool   // CallData: the response may carry an attachment
	respData  []byte // the response's attachment, from GetBuffer
	done      chan struct{}
	err       error
	respBytes int
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// bufPool holds frame body buffers. Big buffers are dropped rather than kept.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledBuf = 64 << 10

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > maxPooledBuf {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

func newConn(nc net.Conn, cfg connConfig) *Conn {
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	if cfg.maxFrame <= 0 {
		cfg.maxFrame = DefaultMaxFrameSize
	}
	c := &Conn{nc: nc, cfg: cfg, done: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(withIdentity(context.WithValue(context.Background(), connKey{}, c), cfg.peerID))
	c.w.buf = make([]byte, 0, writeBufSize)
	c.w.sem = make(chan struct{}, 1)
	c.rd.br = bufio.NewReaderSize(countingReader{nc: nc, n: &c.ka.reads}, 32<<10)
	c.rd.takeover = time.AfterFunc(time.Hour, c.takeOverReading)
	c.rd.takeover.Stop()
	c.mu.pending = make(map[uint64]*call)
	c.mu.serving = make(map[uint64]context.CancelFunc)
	return c
}

// start runs the read loop and the keepalive. The caller has already
// counted the read loop in cfg.handlers.
func (c *Conn) start() {
	c.startKeepalive(c.cfg.peerTimeout, c.cfg.peerFeatures)
	go c.readLoop()
}

// RemoteAddr is the address of the other end.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// What carries a connection's frames (Conn.Transport).
const (
	TransportPlain    = "plaintext"         // TCP, no TLS (security = "none")
	TransportTLS      = "tls"               // TLS 1.3 records (private)
	TransportRecords  = "integrity records" // after a TLS handshake (secure)
	TransportLoopback = "loopback, bare"    // after a TLS handshake, both ends loopback (secure; loopback.go)
)

// Transport names what carries the connection's frames after its
// handshakes: one of the Transport constants.
func (c *Conn) Transport() string { return c.cfg.transport }

// Done is closed when the connection has closed, for whatever reason.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why the connection closed, or nil while it is open.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.err
}

// isClosed reports whether the connection has closed or is closing.
func (c *Conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.closed
}

// Close closes the connection. Outstanding calls fail with errs.Unavailable
// and the contexts of handlers serving the peer are canceled; Close does not
// wait for those handlers (a Server's Close does).
func (c *Conn) Close() error {
	c.closeWithError(errs.New(errs.Unavailable, "rpc", "connection to %s closed by this side", c.nc.RemoteAddr()))
	return nil
}

func (c *Conn) closeWithError(err error) {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return
	}
	c.mu.closed = true
	c.mu.err = err
	pending := c.mu.pending
	c.mu.pending = nil
	c.mu.Unlock()

	c.nc.Close()
	c.cancel()
	c.rd.takeover.Stop()
	c.ka.stop()
	callErr := err
	if !errs.Is(err, errs.Unavailable) {
		callErr = errs.Wrap(errs.Unavailable, "rpc", "", err)
	}
	for _, cl := range pending {
		cl.err = callErr
		cl.done <- struct{}{}
	}
	close(c.done)
	if c.cfg.onClose != nil {
		c.cfg.onClose(c)
	}
}

// Call sends req as method and waits for the response, decoded into resp
// (which may be nil to discard it). The context's deadline travels with the
// request; if the context ends first, Call returns errs.Timeout or
// errs.Canceled at once and tells the peer to cancel the handler. A handler's
// error comes back as an *errs.Error with its kind and message; a broken
// connection gives errs.Unavailable.
//
// A response that carries an attachment (a method served with HandleData)
// fails with errs.Protocol: use CallData.
func (c *Conn) Call(ctx context.Context, method uint16, req, resp proto.Message) error {
	_, _, err := c.call(ctx, method, req, nil, resp, false)
	return err
}

// CallData is Call for methods served with HandleData: data (may be nil) is
// sent as the request's attachment, straight from the caller's slice, which
// is no longer used once CallData returns. The response's attachment comes
// back as respData (nil if none), in a buffer from GetBuffer that the caller
// owns: it may hand it to PutBuffer when done with it.
func (c *Conn) CallData(ctx context.Context, method uint16, req proto.Message, data []byte, resp proto.Message) (respData []byte, err error) {
	_, respData, err = c.call(ctx, method, req, data, resp, true)
	return respData, err
}

// call is CallData that also reports whether the request may have reached
// the wire; a Peer retries the ones that certainly did not.
func (c *Conn) call(ctx context.Context, method uint16, req proto.Message, data []byte, resp proto.Message, wantData bool) (sent bool, respData []byte, err error) {
	var start time.Time
	if c.cfg.callObs != nil {
		start = time.Now()
	}
	h := header{typ: frameRequest, method: method}
	if err := ctx.Err(); err != nil {
		return false, nil, ctxError(ctx, "rpc "+weftpb.MethodName(method))
	}
	ctx, cancel := withCallTimeout(ctx, c.cfg.callTimeout)
	defer cancel()
	if dl, ok := ctx.Deadline(); ok {
		if h.timeout = time.Until(dl); h.timeout <= 0 {
			return false, nil, ctxError(ctx, "rpc "+weftpb.MethodName(method))
		}
	}
	bp, err := c.marshal(req, method, data)
	if err != nil {
		return false, nil, err
	}
	reqBytes := len(*bp) + len(data)

	cl := callPool.Get().(*call)
	cl.resp, cl.wantData, cl.err, cl.respBytes = resp, wantData, nil, 0
	h.id = c.nextID.Add(1)
	c.mu.Lock()
	if c.mu.closed {
		err = c.mu.err
		c.mu.Unlock()
		putBuf(bp)
		callPool.Put(cl)
		return false, nil, errs.Wrap(errs.Unavailable, "rpc "+weftpb.MethodName(method), "", err)
	}
	c.mu.pending[h.id] = cl
	c.mu.Unlock()

	// A failed write closes the connection, which completes cl. The write
	// is done when writeFrame returns: data is the caller's again.
	werr := c.writeFrame(ctx, &h, *bp, data)
	putBuf(bp)

	select {
	case <-cl.done:
		err = cl.err
	case <-ctx.Done():
		c.mu.Lock()
		_, mine := c.mu.pending[h.id]
		delete(c.mu.pending, h.id)
		c.mu.Unlock()
		if mine {
			// Cancel in the background: the writer may be busy and the
			// caller must not wait for it. A frame that never left
			// needs no cancel.
			if werr == nil {
				go c.writeFrame(context.Background(), &header{typ: frameCancel, id: h.id}, nil, nil)
			}
			err = ctxError(ctx, "rpc "+weftpb.MethodName(method))
		} else {
			// The response or the close won the race and is completing
			// cl.
			<-cl.done
			err = cl.err
		}
	}
	if ctx.Err() != nil && errs.Is(err, errs.Unavailable) {
		// A caller whose context has ended hears about that rather
		// than about what it caused (a write cut, a connection closed).
		err = ctxError(ctx, "rpc "+weftpb.MethodName(method))
	}
	respBytes, respData := cl.respBytes, cl.respData
	cl.resp, cl.respData, cl.err = nil, nil, nil
	callPool.Put(cl)
	if c.cfg.callObs != nil {
		c.cfg.callObs.Observe(method, time.Since(start), reqBytes, respBytes, err)
	}
	return true, respData, err
}

// Send sends a one-way message: no response, no error from the handler. It
// returns once the message is handed to the connection.
func (c *Conn) Send(ctx context.Context, method uint16, req proto.Message) error {
	h := header{typ: frameOneWay, method: method}
	if err := ctx.Err(); err != nil {
		return ctxError(ctx, "rpc "+weftpb.MethodName(method))
	}
	if dl, ok := ctx.Deadline(); ok {
		if h.timeout = time.Until(dl); h.timeout <= 0 {
			return ctxError(ctx, "rpc "+weftpb.MethodName(method))
		}
	}
	bp, err := c.marshal(req, method, nil)
	if err != nil {
		return err
	}
	defer putBuf(bp)
	h.id = c.nextID.Add(1)
	c.mu.Lock()
	closed := c.mu.closed
	err = c.mu.err
	c.mu.Unlock()
	if closed {
		return errs.Wrap(errs.Unavailable, "rpc "+weftpb.MethodName(method), "", err)
	}
	// The message's deadline is the caller's; the write has a bound too.
	wctx, cancel := withCallTimeout(ctx, c.cfg.callTimeout)
	defer cancel()
	return c.writeFrame(wctx, &h, *bp, nil)
}

// marshal encodes m and checks that it fits a frame with an attachment of
// data.
func (c *Conn) marshal(m proto.Message, method uint16, data []byte) (*[]byte, error) {
	return marshalRequest(m, method, data, c.cfg.maxFrame)
}

// marshalRequest encodes m into a pooled buffer and checks that it fits a
// frame of at most maxFrame bytes with an attachment of data.
func marshalRequest(m proto.Message, method uint16, data []byte, maxFrame int) (*[]byte, error) {
	bp := getBuf()
	b, err := proto.MarshalOptions{}.MarshalAppend((*bp)[:0], m)
	*bp = b
	if err != nil {
		putBuf(bp)
		return nil, errs.Wrap(errs.Invalid, "rpc "+weftpb.MethodName(method), "encode", err)
	}
	if n := bodyLen(b, data); n > maxFrame {
		putBuf(bp)
		return nil, errs.New(errs.TooBig, "rpc "+weftpb.MethodName(method), "message of %d bytes exceeds the frame limit of %d", n, maxFrame)
	}
	return bp, nil
}

// bodyLen is the body length of a frame carrying msg and attachment data.
func bodyLen(msg, data []byte) int {
	if len(data) == 0 {
		return len(msg)
	}
	return attachLenSize + len(msg) + len(data)
}

// readLoop reads frames until the connection fails or closes, or until
// another goroutine takes over reading while this one runs a handler.
func (c *Conn) readLoop() {
	defer c.cfg.handlers.Done()
	br := c.rd.br
	for {
		var hb [headerLen]byte
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			c.readFailed(err)
			return
		}
		h, err := decodeHeader(&hb, c.cfg.maxFrame)
		if err != nil {
			c.readFailed(err)
			return
		}
		bp := &c.rd.rbuf
		if h.typ == frameRequest || h.typ == frameOneWay {
			bp = getBuf() // handed to the handler
		}
		msg, data, err := c.readFrameBody(&h, bp)
		if err != nil {
			PutBuffer(data)
			c.readFailed(err)
			return
		}
		switch h.typ {
		case frameResponse:
			c.deliver(&h, msg, data)
			if cap(c.rd.rbuf) > maxPooledBuf {
				c.rd.rbuf = nil
			}
		case frameCancel:
			c.cancelServing(h.id)
		case framePing:
			c.ka.pings.Add(1) // its bytes have done its work
		default:
			// With nothing more buffered, run the handler right here:
			// handing it to a new goroutine costs more than most handlers.
			retire, err := c.startHandler(&h, bp, msg, data, br.Buffered() == 0)
			if err != nil {
				c.readFailed(err)
				return
			}
			if retire {
				return
			}
		}
	}
}

// readFrameBody reads the body of the frame whose header is h (readBody),
// in one piece while the server's budget allows, and as it arrives beyond
// (budget.go). A body that does not arrive within FrameTimeout closes the
// connection.
func (c *Conn) readFrameBody(h *header, bp *[]byte) (msg, data []byte, err error) {
	if h.bodyLen == 0 {
		return readBody(c.rd.br, h, bp, false)
	}
	b := c.cfg.budget
	if b != nil {
		b.reading.Add(1)
		defer b.reading.Add(-1)
	}
	whole := b.take(h.bodyLen)
	if whole {
		defer b.give(h.bodyLen)
	}
	// Most bodies are in the reader's buffer already: no deadline to set.
	timed := c.cfg.frameTimeout > 0 && c.rd.br.Buffered() < h.bodyLen
	if timed {
		c.nc.SetReadDeadline(time.Now().Add(c.cfg.frameTimeout))
	}
	msg, data, err = readBody(c.rd.br, h, bp, !whole)
	if timed {
		c.nc.SetReadDeadline(time.Time{})
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			err = errs.New(errs.Unavailable, "rpc", "%s frame of %d bytes from %s not received within %v",
				h.typ, h.bodyLen, c.nc.RemoteAddr(), c.cfg.frameTimeout)
		}
	}
	return msg, data, err
}

// takeoverDelay is how long the reader may run a handler itself before
// another goroutine takes over reading. Long enough for most handlers to
// finish, short enough that a slow one barely delays the requests behind it
// (and the cancel frame meant for it).
const takeoverDelay = 20 * time.Microsecond

// runInline runs a handler on the reading goroutine. If it runs longer than
// takeoverDelay, takeOverReading starts a new reader, and runInline reports
// that this goroutine must stop reading once the handler returns.
//
// The timer is the reader's, not the handler's: once a takeover has
// happened, the new reader may have armed it for a handler of its own, so
// a retiring reader leaves it alone. (It used to stop it: the new reader's
// handler then ran with no takeover to come, and a handler that waits for
// a later frame on the same connection, a change waiting for the lease
// release its client sent next, waited for the lease term.)
func (c *Conn) runInline(serve func()) (retire bool) {
	c.rd.mu.Lock()
	c.rd.mu.inline = true
	gen := c.rd.mu.gen
	c.rd.mu.Unlock()
	d := takeoverDelay
	if c.cfg.takeoverDelay > 0 {
		d = c.cfg.takeoverDelay
	}
	c.rd.takeover.Reset(d)

	serve()

	c.rd.mu.Lock()
	retire = c.rd.mu.gen != gen
	if !retire {
		c.rd.takeover.Stop()
		c.rd.mu.inline = false
	}
	c.rd.mu.Unlock()
	return retire
}

// takeOverReading starts a new read loop when the reader is busy running a
// handler. It runs from the takeover timer; a late or stale firing finds the
// reader not inline and does nothing.
func (c *Conn) takeOverReading() {
	c.rd.mu.Lock()
	defer c.rd.mu.Unlock()
	if !c.rd.mu.inline {
		return
	}
	c.rd.mu.inline = false
	c.rd.mu.gen++
	// The inline reader still holds its count in handlers (it cannot see
	// the new gen before we unlock), so this Add does not start from zero.
	c.cfg.handlers.Add(1)
	go c.readLoop()
}

// readFailed closes the connection after a read error, logging what matters:
// a malformed frame is worth a warning, a peer hanging up is not.
func (c *Conn) readFailed(err error) {
	c.mu.Lock()
	closed := c.mu.closed
	c.mu.Unlock()
	if closed {
		return
	}
	remote := c.nc.RemoteAddr().String()
	switch {
	case errs.Is(err, errs.Protocol):
		c.cfg.log.Warn("rpc: closing connection after a protocol error", "remote", remote, "err", err)
	case errors.Is(err, io.EOF):
		c.cfg.log.Debug("rpc: peer closed the connection", "remote", remote)
		err = errs.New(errs.Unavailable, "rpc", "connection to %s closed by the peer", remote)
	case errors.Is(err, io.ErrUnexpectedEOF):
		c.cfg.log.Info("rpc: connection closed in the middle of a frame", "remote", remote)
	default:
		c.cfg.log.Info("rpc: connection failed", "remote", remote, "err", err)
	}
	if !errs.Is(err, errs.Protocol) && !errs.Is(err, errs.Unavailable) {
		err = errs.Wrap(errs.Unavailable, "rpc", "read from "+remote, err)
	}
	c.closeWithError(err)
}

// deliver completes the pending call a response belongs to, handing it the
// attachment data. A response for a call that is no longer pending (its
// caller gave up) is dropped.
func (c *Conn) deliver(h *header, msg, data []byte) {
	c.mu.Lock()
	cl := c.mu.pending[h.id]
	delete(c.mu.pending, h.id)
	c.mu.Unlock()
	if cl == nil {
		PutBuffer(data)
		return
	}
	cl.respBytes = len(msg) + len(data)
	switch {
	case h.isError():
		cl.err = &errs.Error{Kind: h.kind, Msg: strings.ToValidUTF8(string(msg), "\uFFFD")}
	case data != nil && !cl.wantData:
		cl.err = errs.New(errs.Protocol, "rpc "+weftpb.MethodName(h.method), "response carries a %d-byte attachment; the method needs CallData", len(data))
	default:
		if cl.resp != nil {
			if err := proto.Unmarshal(msg, cl.resp); err != nil {
				cl.err = errs.Wrap(errs.Protocol, "rpc "+weftpb.MethodName(h.method), "decode response", err)
			}
		}
		if cl.err == nil {
			cl.respData, data = data, nil
		}
	}
	PutBuffer(data) // unless the call took it
	cl.done <- struct{}{}
}

// ctxError is the error for a call whose context ended (or whose deadline
// passed a moment before the context noticed).
func ctxError(ctx context.Context, op string) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return errs.Wrap(errs.Canceled, op, "", ctx.Err())
	}
	return errs.Wrap(errs.Timeout, op, "", context.DeadlineExceeded)
}

// withCallTimeout gives a context without a deadline the default bound d
// (0: none).
func withCallTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// ctxEnded reports whether ctx is done or its deadline has passed.
func ctxEnded(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
