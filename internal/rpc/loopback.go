package rpc

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"

	"github.com/weftfs/weft/internal/errs"
)

// Loopback connections in secure mode (docs/design.md, "Threat model").
//
// On one machine the integrity record layer costs as much as the copy it
// protects: both ends' AES-GMAC runs on the same cores as the kernel's
// loopback copy, and a 1 MiB transfer took twice as long as in plaintext.
// What the records protect against, someone on the path who changes,
// replays or drops bytes, has no place on a loopback connection: a
// process needs root (CAP_NET_RAW or CAP_NET_ADMIN in the host's network
// namespace, or ptrace of one end) to read or inject bytes of another
// user's loopback TCP connection, and root already reads the keys.
//
// So a secure-mode connection whose two ends are loopback addresses runs
// the same mutual TLS 1.3 handshake as any other (the same certificates,
// CA, role and identity checks: nothing about who the peer is changes),
// and then, instead of the record layer, carries frames on the bare TCP
// connection. The hazard is a relay: a local process without a
// certificate that squats the port of a stopped server and passes a
// client's handshake bytes on to another real server could, on a bare
// connection, then change what flows through it. Against that, the
// switch is bound to the TCP connection itself: inside TLS (so only the
// two authenticated ends can write it) the client names the connection's
// two addresses as it sees them, and the server takes the bare path only
// if they are its own, mirrored. A relay holds two TCP connections, so the
// addresses cannot match (the server's own address is the client's remote
// one, and nobody but the server's user can listen on it); both ends then
// keep the record layer, which the relay cannot forge. The server answers
// with its view, and the client checks it too.
//
// Exchange (after the TLS handshake, in place of the integrity handshake's
// first two messages; the turn-taking of integrity.go is kept, so that no
// raw byte is read ahead by a tls.Conn):
//
//	client → server, over TLS: hello (featureBare set) | binding
//	server → client, over TLS: hello (featureBare set iff it agrees) [| binding]
//	client → server, raw:      bareAck if bare, else the empty integrity record
//	binding = length (1 byte) | "local remote" as this side sees them
//
// An older server reads only the hello, leaves the binding unread in its
// TLS buffer, answers without the bit, and the record layer follows as
// before. Private mode never takes this path: it was asked to encrypt
// everything.

// featureBare in a hello sent over TLS offers (client) or accepts (server)
// the bare loopback path.
const featureBare = 1 << 1

// bareAck is the client's first raw bytes on a bare connection: after it
// the server may write raw.
var bareAck = [8]byte{'W', 'E', 'F', 'T', 'B', 'A', 'R', 'E'}

// loopbackPair reports whether both addresses of a TCP connection are
// loopback addresses.
func loopbackPair(nc net.Conn) bool {
	l, ok := nc.LocalAddr().(*net.TCPAddr)
	r, ok2 := nc.RemoteAddr().(*net.TCPAddr)
	return ok && ok2 && l.IP.IsLoopback() && r.IP.IsLoopback()
}

// binding is the connection's two addresses as one side sees them.
func binding(local, remote net.Addr) []byte {
	s := local.String() + " " + remote.String()
	return append([]byte{byte(len(s))}, s...)
}

// readBinding reads a binding from r.
func readBinding(r io.Reader) ([]byte, error) {
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	b := make([]byte, 1+int(n[0]))
	b[0] = n[0]
	_, err := io.ReadFull(r, b[1:])
	return b, err
}

// bareSwitchClient is the client's side of the exchange after it sent its
// hello with featureBare and binding over tc, and read the server's hello
// peer: it returns true if the connection goes on bare.
func bareSwitchClient(tc *tls.Conn, raw net.Conn, peer [helloLen]byte) (bool, error) {
	if helloFeatures(peer)&featureBare == 0 {
		return false, nil
	}
	theirs, err := readBinding(tc)
	if err != nil {
		return false, err
	}
	if !bytes.Equal(theirs, binding(raw.RemoteAddr(), raw.LocalAddr())) {
		return false, errs.New(errs.Protocol, "rpc loopback", "the server sees this connection as %q, not as its own addresses (relayed?)", theirs[1:])
	}
	_, err = raw.Write(bareAck[:])
	return err == nil, err
}

// bareSwitchServer decides, after reading the client's hello peer over tc,
// whether the connection goes on bare: only if the client offered it,
// allow, both addresses are loopback, and the client's binding is this
// side's own view mirrored. It reads the binding when one was offered.
func bareSwitchServer(tc *tls.Conn, raw net.Conn, peer [helloLen]byte, allow bool) (bool, error) {
	if helloFeatures(peer)&featureBare == 0 {
		return false, nil
	}
	theirs, err := readBinding(tc)
	if err != nil {
		return false, err
	}
	return allow && loopbackPair(raw) && bytes.Equal(theirs, binding(raw.RemoteAddr(), raw.LocalAddr())), nil
}

// readBareAck reads the client's first raw bytes on a bare connection.
func readBareAck(raw net.Conn) error {
	var got [len(bareAck)]byte
	if _, err := io.ReadFull(raw, got[:]); err != nil {
		return err
	}
	if got != bareAck {
		return errs.New(errs.Protocol, "rpc loopback", "the first raw bytes are not the bare path's acknowledgement")
	}
	return nil
}

// integrityTransport names the transport of a secure-mode connection.
func integrityTransport(bare bool) string {
	if bare {
		return TransportLoopback
	}
	return TransportRecords
}
