package rpc

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/errs"
)

// Mux maps method numbers to handlers. The same Mux may serve many connections
// (a Server's, or a client's for callbacks). Register handlers before serving;
// registering later is safe but racy in the obvious way.
type Mux struct {
	mu struct {
		sync.RWMutex
		handlers map[uint16]*handler
	}
}

// handler is a registered method with its types erased: serve decodes the
// request message, runs the function with the request's attachment (data),
// and appends the encoded response to out, returning the response's
// attachment separately.
type handler struct {
	oneWay   bool
	withData bool // takes and returns attachments (HandleData)
	serve    func(ctx context.Context, msg, data, out []byte) ([]byte, Attachment, error)
}

// Attachment is raw bytes sent after a response message (HandleData). The
// bytes are written to the connection after the handler returns; Release,
// if set, is called once they have been written or the write failed, never
// before, so the handler can lend a buffer (say from GetBuffer) and get it
// back.
type Attachment struct {
	Data    []byte
	Release func()
}

func (a Attachment) release() {
	if a.Release != nil {
		a.Release()
	}
}

// NewMux returns an empty Mux.
func NewMux() *Mux {
	m := &Mux{}
	m.mu.handlers = make(map[uint16]*handler)
	return m
}

// Handle registers fn for method; each request is decoded into a new Req.
// An error fn returns reaches the caller with its kind and message.
// Registering a method twice panics: it is a programming error.
func Handle[Req, Resp proto.Message](m *Mux, method uint16, fn func(ctx context.Context, req Req) (Resp, error)) {
	var zero Req
	typ := zero.ProtoReflect().Type()
	m.register(method, &handler{serve: func(ctx context.Context, msg, _, out []byte) ([]byte, Attachment, error) {
		req := typ.New().Interface().(Req)
		if err := proto.Unmarshal(msg, req); err != nil {
			return out, Attachment{}, errs.Wrap(errs.Protocol, "rpc", "decode request", err)
		}
		resp, err := fn(ctx, req)
		if err != nil {
			return out, Attachment{}, err
		}
		out, err = marshalResponse(out, resp)
		return out, Attachment{}, err
	}})
}

// HandleData registers fn for method, whose requests and responses may carry
// an attachment: raw bytes after the message that no proto encoding copies
// (chunk data). data is the request's attachment, nil if it has none; it
// lives in a pooled buffer that is reused once fn returns, so fn must not
// keep it. fn's Attachment is sent after its response message.
func HandleData[Req, Resp proto.Message](m *Mux, method uint16, fn func(ctx context.Context, req Req, data []byte) (Resp, Attachment, error)) {
	var zero Req
	typ := zero.ProtoReflect().Type()
	m.register(method, &handler{withData: true, serve: func(ctx context.Context, msg, data, out []byte) ([]byte, Attachment, error) {
		req := typ.New().Interface().(Req)
		if err := proto.Unmarshal(msg, req); err != nil {
			return out, Attachment{}, errs.Wrap(errs.Protocol, "rpc", "decode request", err)
		}
		resp, att, err := fn(ctx, req, data)
		if err != nil {
			att.release()
			return out, Attachment{}, err
		}
		out, err = marshalResponse(out, resp)
		if err != nil {
			att.release()
			return out, Attachment{}, err
		}
		return out, att, nil
	}})
}

func marshalResponse(out []byte, resp proto.Message) ([]byte, error) {
	out, err := proto.MarshalOptions{}.MarshalAppend(out, resp)
	if err != nil {
		return out, errs.Wrap(errs.IO, "rpc", "encode response", err)
	}
	return out, nil
}

// HandleOneWay registers fn for one-way messages of method: nothing is sent
// back, and errors are the handler's to log.
func HandleOneWay[Req proto.Message](m *Mux, method uint16, fn func(ctx context.Context, req Req)) {
	var zero Req
	typ := zero.ProtoReflect().Type()
	m.register(method, &handler{oneWay: true, serve: func(ctx context.Context, msg, _, out []byte) ([]byte, Attachment, error) {
		req := typ.New().Interface().(Req)
		if err := proto.Unmarshal(msg, req); err != nil {
			return out, Attachment{}, errs.Wrap(errs.Protocol, "rpc", "decode one-way message", err)
		}
		fn(ctx, req)
		return out, Attachment{}, nil
	}})
}

func (m *Mux) register(method uint16, h *handler) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.mu.handlers[method]; ok {
		panic(fmt.Sprintf("rpc: method %d registered twice", method))
	}
	m.mu.handlers[method] = h
}

// lookup returns the handler for method, or nil. A nil Mux has no handlers.
func (m *Mux) lookup(method uint16) *handler {
	if m == nil {
		return nil
	}
	m.mu.RLock()
	h := m.mu.handlers[method]
	m.mu.RUnlock()
	return h
}
