package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

func encodeFrame(h header, body []byte) []byte {
	h.bodyLen = len(body)
	var hb [headerLen]byte
	encodeHeader(&hb, &h)
	return append(hb[:], body...)
}

// encodeDataFrame encodes a frame with the attachment flag: the attachment
// length, msg, then data.
func encodeDataFrame(h header, msg, data []byte) []byte {
	h.flags |= flagData
	body := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	body = append(append(body, msg...), data...)
	return encodeFrame(h, body)
}

func TestFrameRoundTrip(t *testing.T) {
	for _, h := range []header{
		{typ: frameRequest, method: 7, id: 1, timeout: 1500 * time.Millisecond},
		{typ: frameRequest, method: 65535, id: 1<<64 - 1},
		{typ: frameOneWay, method: 200, id: 9, timeout: 1},
		{typ: frameResponse, method: 3, id: 42},
		{typ: frameResponse, method: 3, id: 43, flags: flagError, kind: errs.ReadOnly},
		{typ: frameCancel, id: 44},
	} {
		body := []byte("payload")
		if h.typ == frameCancel {
			body = nil
		}
		var buf []byte
		got, gotBody, gotData, err := readFrame(bytes.NewReader(encodeFrame(h, body)), 1<<20, &buf)
		h.bodyLen = len(body)
		if err != nil || got != h || !bytes.Equal(gotBody, body) || gotData != nil {
			t.Errorf("round trip of %+v: got %+v %q %q, %v", h, got, gotBody, gotData, err)
		}
	}
}

func TestFrameAttachmentRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		h         header
		msg, data string
	}{
		{header{typ: frameRequest, method: 100, id: 1, timeout: time.Second}, "msg", "chunk bytes"},
		{header{typ: frameRequest, method: 100, id: 2}, "", "no message at all"},
		{header{typ: frameOneWay, method: 200, id: 3}, "m", "d"},
		{header{typ: frameResponse, method: 101, id: 4}, "reply", "data"},
		{header{typ: frameResponse, method: 101, id: 5}, "empty attachment", ""},
	} {
		var buf []byte
		got, msg, data, err := readFrame(bytes.NewReader(encodeDataFrame(tc.h, []byte(tc.msg), []byte(tc.data))), 1<<20, &buf)
		if err != nil || !got.hasData() || string(msg) != tc.msg || string(data) != tc.data {
			t.Errorf("%+v: got %+v msg %q data %q, %v", tc.h, got, msg, data, err)
		}
	}
}

func TestFrameAttachmentRejects(t *testing.T) {
	good := encodeDataFrame(header{typ: frameRequest, method: 1, id: 1}, []byte("msg"), []byte("data"))
	tooLong := bytes.Clone(good)
	binary.BigEndian.PutUint32(tooLong[headerLen:], 8) // the body holds 3+4
	huge := bytes.Clone(good)
	binary.BigEndian.PutUint32(huge[headerLen:], 1<<32-1)
	short := encodeFrame(header{typ: frameRequest, flags: flagData, method: 1, id: 1}, []byte{0, 0, 0})
	onError := encodeFrame(header{typ: frameResponse, flags: flagError | flagData, kind: errs.NotExist, id: 1}, []byte{0, 0, 0, 0})
	onCancel := encodeFrame(header{typ: frameCancel, flags: flagData, id: 1}, nil)
	for name, frame := range map[string][]byte{
		"attachment longer than the body": tooLong,
		"attachment length 2^32-1":        huge,
		"body shorter than the length":    short,
		"attachment on an error":          onError,
		"attachment on a cancel":          onCancel,
	} {
		var buf []byte
		if _, _, _, err := readFrame(bytes.NewReader(frame), 1<<20, &buf); !errs.Is(err, errs.Protocol) {
			t.Errorf("%s: err = %v; want Protocol", name, err)
		}
	}
}

func TestDecodeHeaderRejects(t *testing.T) {
	raw := func(length uint32, typ, flags byte, aux uint64) *[headerLen]byte {
		var b [headerLen]byte
		binary.BigEndian.PutUint32(b[0:4], length)
		b[4], b[5] = typ, flags
		binary.BigEndian.PutUint64(b[16:24], aux)
		return &b
	}
	for name, b := range map[string]*[headerLen]byte{
		"oversized":             raw(1<<20+1, byte(frameRequest), 0, 0),
		"max uint32 length":     raw(1<<32-1, byte(frameResponse), 0, 0),
		"unknown type":          raw(0, 9, 0, 0),
		"type zero":             raw(0, 0, 0, 0),
		"request flags":         raw(0, byte(frameRequest), 1, 0),
		"negative timeout":      raw(0, byte(frameRequest), 0, 1<<63),
		"response unknown flag": raw(0, byte(frameResponse), 2, 0),
		"bad kind":              raw(0, byte(frameResponse), flagError, uint64(firstInvalidKind())),
		"huge kind":             raw(0, byte(frameResponse), flagError, 256),
		"aux on ok response":    raw(0, byte(frameResponse), 0, 5),
		"cancel with body":      raw(3, byte(frameCancel), 0, 0),
		"cancel with aux":       raw(0, byte(frameCancel), 0, 1),
	} {
		if _, err := decodeHeader(b, 1<<20); !errs.Is(err, errs.Protocol) {
			t.Errorf("%s: err = %v; want Protocol", name, err)
		}
	}
}

// FuzzDecodeFrame feeds arbitrary bytes to the frame reader: it must never
// panic, and whatever it accepts (with or without an attachment) must
// encode back to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(encodeFrame(header{typ: frameRequest, method: 1, id: 1, timeout: time.Second}, []byte{0x0a, 0x01, 'x'}))
	f.Add(encodeFrame(header{typ: frameResponse, method: 1, id: 1, flags: flagError, kind: errs.NotExist}, []byte("no such file")))
	f.Add(encodeFrame(header{typ: frameCancel, id: 3}, nil))
	f.Add(encodeDataFrame(header{typ: frameRequest, method: 100, id: 4, timeout: time.Second}, []byte{0x0a, 0x01, 'x'}, []byte("chunk")))
	f.Add(encodeDataFrame(header{typ: frameResponse, method: 101, id: 5}, nil, []byte("data")))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	const limit = 1 << 16
	f.Fuzz(func(t *testing.T, data []byte) {
		var buf []byte
		h, msg, att, err := readFrame(bytes.NewReader(data), limit, &buf)
		if err != nil {
			if len(data) >= headerLen && !errs.Is(err, errs.Protocol) && err != io.ErrUnexpectedEOF {
				t.Fatalf("full header gave a non-protocol error %v", err)
			}
			return
		}
		if h.bodyLen > limit || bodyLenOf(&h, msg, att) != h.bodyLen {
			t.Fatalf("accepted a message of %d and an attachment of %d bytes (header says %d, limit %d)", len(msg), len(att), h.bodyLen, limit)
		}
		if !h.hasData() && att != nil {
			t.Fatalf("attachment of %d bytes without the flag", len(att))
		}
		if h.typ == frameResponse && h.isError() && !h.kind.Valid() {
			t.Fatalf("accepted invalid kind %d", h.kind)
		}
		again := encodeFrame(h, msg)
		if h.hasData() {
			again = encodeDataFrame(h, msg, att)
		}
		if !bytes.Equal(again, data[:headerLen+h.bodyLen]) {
			t.Fatalf("re-encoded frame differs:\n got %x\nwant %x", again, data[:headerLen+h.bodyLen])
		}
	})
}

// bodyLenOf is the body length that msg and att make with h's flags.
func bodyLenOf(h *header, msg, att []byte) int {
	if h.hasData() {
		return attachLenSize + len(msg) + len(att)
	}
	return len(msg)
}

// rawConn connects to addr and sends hello as its handshake, returning the
// connection and the server's hello.
func rawConn(t *testing.T, addr string, hello []byte) (net.Conn, []byte) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(hello); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, helloLen)
	if _, err := io.ReadFull(nc, got); err != nil {
		t.Fatalf("reading the server's hello: %v", err)
	}
	return nc, got
}

// waitClosed asserts that the server closes nc.
func waitClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, nc); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("server did not close the connection: %v", err)
	}
}

func helloWith(version uint16) []byte {
	h := hello()
	binary.BigEndian.PutUint16(h[4:6], version)
	return h[:]
}

func TestHandshakeVersionMismatch(t *testing.T) {
	t.Run("server side", func(t *testing.T) {
		ts := startTestServer(t, ServerOptions{})
		nc, got := rawConn(t, ts.addr, helloWith(Version+1))
		if !bytes.Equal(got, helloWith(Version)) {
			t.Fatalf("server hello %x", got)
		}
		waitClosed(t, nc)
		if log := ts.log.String(); !strings.Contains(log, "protocol version mismatch") {
			t.Fatalf("server did not log the mismatch:\n%s", log)
		}
	})
	t.Run("client side", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			defer nc.Close()
			nc.Write(helloWith(Version + 1))
			io.Copy(io.Discard, nc)
		}()
		_, err = Dial(testCtx(t), ln.Addr().String(), DialOptions{})
		if !errs.Is(err, errs.Protocol) || !strings.Contains(err.Error(), "version mismatch") {
			t.Fatalf("Dial: %v; want a Protocol version mismatch", err)
		}
	})
	t.Run("bad magic", func(t *testing.T) {
		ts := startTestServer(t, ServerOptions{})
		nc, _ := rawConn(t, ts.addr, []byte("GET / HT"))
		waitClosed(t, nc)
		if log := ts.log.String(); !strings.Contains(log, "does not speak the weft protocol") {
			t.Fatalf("server did not log the bad magic:\n%s", log)
		}
	})
}

func TestMalformedFrameClosesOnlyThatConnection(t *testing.T) {
	ts := startTestServer(t, ServerOptions{MaxFrameSize: 1 << 20})
	good := dialTest(t, ts.addr, DialOptions{})
	ctx := testCtx(t)
	badKind := encodeFrame(header{typ: frameResponse, id: 1, flags: flagError}, nil)
	badKind[16+7] = byte(firstInvalidKind())
	oversized := encodeFrame(header{typ: frameRequest, method: mEcho, id: 1}, nil)
	binary.BigEndian.PutUint32(oversized[0:4], 1<<20+1)
	// An attachment length past the body: the server must not trust it to
	// find the next frame, nor allocate it.
	longAttachment := encodeDataFrame(header{typ: frameRequest, method: mData, id: 1}, []byte("m"), []byte("data"))
	binary.BigEndian.PutUint32(longAttachment[headerLen:], 1<<31)
	shortBody := encodeFrame(header{typ: frameRequest, flags: flagData, method: mData, id: 1}, []byte{0, 0})
	for name, frame := range map[string][]byte{
		"garbage":                    bytes.Repeat([]byte{0xff}, 64),
		"oversized":                  oversized,
		"bad kind":                   badKind,
		"cancel payload":             encodeFrame(header{typ: frameCancel, id: 1}, []byte("x")),
		"attachment past the body":   longAttachment,
		"body shorter than a length": shortBody,
		"attachment on an error":     encodeFrame(header{typ: frameResponse, flags: flagError | flagData, kind: errs.NotExist, id: 1}, []byte{0, 0, 0, 0}),
	} {
		t.Run(name, func(t *testing.T) {
			nc, _ := rawConn(t, ts.addr, helloWith(Version))
			if _, err := nc.Write(frame); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, nc)
			if got, err := echo(ctx, good, name); err != nil || got != "echo:"+name {
				t.Fatalf("other connection broke: %q, %v", got, err)
			}
		})
	}
	if log := ts.log.String(); !strings.Contains(log, "protocol error") {
		t.Fatalf("malformed frames not logged:\n%s", log)
	}
}

func TestMalformedRequestPayload(t *testing.T) {
	ts := startTestServer(t, ServerOptions{})
	nc, _ := rawConn(t, ts.addr, helloWith(Version))
	// Field 1 as a length-delimited string of 10 bytes, but only 1 present.
	if _, err := nc.Write(encodeFrame(header{typ: frameRequest, method: mEcho, id: 7}, []byte{0x0a, 0x0a, 'x'})); err != nil {
		t.Fatal(err)
	}
	var hb [headerLen]byte
	if _, err := io.ReadFull(nc, hb[:]); err != nil {
		t.Fatal(err)
	}
	h, err := decodeHeader(&hb, 1<<20)
	if err != nil || h.id != 7 || !h.isError() || h.kind != errs.Protocol {
		t.Fatalf("response %+v, %v; want a Protocol error for id 7", h, err)
	}
}

func TestHandshakeTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		io.Copy(io.Discard, nc) // never says hello
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, ln.Addr().String(), DialOptions{}); !errs.Is(err, errs.Timeout) {
		t.Fatalf("Dial to a silent server: %v; want Timeout", err)
	}
}

// firstInvalidKind is the smallest errs.Kind not (yet) defined.
func firstInvalidKind() errs.Kind {
	k := errs.Kind(1)
	for k.Valid() {
		k++
	}
	return k
}
