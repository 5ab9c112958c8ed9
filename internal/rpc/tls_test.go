package rpc

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// testTLS returns a server config with a fresh self-signed certificate for
// 127.0.0.1 and a client config that trusts it.
func testTLS(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "weft test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true,

		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	client = &tls.Config{RootCAs: pool}
	return server, client
}

func TestTLS(t *testing.T) {
	serverTLS, clientTLS := testTLS(t)
	ts := startTestServer(t, ServerOptions{TLS: serverTLS})
	c := dialTest(t, ts.addr, DialOptions{TLS: clientTLS})
	ctx := testCtx(t)
	if got, err := echo(ctx, c, "secret"); err != nil || got != "echo:secret" {
		t.Fatalf("echo over TLS: %q, %v", got, err)
	}
	// Attachments, which go out by writev on plain TCP, go through TLS too.
	data := bytes.Repeat([]byte("tls"), 100<<10)
	if got, err := c.CallData(ctx, mData, msg("echo"), data, nil); err != nil || !bytes.Equal(got, bytes.ToUpper(data)) {
		t.Fatalf("attachment over TLS: %d bytes, %v", len(got), err)
	}
	// A plain client cannot talk to a TLS server.
	if _, err := Dial(ctx, ts.addr, DialOptions{}); err == nil {
		t.Fatal("plain dial to a TLS server succeeded")
	}
	// Nor a client that does not trust the certificate.
	if _, err := Dial(ctx, ts.addr, DialOptions{TLS: &tls.Config{}}); !errs.Is(err, errs.Unavailable) {
		t.Fatalf("dial with an untrusted certificate: %v; want Unavailable", err)
	}
}
