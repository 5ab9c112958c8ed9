package rpc

import (
	"context"

	"github.com/weftfs/weft/proto/weftpb"
)

// Raw calls and handlers pass a request's and a response's encoded message
// through without knowing its type: a proxy (internal/edge) forwards a
// method it need not decode. The bytes travel as the unknown fields of an
// Empty message, which protobuf keeps and re-encodes verbatim, so the frame
// code stays the one for typed messages.

// RawHandler serves a request from its encoded message and attachment (nil
// if none); both live in buffers reused once it returns. It returns the
// encoded response and an attachment to send after it.
type RawHandler func(ctx context.Context, msg, data []byte) (resp []byte, att Attachment, err error)

// HandleRaw registers fn for method, with attachments allowed both ways.
// An error fn returns reaches the caller with its kind and message, as with
// Handle: an *errs.Error received from another server passes through
// unchanged.
func HandleRaw(m *Mux, method uint16, fn RawHandler) {
	m.register(method, &handler{withData: true, serve: func(ctx context.Context, msg, data, out []byte) ([]byte, Attachment, error) {
		resp, att, err := fn(ctx, msg, data)
		if err != nil {
			att.release()
			return out, Attachment{}, err
		}
		return append(out, resp...), att, nil
	}})
}

// rawMessage wraps encoded bytes as a message.
func rawMessage(b []byte) *weftpb.Empty {
	m := &weftpb.Empty{}
	if len(b) > 0 {
		m.ProtoReflect().SetUnknown(b)
	}
	return m
}

// CallRaw is CallData with an encoded request message; it returns the
// encoded response message and its attachment (in a buffer from GetBuffer,
// nil if none).
func (c *Conn) CallRaw(ctx context.Context, method uint16, msg, data []byte) (resp, respData []byte, err error) {
	out := &weftpb.Empty{}
	_, respData, err = c.call(ctx, method, rawMessage(msg), data, out, true)
	return out.ProtoReflect().GetUnknown(), respData, err
}

// CallRaw is Conn.CallRaw on the Peer's connection, dialing first if
// needed; like Call, a request that never left is sent once more on a
// fresh connection.
func (p *Peer) CallRaw(ctx context.Context, method uint16, msg, data []byte) (resp, respData []byte, err error) {
	out := &weftpb.Empty{}
	respData, err = p.CallData(ctx, method, rawMessage(msg), data, out)
	return out.ProtoReflect().GetUnknown(), respData, err
}
