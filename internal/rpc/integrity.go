package rpc

import (
	"bufio"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// The integrity-only record layer (security = "secure"). Go's TLS 1.3 has
// no null cipher, so a connection that needs authenticated peers and
// untampered bytes but no secrecy runs the TLS 1.3 handshake (mutual
// certificates, as in private mode) and then leaves TLS: its bytes travel
// in the clear on the raw TCP connection, in records each carrying an
// AES-GMAC tag:
//
//	record = length (4 bytes, big endian) | payload | tag (16 bytes)
//	tag    = AES-GCM Seal(key, nonce, plaintext = nil, additional data = payload)
//	nonce  = 4 zero bytes | the direction's record sequence number (8 bytes)
//
// Each direction has its own key, exported from the TLS session
// (ExportKeyingMaterial), so nothing computed without the handshake's
// secrets verifies. The sequence number is implicit: a record replayed,
// dropped or moved checks against the wrong number and fails, which closes
// the connection. The length is not in the tag's input but any change to
// it changes which bytes are taken as payload and tag.
//
// Leaving TLS must not lose bytes that a tls.Conn has already read ahead
// from the socket, so the switch is a strict turn-taking (integrity
// handshake): the client sends its weft hello over TLS; the server reads
// it, answers with its hello over TLS and from then reads only raw; the
// client reads the answer, and from then on writes only records, starting
// with an empty one (the ack). The server sends nothing raw before the
// ack has arrived, and each side's last TLS read is of a message after
// which its peer sent nothing until it had answered.
//
// Both sides must agree on the mode; the TLS handshake's ALPN names it, so
// a private client and a secure server fail at the handshake, clearly.

const (
	alpnPrivate   = "weft/1"
	alpnIntegrity = "weft-integrity/1"

	integrityLabel   = "weft integrity v1"
	integrityTagLen  = 16
	integrityHdrLen  = 4
	maxIntegrityData = 256 << 10 // payload bytes per record
)

// withALPN returns cfg naming the record layer the connection will use.
func withALPN(cfg *tls.Config, integrity bool) *tls.Config {
	cfg = cfg.Clone()
	if integrity {
		cfg.NextProtos = []string{alpnIntegrity}
	} else {
		cfg.NextProtos = []string{alpnPrivate}
	}
	return cfg
}

// integrityConn is a raw connection carrying integrity records.
type integrityConn struct {
	net.Conn
	r struct {
		br      *bufio.Reader
		aead    cipher.AEAD
		seq     uint64
		buf     []byte // a record payload longer than the caller's buffer
		pending []byte // what of buf is not yet returned
		err     error  // sticky
		// Scratch space, here so that a record costs no allocation.
		hdr   [integrityHdrLen]byte
		tag   [integrityTagLen]byte
		nonce [12]byte
	}
	w struct {
		sync.Mutex
		aead  cipher.AEAD
		seq   uint64
		hdr   [integrityHdrLen]byte
		tag   []byte
		nonce [12]byte
		vec   [3][]byte
	}
}

// newIntegrityConn keys the record layer of raw from the TLS session of tc.
func newIntegrityConn(raw net.Conn, cs tls.ConnectionState, isClient bool) (*integrityConn, error) {
	km, err := cs.ExportKeyingMaterial(integrityLabel, nil, 32)
	if err != nil {
		return nil, errs.Wrap(errs.Protocol, "rpc integrity", "export keys", err)
	}
	clientKey, serverKey := km[:16], km[16:]
	if !isClient {
		clientKey, serverKey = serverKey, clientKey
	}
	// clientKey now keys what this side writes.
	wa, err := newGMAC(clientKey)
	if err != nil {
		return nil, err
	}
	ra, err := newGMAC(serverKey)
	if err != nil {
		return nil, err
	}
	c := &integrityConn{Conn: raw}
	c.r.br = bufio.NewReaderSize(raw, 32<<10)
	c.r.aead, c.w.aead = ra, wa
	c.w.tag = make([]byte, 0, integrityTagLen)
	return c, nil
}

func newGMAC(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, errs.Wrap(errs.Protocol, "rpc integrity", "key", err)
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		return nil, errs.Wrap(errs.Protocol, "rpc integrity", "key", err)
	}
	return a, nil
}

// nonceOf fills n with the nonce of record seq.
func nonceOf(n *[12]byte, seq uint64) []byte {
	binary.BigEndian.PutUint64(n[4:], seq)
	return n[:]
}

// Write sends p as one or more records.
func (c *integrityConn) Write(p []byte) (int, error) {
	c.w.Lock()
	defer c.w.Unlock()
	written := 0
	for {
		chunk := p[:min(len(p), maxIntegrityData)]
		if err := c.writeRecordLocked(chunk); err != nil {
			return written, err
		}
		written += len(chunk)
		p = p[len(chunk):]
		if len(p) == 0 {
			return written, nil
		}
	}
}

func (c *integrityConn) writeRecordLocked(payload []byte) error {
	binary.BigEndian.PutUint32(c.w.hdr[:], uint32(len(payload)))
	tag := c.w.aead.Seal(c.w.tag[:0], nonceOf(&c.w.nonce, c.w.seq), nil, payload)
	c.w.seq++
	c.w.vec = [3][]byte{c.w.hdr[:], payload, tag}
	bufs := net.Buffers(c.w.vec[:])
	_, err := bufs.WriteTo(c.Conn)
	c.w.vec = [3][]byte{} // keep no reference to the caller's payload
	return err
}

// errTampered is what a record failing its check gives: the connection is
// dead, since its stream can no longer be trusted.
func errTampered(remote net.Addr) error {
	return errs.New(errs.Protocol, "rpc integrity", "a record from %s failed its integrity check (tampered with, replayed or reordered)", remote)
}

// Read returns verified payload bytes.
func (c *integrityConn) Read(p []byte) (int, error) {
	for len(c.r.pending) == 0 {
		if c.r.err != nil {
			return 0, c.r.err
		}
		if len(p) == 0 {
			return 0, nil
		}
		n, err := c.readRecord(p)
		if err != nil {
			c.r.err = err
			return 0, err
		}
		if n >= 0 {
			return n, nil
		}
	}
	n := copy(p, c.r.pending)
	c.r.pending = c.r.pending[n:]
	return n, nil
}

// readRecord reads and checks one record: into p if it fits (returning
// its length; an empty record returns -1, to read on), else into r.buf,
// leaving it pending (and returning -1).
func (c *integrityConn) readRecord(p []byte) (int, error) {
	if _, err := io.ReadFull(c.r.br, c.r.hdr[:]); err != nil {
		return 0, err
	}
	n := int(binary.BigEndian.Uint32(c.r.hdr[:]))
	if n > maxIntegrityData {
		return 0, errTampered(c.RemoteAddr())
	}
	dst := p
	if n > len(p) {
		if cap(c.r.buf) < n {
			c.r.buf = make([]byte, n)
		}
		dst = c.r.buf
	}
	dst = dst[:n]
	if _, err := io.ReadFull(c.r.br, dst); err != nil {
		return 0, unexpectedEOF(err)
	}
	if _, err := io.ReadFull(c.r.br, c.r.tag[:]); err != nil {
		return 0, unexpectedEOF(err)
	}
	if _, err := c.r.aead.Open(c.r.tag[:0], nonceOf(&c.r.nonce, c.r.seq), c.r.tag[:], dst); err != nil {
		return 0, errTampered(c.RemoteAddr())
	}
	c.r.seq++
	if n == 0 {
		return -1, nil
	}
	if n > len(p) {
		c.r.pending = dst
		return -1, nil
	}
	return n, nil
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// integrityHandshake runs the weft hello over tc in turns and leaves TLS
// for the record layer on raw (see the comment at the top), or, if bare
// and the loopback exchange agrees (loopback.go), for raw itself; bare
// reports which.
func integrityHandshake(ctx context.Context, tc *tls.Conn, raw net.Conn, isClient, allowBare bool) (nc net.Conn, features uint16, bare bool, err error) {
	remote := raw.RemoteAddr().String()
	if dl, ok := ctx.Deadline(); ok {
		raw.SetDeadline(dl)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		raw.SetDeadline(time.Unix(1, 0))
		close(fired)
	})
	nc, peer, err := integritySwitch(tc, raw, isClient, allowBare)
	if !stop() {
		<-fired
	}
	if err != nil {
		return nil, 0, false, errs.Wrap(errs.Unavailable, "rpc handshake", remote, err)
	}
	if err := checkHello(peer); err != nil {
		err.Path = remote
		return nil, 0, false, err
	}
	_, bare = nc.(*integrityConn)
	return nc, helloFeatures(peer), !bare, raw.SetDeadline(time.Time{})
}

func integritySwitch(tc *tls.Conn, raw net.Conn, isClient, allowBare bool) (net.Conn, [helloLen]byte, error) {
	var peer [helloLen]byte
	ic, err := newIntegrityConn(raw, tc.ConnectionState(), isClient)
	if err != nil {
		return nil, peer, err
	}
	if isClient {
		h := hello()
		msg := h[:]
		offer := allowBare && loopbackPair(raw)
		if offer {
			h = helloFeaturing(featureBare)
			// One write, so one TLS record: a server that reads only
			// the hello leaves the binding in its buffer.
			msg = append(h[:], binding(raw.LocalAddr(), raw.RemoteAddr())...)
		}
		if _, err := tc.Write(msg); err != nil {
			return nil, peer, err
		}
		if _, err := io.ReadFull(tc, peer[:]); err != nil {
			return nil, peer, err
		}
		if offer {
			if bare, err := bareSwitchClient(tc, raw, peer); bare || err != nil {
				return raw, peer, err
			}
		}
		// The ack: an empty record, the first raw bytes.
		return ic, peer, ic.writeAck()
	}
	if _, err := io.ReadFull(tc, peer[:]); err != nil {
		return nil, peer, err
	}
	bare, err := bareSwitchServer(tc, raw, peer, allowBare)
	if err != nil {
		return nil, peer, err
	}
	if bare {
		h := helloFeaturing(featureBare)
		if _, err := tc.Write(append(h[:], binding(raw.LocalAddr(), raw.RemoteAddr())...)); err != nil {
			return nil, peer, err
		}
		return raw, peer, readBareAck(raw)
	}
	h := hello()
	if _, err := tc.Write(h[:]); err != nil {
		return nil, peer, err
	}
	if _, err := ic.readRecord(nil); err != nil {
		return nil, peer, err
	}
	if len(ic.r.pending) != 0 {
		return nil, peer, errs.New(errs.Protocol, "rpc integrity", "the first record is not the empty ack")
	}
	return ic, peer, nil
}

func (c *integrityConn) writeAck() error {
	c.w.Lock()
	defer c.w.Unlock()
	return c.writeRecordLocked(nil)
}
