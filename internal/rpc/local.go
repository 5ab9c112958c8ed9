package rpc

import (
	"context"
	"net"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// In-process calls. A client in the same process as a server (weft up
// --mount: the mount, its meta server and its store server in one process)
// can call the server's handlers directly instead of through loopback TCP,
// which costs four syscalls, two goroutine wake-ups and the kernel's TCP
// work per request: more than most metadata handlers themselves.
//
// A local call keeps the wire's semantics: the request and response are
// encoded and decoded as on a connection (the handler never shares memory
// with the caller's messages), the frame limit applies, the handler's
// context carries the caller's deadline and cancellation but none of its
// values, a handler's error reaches the caller as an *errs.Error with its
// kind and message only, a panic becomes errs.IO, the server's observer
// counts the call, and a closed server answers errs.Unavailable. What
// differs: no connection exists, so ConnFromContext returns nil in the
// handler and the server cannot call back; and a request's attachment is
// the caller's own slice (HandleData's handlers must not keep it, as on the
// wire).

// localPeer is what a Peer dialing a server in its own process uses.
type localPeer struct {
	srv *Server
	obs Observer // the caller's, from DialOptions
	id  any      // the caller's identity, from DialOptions
	// callTimeout bounds calls whose context has no deadline, as on a
	// connection; 0 means none.
	callTimeout time.Duration
}

// localAddr is the remote address a panicking in-process call is logged with.
type localAddr struct{}

func (localAddr) Network() string { return "in-process" }
func (localAddr) String() string  { return "in-process" }

func localRemote() net.Addr { return localAddr{} }

// call runs one request on the server in the calling goroutine.
func (l *localPeer) call(ctx context.Context, method uint16, req proto.Message, data []byte, resp proto.Message, wantData bool) (respData []byte, err error) {
	start := time.Now()
	name := "rpc " + weftpb.MethodName(method)
	if ctxEnded(ctx) {
		return nil, ctxError(ctx, name)
	}
	ctx, cancel := withCallTimeout(ctx, l.callTimeout)
	defer cancel()
	s := l.srv
	maxFrame := s.maxFrame()
	bp, err := marshalRequest(req, method, data, maxFrame)
	if err != nil {
		return nil, err
	}
	defer putBuf(bp)
	msg := *bp
	// From here on the request counts as sent, as on a connection.
	reqBytes, respBytes := len(msg)+len(data), 0
	defer func() {
		if l.obs != nil {
			l.obs.Observe(method, time.Since(start), reqBytes, respBytes, err)
		}
	}()
	if len(data) == 0 {
		data = nil // as on the wire: no attachment
	}

	hctx, done, err := s.enterLocal(ctx, true)
	if err != nil {
		return nil, err
	}
	defer done()
	hd := s.mux.lookup(method)
	switch {
	case hd == nil || hd.oneWay:
		err = errs.New(errs.NotSupported, "rpc", "method %d (%s) is not served here", method, weftpb.MethodName(method))
	case data != nil && !hd.withData:
		err = errs.New(errs.Protocol, name, "the request carries an attachment the method does not take")
	default:
		err = authorize(s.opts.Authorize, method, l.id)
	}
	hctx = withIdentity(hctx, l.id)
	var out []byte
	var att Attachment
	if err == nil {
		ob := getBuf()
		defer putBuf(ob)
		out, att, err = runHandler(hctx, s.log, localRemote, method, hd, msg, data, (*ob)[:0])
		if out != nil {
			*ob = out
		}
		defer att.release()
		if n := bodyLen(out, att.Data); err == nil && n > maxFrame {
			err = errs.New(errs.TooBig, name, "response of %d bytes exceeds the frame limit of %d", n, maxFrame)
		}
	}
	if s.opts.Observer != nil {
		sb := 0
		if err == nil {
			sb = len(out) + len(att.Data)
		}
		s.opts.Observer.Observe(method, time.Since(start), reqBytes, sb, err)
	}
	if err != nil {
		return nil, wireError(err)
	}
	respBytes = len(out) + len(att.Data)
	if len(att.Data) > 0 && !wantData {
		return nil, errs.New(errs.Protocol, name, "response carries a %d-byte attachment; the method needs CallData", len(att.Data))
	}
	if resp != nil {
		if err := proto.Unmarshal(out, resp); err != nil {
			return nil, errs.Wrap(errs.Protocol, name, "decode response", err)
		}
	}
	if len(att.Data) > 0 {
		respData = GetBuffer(len(att.Data))
		copy(respData, att.Data)
	}
	return respData, nil
}

// send runs a one-way message's handler in a goroutine of its own, as a
// connection does when its reader is busy.
func (l *localPeer) send(ctx context.Context, method uint16, req proto.Message) error {
	name := "rpc " + weftpb.MethodName(method)
	if ctxEnded(ctx) {
		return ctxError(ctx, name)
	}
	s := l.srv
	bp, err := marshalRequest(req, method, nil, s.maxFrame())
	if err != nil {
		return err
	}
	// The message outlives the caller's context, as on the wire: only its
	// deadline travels.
	hctx, done, err := s.enterLocal(ctx, false)
	if err != nil {
		putBuf(bp)
		return err
	}
	hd := s.mux.lookup(method)
	if hd == nil || !hd.oneWay {
		putBuf(bp)
		done()
		s.log.Debug("rpc: dropping one-way message for an unknown method", "method", method)
		return nil
	}
	if err := authorize(s.opts.Authorize, method, l.id); err != nil {
		putBuf(bp)
		done()
		return err
	}
	hctx = withIdentity(hctx, l.id)
	go func() {
		defer done()
		defer putBuf(bp)
		start := time.Now()
		_, _, err := runHandler(hctx, s.log, localRemote, method, hd, *bp, nil, nil)
		if s.opts.Observer != nil {
			s.opts.Observer.Observe(method, time.Since(start), len(*bp), 0, err)
		}
	}()
	return nil
}

// wireError is err as a caller on a connection receives it: its kind and
// message, nothing it wraps.
func wireError(err error) error {
	msg := err.Error()
	if len(msg) > maxErrorMessage {
		msg = msg[:maxErrorMessage]
	}
	return &errs.Error{Kind: wireKind(err), Msg: strings.ToValidUTF8(msg, "\uFFFD")}
}
