// Package rpc is weft's transport: length-prefixed binary frames carrying
// protobuf messages over TCP (optionally TLS), with many requests in flight per
// connection, request ids, deadlines that travel with the request, cancellation,
// one-way messages, and calls in both directions on one connection (a server
// can call back the client that connected to it). It knows nothing about file
// systems: methods are numbers (proto/weftpb/methods.go) and payloads are
// opaque proto messages.
//
// # Wire format
//
// A connection starts with a handshake: each side writes 8 bytes,
//
//	"WEFT" | version uint16 | features uint16
//
// and reads the other's. Feature bit 0 says that the side sends pings
// (keepalive.go); a version-2 side that predates it sends zero. A bad magic or a different version fails the
// connection on both sides with an errs.Protocol error naming both versions.
//
// After the handshake each side writes frames. Every frame has a fixed 24-byte
// header followed by a body; integers are big-endian:
//
//	offset size field
//	0      4    body length in bytes (not counting the header), <= max frame size
//	4      1    frame type: 1 request, 2 response, 3 one-way, 4 cancel,
//	            5 ping
//	5      1    flags: bit 0 (error) on responses only; bit 1 (attachment)
//	            on requests, one-way messages and responses without the
//	            error flag; other bits must be zero
//	6      2    method number
//	8      8    request id, chosen by the side that sends the request
//	16     8    aux: for requests and one-way messages the time the caller
//	            still allows, in nanoseconds (0 = no deadline, at most 2^63-1);
//	            for responses with the error flag the errs.Kind (must be
//	            valid); zero everywhere else
//	24     n    body: the request or response proto, or for an error response
//	            the error message (UTF-8); empty for cancel and ping
//
// A body with the attachment flag carries raw bytes after the message, so
// that bulk data (chunk contents) is never copied into or out of a proto:
//
//	offset size field
//	0      4    attachment length a, at most n-4
//	4      n-4-a the message
//	n-a    a    the attachment
//
// Request ids belong to the sending side: a response or cancel frame names an
// id that its receiver chose when it sent the request. Anything malformed
// (unknown type or flag, bad kind, oversized length, an attachment longer
// than its body, non-empty cancel or ping) closes the connection: the stream can no
// longer be trusted to be in sync.
//
// # Flow
//
// Writes from all goroutines go through one write buffer; the last writer in
// a burst flushes, so concurrent frames share system calls while a lone
// caller pays no extra latency. A large attachment is not copied into the
// buffer: it leaves with the buffered bytes in one writev. On the receiving
// side an attachment is read straight into a pooled buffer (GetBuffer) that
// the handler or the caller gets, with no proto decoding and no zeroing. One goroutine per connection reads frames;
// each request and one-way message runs in its own goroutine, so responses
// can leave in any order. A caller whose context ends gets errs.Canceled or
// errs.Timeout at once, and a cancel frame tells the other side to cancel the
// handler's context.
//
// # Bounds
//
// Nothing waits without limit (docs/wire.md "Limits and timeouts"). A call
// whose context has no deadline gets CallTimeout (60 s); a caller stuck
// behind another's write still returns when its context ends (write.go). A
// peer that goes silent, as a process stopped with SIGSTOP does while its
// kernel keeps the connection open, is declared dead after PeerTimeout
// (5 s) thanks to pings (keepalive.go). A frame header buys its sender no
// memory: bodies beyond a server-wide budget are allocated as they arrive,
// and a body that stops coming closes its connection after FrameTimeout
// (budget.go).
package rpc

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// Version is the protocol version exchanged in the handshake. Bump it on any
// incompatible change to the frame layout. Version 2 added attachments.
const Version = 2

// DefaultMaxFrameSize bounds a frame's body unless the options say otherwise.
// The largest regular frame carries a whole chunk of the largest chunk size
// (64 MiB) as its attachment; the extra MiB is for its message.
const DefaultMaxFrameSize = 65 << 20

const (
	headerLen = 24
	helloLen  = 8
)

var magic = [4]byte{'W', 'E', 'F', 'T'}

type frameType uint8

const (
	frameRequest  frameType = 1
	frameResponse frameType = 2
	frameOneWay   frameType = 3
	frameCancel   frameType = 4
	// framePing says only that its sender is alive (keepalive.go).
	framePing frameType = 5
)

func (t frameType) String() string {
	switch t {
	case frameRequest:
		return "request"
	case frameResponse:
		return "response"
	case frameOneWay:
		return "one-way"
	case frameCancel:
		return "cancel"
	case framePing:
		return "ping"
	}
	return fmt.Sprintf("frame type %d", uint8(t))
}

const (
	// flagError marks a response whose body is an error message rather
	// than a proto message.
	flagError = 1 << 0
	// flagData marks a body that ends with a raw attachment; the body
	// starts with the attachment's length (attachLenSize bytes).
	flagData = 1 << 1
)

// attachLenSize is the size of the attachment length that starts a body
// with flagData.
const attachLenSize = 4

// header is a decoded frame header.
type header struct {
	typ     frameType
	flags   uint8
	method  uint16
	id      uint64
	bodyLen int           // everything after the header
	timeout time.Duration // requests and one-way; 0 = none
	kind    errs.Kind     // error responses
}

func (h *header) isError() bool { return h.flags&flagError != 0 }

// hasData reports whether the body carries an attachment.
func (h *header) hasData() bool { return h.flags&flagData != 0 }

// encodeHeader writes h into b. It does not validate: senders build headers
// from values they control.
func encodeHeader(b *[headerLen]byte, h *header) {
	binary.BigEndian.PutUint32(b[0:4], uint32(h.bodyLen))
	b[4] = byte(h.typ)
	b[5] = h.flags
	binary.BigEndian.PutUint16(b[6:8], h.method)
	binary.BigEndian.PutUint64(b[8:16], h.id)
	var aux uint64
	switch {
	case h.typ == frameRequest || h.typ == frameOneWay:
		aux = uint64(h.timeout)
	case h.typ == frameResponse && h.isError():
		aux = uint64(h.kind)
	}
	binary.BigEndian.PutUint64(b[16:24], aux)
}

// decodeHeader parses and validates a frame header from the network.
func decodeHeader(b *[headerLen]byte, maxBody int) (header, error) {
	n := binary.BigEndian.Uint32(b[0:4])
	h := header{
		typ:    frameType(b[4]),
		flags:  b[5],
		method: binary.BigEndian.Uint16(b[6:8]),
		id:     binary.BigEndian.Uint64(b[8:16]),
	}
	aux := binary.BigEndian.Uint64(b[16:24])
	if uint64(n) > uint64(maxBody) {
		return header{}, errs.New(errs.Protocol, "rpc", "%s frame of %d bytes exceeds the limit of %d", h.typ, n, maxBody)
	}
	h.bodyLen = int(n)
	switch h.typ {
	case frameRequest, frameOneWay:
		if h.flags&^flagData != 0 {
			return header{}, errs.New(errs.Protocol, "rpc", "%s frame with unknown flags %#x", h.typ, h.flags)
		}
		if aux > math.MaxInt64 {
			return header{}, errs.New(errs.Protocol, "rpc", "%s frame with negative timeout", h.typ)
		}
		h.timeout = time.Duration(aux)
	case frameResponse:
		if h.flags&^(flagError|flagData) != 0 || h.flags == flagError|flagData {
			return header{}, errs.New(errs.Protocol, "rpc", "response frame with unknown flags %#x", h.flags)
		}
		if h.isError() {
			if aux > math.MaxUint8 || !errs.Kind(aux).Valid() {
				return header{}, errs.New(errs.Protocol, "rpc", "response frame with unknown error kind %d", aux)
			}
			h.kind = errs.Kind(aux)
		} else if aux != 0 {
			return header{}, errs.New(errs.Protocol, "rpc", "response frame with non-zero aux field %#x", aux)
		}
	case frameCancel, framePing:
		if h.flags != 0 || aux != 0 || n != 0 {
			return header{}, errs.New(errs.Protocol, "rpc", "malformed %s frame", h.typ)
		}
	default:
		return header{}, errs.New(errs.Protocol, "rpc", "unknown frame type %d", uint8(h.typ))
	}
	if h.hasData() && h.bodyLen < attachLenSize {
		return header{}, errs.New(errs.Protocol, "rpc", "%s frame of %d bytes too short for its attachment length", h.typ, h.bodyLen)
	}
	return h, nil
}

// decodeAttachLen parses the attachment length that starts the body of a
// frame with flagData and returns the message's and the attachment's
// lengths.
func decodeAttachLen(b *[attachLenSize]byte, h *header) (msgLen, dataLen int, err error) {
	a := binary.BigEndian.Uint32(b[:])
	rest := h.bodyLen - attachLenSize
	if uint64(a) > uint64(rest) {
		return 0, 0, errs.New(errs.Protocol, "rpc", "%s frame with an attachment of %d bytes in a body of %d", h.typ, a, h.bodyLen)
	}
	return rest - int(a), int(a), nil
}

// readBody reads the body of a frame whose header is h: the message into
// *msgBuf (grown as needed), and the attachment, if any, into a buffer from
// GetBuffer. The attachment is read straight from r into
// its buffer: with a bufio.Reader, a large one bypasses the reader's buffer.
// With grow, both are allocated as their bytes arrive (budget.go) rather
// than as the header declares.
func readBody(r io.Reader, h *header, msgBuf *[]byte, grow bool) (msg, data []byte, err error) {
	msgLen := h.bodyLen
	dataLen := 0
	if h.hasData() {
		var lb [attachLenSize]byte
		if _, err := io.ReadFull(r, lb[:]); err != nil {
			return nil, nil, noEOF(err)
		}
		if msgLen, dataLen, err = decodeAttachLen(&lb, h); err != nil {
			return nil, nil, err
		}
	}
	if grow {
		msg, err = readGrowing(r, msgLen, (*msgBuf)[:0], func(n int) []byte { return make([]byte, n) }, func([]byte) {})
		*msgBuf = msg
	} else {
		if cap(*msgBuf) < msgLen {
			*msgBuf = make([]byte, msgLen)
		}
		msg = (*msgBuf)[:msgLen]
		_, err = io.ReadFull(r, msg)
	}
	if err != nil {
		return nil, nil, noEOF(err)
	}
	if h.hasData() {
		if grow {
			data, err = readGrowing(r, dataLen, nil, GetBuffer, PutBuffer)
		} else {
			data = GetBuffer(dataLen)
			_, err = io.ReadFull(r, data)
		}
		if err != nil {
			return nil, data, noEOF(err)
		}
	}
	return msg, data, nil
}

// noEOF turns an EOF in the middle of a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readFrame reads one frame from r (tests and fuzzing; the read loop reads
// the parts itself). The message is read into *buf, grown as needed; the
// attachment into a buffer from GetBuffer.
func readFrame(r io.Reader, maxBody int, buf *[]byte) (header, []byte, []byte, error) {
	var hb [headerLen]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return header{}, nil, nil, err
	}
	h, err := decodeHeader(&hb, maxBody)
	if err != nil {
		return header{}, nil, nil, err
	}
	msg, data, err := readBody(r, &h, buf, true)
	if err != nil {
		return header{}, nil, nil, err
	}
	return h, msg, data, nil
}

// hello is the handshake message of this side. The field that version 2
// reserved (and its readers ignore) carries feature bits.
func hello() [helloLen]byte { return helloFeaturing(0) }

// helloFeaturing is hello with the feature bits extra set as well.
func helloFeaturing(extra uint16) [helloLen]byte {
	var b [helloLen]byte
	copy(b[:4], magic[:])
	binary.BigEndian.PutUint16(b[4:6], Version)
	binary.BigEndian.PutUint16(b[6:8], featurePing|extra)
	return b
}

// helloFeatures is the feature bits of a handshake message.
func helloFeatures(b [helloLen]byte) uint16 { return binary.BigEndian.Uint16(b[6:8]) }

// checkHello validates the other side's handshake message.
func checkHello(b [helloLen]byte) *errs.Error {
	if [4]byte(b[:4]) != magic {
		return errs.New(errs.Protocol, "rpc handshake", "peer does not speak the weft protocol (got magic %q)", b[:4])
	}
	if v := binary.BigEndian.Uint16(b[4:6]); v != Version {
		return errs.New(errs.Protocol, "rpc handshake", "protocol version mismatch: this side speaks version %d, the peer version %d", Version, v)
	}
	return nil
}
