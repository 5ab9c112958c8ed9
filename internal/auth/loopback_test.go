package auth

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// secureTransports are secure mode's two transports between loopback
// addresses: the default (frames bare after the TLS handshake) and the
// record layer kept (records_on_loopback). Who may connect and what each
// identity may call must not depend on which one runs.
var secureTransports = []struct {
	name      string
	records   bool
	transport string
}{
	{"bare", false, rpc.TransportLoopback},
	{"records", true, rpc.TransportRecords},
}

func secureServer(records bool) func(*rpc.ServerOptions) {
	return func(o *rpc.ServerOptions) { o.IntegrityOnly, o.RecordsOnLoopback = true, records }
}

func secureDial(records bool) func(*rpc.DialOptions) {
	return func(o *rpc.DialOptions) { o.IntegrityOnly, o.RecordsOnLoopback = true, records }
}

// forgedAdmin is an administrator's certificate that names the cluster
// CA as its issuer, signed by a key that is not the CA's.
func forgedAdmin(t *testing.T, p *testPKI) *Bundle {
	t.Helper()
	forger, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	id := Identity{Role: RoleAdmin}
	u, _ := url.Parse(id.String())
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7),
		Subject:      pkix.Name{CommonName: id.String(), Organization: []string{"weft"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		URIs:         []*url.URL{u},
	}
	lookalike := *p.ca.Cert
	lookalike.PublicKey = forger.Public()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, &lookalike, &key.PublicKey, forger)
	if err != nil {
		t.Fatal(err)
	}
	return &Bundle{Cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, Identity: id, Trusted: p.ca.Trusted}
}

// refusedOrFails dials addr as b and makes one call: it must not be
// served.
func refusedOrFails(t *testing.T, addr string, b *Bundle, more func(*rpc.DialOptions)) error {
	t.Helper()
	c, err := dialAsWith(t, addr, b, more)
	if err == nil {
		// TLS 1.3 clients finish before the server checks their
		// certificate; the refusal arrives with the first read.
		_, err = whoami(t, c, pb.MethodReadlink)
	}
	return err
}

// TestSecureLoopbackChecksAsTLS: on a secure cluster's loopback
// connections, bare or with records, the peer is authenticated and its
// role checked exactly as on any other: identities carried, foreign CAs,
// forged certificates, plaintext and client certificates posing as
// servers refused, peer and store-internal methods refused to clients.
func TestSecureLoopbackChecksAsTLS(t *testing.T) {
	for _, tr := range secureTransports {
		t.Run(tr.name, func(t *testing.T) {
			p := newTestPKI(t)
			addr := startServerWith(t, p.meta, secureServer(tr.records))
			dial := secureDial(tr.records)

			client := p.issue(t, "client", client1000())
			c, err := dialAsWith(t, addr, client, dial)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := whoami(t, c, pb.MethodReadlink); err != nil || got != client1000().String() {
				t.Fatalf("whoami = %q, %v; want %q", got, err, client1000())
			}
			if c.Transport() != tr.transport {
				t.Fatalf("transport %q; want %q", c.Transport(), tr.transport)
			}
			for _, m := range []uint16{pb.MethodPeerApply, pb.MethodListChunks} {
				if _, err := whoami(t, c, m); !errs.Is(err, errs.Permission) {
					t.Errorf("client calling %s: %v; want Permission", pb.MethodName(m), err)
				}
			}
			mc, err := dialAsWith(t, addr, p.meta, dial)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := whoami(t, mc, pb.MethodPeerApply); err != nil || got != "weft:role=meta" {
				t.Fatalf("meta calling peer_apply: %q, %v", got, err)
			}

			foreign := newTestPKI(t)
			if err := refusedOrFails(t, addr, foreign.issue(t, "admin", Identity{Role: RoleAdmin}), dial); err == nil {
				t.Error("a certificate of a foreign CA was served")
			}
			if err := refusedOrFails(t, addr, forgedAdmin(t, p), dial); err == nil {
				t.Error("a forged certificate naming the cluster CA was served")
			}
			if err := refusedOrFails(t, addr, nil, nil); err == nil {
				t.Error("a plaintext connection was served")
			}
			faddr := startServerWith(t, foreign.meta, secureServer(tr.records))
			if _, err := dialAsWith(t, faddr, client, dial); !errs.Is(err, errs.Unavailable) {
				t.Errorf("dial to a foreign server: %v; want Unavailable", err)
			}
			caddr := startServerWith(t, p.issue(t, "client2", client1000()), secureServer(tr.records))
			if _, err := dialAsWith(t, caddr, p.issue(t, "admin", Identity{Role: RoleAdmin}), dial); !errs.Is(err, errs.Unavailable) {
				t.Errorf("dial to a server holding a client certificate: %v; want Unavailable", err)
			}
		})
	}
}
