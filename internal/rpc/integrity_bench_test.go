package rpc

import (
	"context"
	"crypto/tls"
	"net"
	"testing"

	"github.com/weftfs/weft/proto/weftpb"
)

// BenchmarkSecurity compares the record layers of the three security
// modes over loopback: none (plain TCP), secure (bare TCP after a TLS 1.3
// handshake, as between loopback addresses; loopback.go), secure-records
// (the integrity-only record layer after the handshake, as between
// machines) and private (TLS 1.3, AES-GCM), for a 64-byte call and a 1 MiB
// upload. Run:
//
//	go test -run - -bench Security -benchtime 2s ./internal/rpc/
func BenchmarkSecurity(b *testing.B) {
	serverTLS, clientTLS := testTLS(b)
	for _, mode := range securityBenchModes {
		sopts, dopts := ServerOptions{}, DialOptions{}
		if mode.tls {
			sopts.TLS, dopts.TLS = serverTLS, clientTLS
			sopts.IntegrityOnly, dopts.IntegrityOnly = mode.integrity, mode.integrity
			dopts.RecordsOnLoopback = mode.records
		}
		c, stop := startSecurityBench(b, sopts, dopts)
		if c.Transport() != mode.transport {
			b.Fatalf("%s: transport %q; want %q", mode.name, c.Transport(), mode.transport)
		}
		b.Run(mode.name+"/call64", func(b *testing.B) {
			ctx := context.Background()
			var resp weftpb.GetXattrReply
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Call(ctx, pingMethod, payload64, &resp); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode.name+"/put1MiB", func(b *testing.B) {
			ctx := context.Background()
			data := make([]byte, 1<<20)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := c.CallData(ctx, sinkMethod, payload64, data, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		stop()
	}
}

// securityBenchModes are the transports of the security benchmarks.
var securityBenchModes = []struct {
	name                    string
	tls, integrity, records bool
	transport               string
}{
	{"none", false, false, false, TransportPlain},
	{"secure", true, true, false, TransportLoopback},
	{"secure-records", true, true, true, TransportRecords},
	{"private", true, false, false, TransportTLS},
}

const sinkMethod = 9100

func startSecurityBench(b *testing.B, sopts ServerOptions, dopts DialOptions) (*Conn, func()) {
	mux := NewMux()
	Handle(mux, pingMethod, func(_ context.Context, req *weftpb.GetXattrReply) (*weftpb.GetXattrReply, error) {
		return req, nil
	})
	HandleData(mux, sinkMethod, func(_ context.Context, _ *weftpb.GetXattrReply, data []byte) (*weftpb.Empty, Attachment, error) {
		return &weftpb.Empty{}, Attachment{}, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := NewServer(mux, sopts)
	go srv.Serve(ln)
	if dopts.TLS != nil {
		dopts.TLS = dopts.TLS.Clone()
		dopts.TLS.ClientSessionCache = tls.NewLRUClientSessionCache(0)
	}
	conn, err := Dial(context.Background(), ln.Addr().String(), dopts)
	if err != nil {
		srv.Close()
		b.Fatal(err)
	}
	return conn, func() { conn.Close(); srv.Close() }
}

// BenchmarkSecurityDial is the cost of a new connection in each mode: TCP,
// the handshakes and, for secure, the switch to the record layer.
func BenchmarkSecurityDial(b *testing.B) {
	serverTLS, clientTLS := testTLS(b)
	for _, mode := range securityBenchModes {
		b.Run(mode.name, func(b *testing.B) {
			sopts, dopts := ServerOptions{}, DialOptions{}
			if mode.tls {
				sopts.TLS, dopts.TLS = serverTLS, clientTLS
				sopts.IntegrityOnly, dopts.IntegrityOnly = mode.integrity, mode.integrity
				dopts.RecordsOnLoopback = mode.records
			}
			c, stop := startSecurityBench(b, sopts, dopts)
			defer stop()
			addr := c.nc.RemoteAddr().String()
			for b.Loop() {
				conn, err := Dial(context.Background(), addr, dopts)
				if err != nil {
					b.Fatal(err)
				}
				conn.Close()
			}
		})
	}
}
