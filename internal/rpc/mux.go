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
// request body, runs the function, and appends the encoded response to out.
type handler struct {
	oneWay bool
	serve  func(ctx context.Context, body, out []byte) ([]byte, error)
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
	m.register(method, &handler{serve: func(ctx context.Context, body, out []byte) ([]byte, error) {
		req := typ.New().Interface().(Req)
		if err := proto.Unmarshal(body, req); err != nil {
			return out, errs.Wrap(errs.Protocol, "rpc", "decode request", err)
		}
		resp, err := fn(ctx, req)
		if err != nil {
			return out, err
		}
		out, err = proto.MarshalOptions{}.MarshalAppend(out, resp)
		if err != nil {
			return out, errs.Wrap(errs.IO, "rpc", "encode response", err)
		}
		return out, nil
	}})
}

// HandleOneWay registers fn for one-way messages of method: nothing is sent
// back, and errors are the handler's to log.
func HandleOneWay[Req proto.Message](m *Mux, method uint16, fn func(ctx context.Context, req Req)) {
	var zero Req
	typ := zero.ProtoReflect().Type()
	m.register(method, &handler{oneWay: true, serve: func(ctx context.Context, body, out []byte) ([]byte, error) {
		req := typ.New().Interface().(Req)
		if err := proto.Unmarshal(body, req); err != nil {
			return out, errs.Wrap(errs.Protocol, "rpc", "decode one-way message", err)
		}
		fn(ctx, req)
		return out, nil
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
