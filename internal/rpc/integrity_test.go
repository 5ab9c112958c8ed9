package rpc

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/weftfs/weft/internal/errs"
)

func TestIntegrityOnly(t *testing.T) {
	serverTLS, clientTLS := testTLS(t)
	ts := startTestServer(t, ServerOptions{TLS: serverTLS, IntegrityOnly: true})
	c := dialTest(t, ts.addr, DialOptions{TLS: clientTLS, IntegrityOnly: true, RecordsOnLoopback: true})
	if c.Transport() != TransportRecords {
		t.Fatalf("transport %q; want %q", c.Transport(), TransportRecords)
	}
	ctx := testCtx(t)
	if got, err := echo(ctx, c, "clear but signed"); err != nil || got != "echo:clear but signed" {
		t.Fatalf("echo over the integrity layer: %q, %v", got, err)
	}
	// Attachments larger than a record.
	data := bytes.Repeat([]byte("integrity"), 200<<10)
	if got, err := c.CallData(ctx, mData, msg("echo"), data, nil); err != nil || !bytes.Equal(got, bytes.ToUpper(data)) {
		t.Fatalf("attachment over the integrity layer: %d bytes, %v", len(got), err)
	}
	// A private (encrypting) client and an integrity-only server do not
	// agree: the handshake says so.
	if _, err := Dial(ctx, ts.addr, DialOptions{TLS: clientTLS}); !errs.Is(err, errs.Unavailable) {
		t.Fatalf("private client to a secure server: %v; want Unavailable", err)
	}
}

// recordPair returns the two ends of an integrity record layer over a pipe,
// keyed by a real TLS handshake, and the raw ends an attacker would sit on.
func recordPair(t *testing.T) (client, server *integrityConn) {
	t.Helper()
	serverTLS, clientTLS := testTLS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		ic  *integrityConn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		tc := tls.Server(nc, withALPN(serverTLS, true))
		if err := tc.Handshake(); err != nil {
			done <- result{err: err}
			return
		}
		ic, _, _, err := integrityHandshake(testCtx(t), tc, nc, false, false)
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{ic: ic.(*integrityConn)}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cfg := withALPN(clientTLS, true)
	cfg.ServerName = "127.0.0.1"
	tc := tls.Client(nc, cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	cc, _, _, err := integrityHandshake(testCtx(t), tc, nc, true, false)
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { cc.Close(); r.ic.Close() })
	return cc.(*integrityConn), r.ic
}

// record returns the bytes of one record as c would write it next.
func (c *integrityConn) sealForTest(payload []byte) []byte {
	c.w.Lock()
	defer c.w.Unlock()
	var b []byte
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	b = c.w.aead.Seal(b, nonceOf(&c.w.nonce, c.w.seq), nil, payload)
	c.w.seq++
	return b
}

// TestIntegrityRefusesTamperingAndReplay: a record whose payload, tag or
// length was changed, a record sent twice, and records swapped are all
// refused, and the connection stays refused.
func TestIntegrityRefusesTamperingAndReplay(t *testing.T) {
	for _, c := range []struct {
		name  string
		forge func(a, b []byte) []byte // a and b: two consecutive records
	}{
		{"flipped payload bit", func(a, _ []byte) []byte { a[6] ^= 1; return a }},
		{"flipped tag bit", func(a, _ []byte) []byte { a[len(a)-1] ^= 1; return a }},
		{"changed length", func(a, _ []byte) []byte { a[3]--; return a }},
		{"replayed", func(a, _ []byte) []byte { return append(append([]byte{}, a...), a...) }},
		{"reordered", func(a, b []byte) []byte { return append(append([]byte{}, b...), a...) }},
		{"dropped", func(_, b []byte) []byte { return b }},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, server := recordPair(t)
			a := client.sealForTest([]byte("write 16 bytes at offset 0"))
			b := client.sealForTest([]byte("delete chunks of inode 7"))
			wire := c.forge(a, b)
			go client.Conn.Write(wire)
			buf := make([]byte, 64)
			var got []byte
			var err error
			for err == nil && len(got) < 2*len("write 16 bytes at offset 0") {
				var n int
				n, err = server.Read(buf)
				got = append(got, buf[:n]...)
			}
			if !errs.Is(err, errs.Protocol) {
				t.Fatalf("read %q, then %v; want a Protocol error", got, err)
			}
			if bytes.Contains(got, []byte("delete")) {
				t.Fatalf("a forged record was delivered: %q", got)
			}
			if _, err := server.Read(buf); !errs.Is(err, errs.Protocol) {
				t.Fatalf("read after a failed check: %v; want the same error", err)
			}
		})
	}
	// The untouched stream passes.
	client, server := recordPair(t)
	go client.Write([]byte("hello"))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("an honest record: %q, %v", buf, err)
	}
}
