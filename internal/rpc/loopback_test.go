package rpc

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/proto/weftpb"
)

// serverTransports returns the transports of the server's connections that
// made an echo request.
func (ts *testServer) serverTransports() []string {
	var out []string
	ts.seen.Range(func(k, _ any) bool {
		out = append(out, k.(*Conn).Transport())
		return true
	})
	return out
}

// TestSecureLoopbackIsBare: between two loopback addresses a secure
// connection carries its frames bare after the TLS handshake, on both
// sides, and works as any other (attachments, callbacks).
func TestSecureLoopbackIsBare(t *testing.T) {
	serverTLS, clientTLS := testTLS(t)
	ts := startTestServer(t, ServerOptions{TLS: serverTLS, IntegrityOnly: true})
	mux := NewMux()
	Handle(mux, mEcho, func(_ context.Context, req *weftpb.ReadlinkReply) (*weftpb.ReadlinkReply, error) {
		return msg("client:" + req.Target), nil
	})
	c := dialTest(t, ts.addr, DialOptions{TLS: clientTLS, IntegrityOnly: true, Mux: mux})
	if c.Transport() != TransportLoopback {
		t.Fatalf("client transport %q; want %q", c.Transport(), TransportLoopback)
	}
	if _, ok := c.nc.(*net.TCPConn); !ok {
		t.Fatalf("client carries frames on a %T, not the bare TCP connection", c.nc)
	}
	ctx := testCtx(t)
	if got, err := echo(ctx, c, "bare"); err != nil || got != "echo:bare" {
		t.Fatalf("echo: %q, %v", got, err)
	}
	if got := ts.serverTransports(); len(got) != 1 || got[0] != TransportLoopback {
		t.Fatalf("server transports %q; want one %q", got, TransportLoopback)
	}
	data := bytes.Repeat([]byte("loopback"), 300<<10)
	if got, err := c.CallData(ctx, mData, msg("echo"), data, nil); err != nil || !bytes.Equal(got, bytes.ToUpper(data)) {
		t.Fatalf("attachment: %d bytes, %v", len(got), err)
	}
	var r weftpb.ReadlinkReply
	if err := c.Call(ctx, mCallback, msg("x"), &r); err != nil || r.Target != "client said client:x" {
		t.Fatalf("callback: %q, %v", r.Target, err)
	}
}

// TestLoopbackRecordsOnRequest: either side asking for the record layer
// gets it, and the two agree.
func TestLoopbackRecordsOnRequest(t *testing.T) {
	serverTLS, clientTLS := testTLS(t)
	for _, c := range []struct {
		name           string
		server, client bool // RecordsOnLoopback
	}{{"client asks", false, true}, {"server asks", true, false}, {"both", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			ts := startTestServer(t, ServerOptions{TLS: serverTLS, IntegrityOnly: true, RecordsOnLoopback: c.server})
			conn := dialTest(t, ts.addr, DialOptions{TLS: clientTLS, IntegrityOnly: true, RecordsOnLoopback: c.client})
			if got, err := echo(testCtx(t), conn, "r"); err != nil || got != "echo:r" {
				t.Fatalf("echo: %q, %v", got, err)
			}
			if conn.Transport() != TransportRecords {
				t.Fatalf("client transport %q; want %q", conn.Transport(), TransportRecords)
			}
			if got := ts.serverTransports(); len(got) != 1 || got[0] != TransportRecords {
				t.Fatalf("server transports %q; want one %q", got, TransportRecords)
			}
		})
	}
	// Private mode never goes bare.
	ts := startTestServer(t, ServerOptions{TLS: serverTLS})
	if conn := dialTest(t, ts.addr, DialOptions{TLS: clientTLS}); conn.Transport() != TransportTLS {
		t.Fatalf("private transport %q", conn.Transport())
	}
}

// relay is a TCP proxy on 127.0.0.1 in front of addr: a local process
// without any certificate that sits between a client and a server (say on
// the port of a stopped server). Once tamper is set it flips a bit of
// every byte it passes to the server.
type relay struct {
	ln     net.Listener
	tamper atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func startRelay(t *testing.T, addr string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln}
	r.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, in, out)
			r.mu.Unlock()
			r.wg.Go(func() { r.pipe(out, in, true); out.Close() })
			r.wg.Go(func() { io.Copy(in, out); in.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *relay) pipe(dst, src net.Conn, toServer bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && toServer && r.tamper.Load() {
			for i := range buf[:n] {
				buf[i] ^= 0x20
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestRelayedLoopbackKeepsRecords: a relay between two loopback ends
// cannot get the connection onto the bare path (the addresses each end
// sees differ), so the record layer stays, and what the relay changes
// is caught.
func TestRelayedLoopbackKeepsRecords(t *testing.T) {
	serverTLS, clientTLS := testTLS(t)
	ts := startTestServer(t, ServerOptions{TLS: serverTLS, IntegrityOnly: true})
	r := startRelay(t, ts.addr)
	c := dialTest(t, r.ln.Addr().String(), DialOptions{TLS: clientTLS, IntegrityOnly: true})
	ctx := testCtx(t)
	if got, err := echo(ctx, c, "relayed"); err != nil || got != "echo:relayed" {
		t.Fatalf("echo through the relay: %q, %v", got, err)
	}
	if c.Transport() != TransportRecords {
		t.Fatalf("client transport through a relay %q; want %q", c.Transport(), TransportRecords)
	}
	if got := ts.serverTransports(); len(got) != 1 || got[0] != TransportRecords {
		t.Fatalf("server transports %q; want one %q", got, TransportRecords)
	}
	r.tamper.Store(true)
	if got, err := echo(ctx, c, "changed"); err == nil {
		t.Fatalf("a call the relay changed was answered: %q", got)
	}
	waitfor.Until(t, 10*time.Second, "server logs the failed check", func() bool {
		return bytes.Contains([]byte(ts.log.String()), []byte("integrity check"))
	})
}

// recordingConn records what one side writes.
type recordingConn struct {
	net.Conn
	mu    sync.Mutex
	wrote []byte
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.wrote = append(c.wrote, p...)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// TestReplayedLoopbackHandshakeRefused: the bytes a client sent on a bare
// loopback connection (handshake, acknowledgement, one request), replayed
// by someone who captured them on a new connection, are refused at the TLS
// handshake (the server's random differs, so the client's Finished and
// signature no longer verify): the request is never served.
func TestReplayedLoopbackHandshakeRefused(t *testing.T) {
	serverTLS, clientTLS := testTLS(t)
	ts := startTestServer(t, ServerOptions{TLS: serverTLS, IntegrityOnly: true})
	ctx := testCtx(t)

	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingConn{Conn: nc}
	cfg := withALPN(clientTLS, true)
	cfg.ServerName = "127.0.0.1"
	tc := tls.Client(rec, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Fatal(err)
	}
	bc, features, bare, err := integrityHandshake(ctx, tc, rec, true, true)
	if err != nil || !bare {
		t.Fatalf("switch: bare %v, %v", bare, err)
	}
	c := newConn(bc, connConfig{handlers: new(sync.WaitGroup), peerFeatures: features})
	c.cfg.handlers.Add(1)
	c.start()
	if got, err := echo(ctx, c, "once"); err != nil || got != "echo:once" {
		t.Fatalf("echo: %q, %v", got, err)
	}
	c.Close()
	waitfor.Until(t, 10*time.Second, "the server's connection closes", func() bool {
		ts.srv.mu.Lock()
		defer ts.srv.mu.Unlock()
		return len(ts.srv.mu.conns) == 0
	})
	rec.mu.Lock()
	captured := append([]byte(nil), rec.wrote...)
	rec.mu.Unlock()

	replay, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer replay.Close()
	if _, err := replay.Write(captured); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, replay)
	if n := len(ts.serverTransports()); n != 1 {
		t.Fatalf("%d connections made an echo request; want only the honest one", n)
	}
	if !bytes.Contains([]byte(ts.log.String()), []byte("rejecting connection")) {
		t.Fatalf("the server did not reject the replay:\n%s", ts.log.String())
	}
}

// TestLoopbackOfferToOlderServer: a server that predates the bare path
// reads only the hello, answers without the bit and expects the record
// layer; the client's offer, left unread in the server's TLS buffer,
// does not disturb it.
func TestLoopbackOfferToOlderServer(t *testing.T) {
	serverTLS, clientTLS := testTLS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer nc.Close()
		// The integrity handshake of the version before the bare path.
		tc := tls.Server(nc, withALPN(serverTLS, true))
		if err := tc.Handshake(); err != nil {
			got <- err
			return
		}
		ic, err := newIntegrityConn(nc, tc.ConnectionState(), false)
		if err != nil {
			got <- err
			return
		}
		var peer [helloLen]byte
		if _, err := io.ReadFull(tc, peer[:]); err != nil {
			got <- err
			return
		}
		h := hello()
		if _, err := tc.Write(h[:]); err != nil {
			got <- err
			return
		}
		if _, err := ic.readRecord(nil); err != nil {
			got <- err
			return
		}
		buf := make([]byte, 5)
		_, err = io.ReadFull(ic, buf)
		if err == nil && string(buf) != "hello" {
			err = errs.New(errs.Protocol, "test", "read %q", buf)
		}
		got <- err
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cfg := withALPN(clientTLS, true)
	cfg.ServerName = "127.0.0.1"
	tc := tls.Client(nc, cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	cc, _, bare, err := integrityHandshake(ctx, tc, nc, true, true)
	if err != nil || bare {
		t.Fatalf("switch with an older server: bare %v, %v", bare, err)
	}
	if _, err := cc.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("older server: %v", err)
	}
}
