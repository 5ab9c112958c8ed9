package auth

import (
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
)

// Bundle is a loaded identity directory: the holder's certificate and key,
// what the certificate says, and the CA certificates it trusts.
type Bundle struct {
	Cert     tls.Certificate
	Identity Identity
	Trusted  []*x509.Certificate
}

// Issue signs a new identity. Server identities (meta, store) name
// 127.0.0.1 and localhost and each of hosts (IP addresses or DNS names),
// which dialers verify; every identity may serve and dial, since servers
// call each other.
func (ca *CA) Issue(id Identity, hosts []string, now time.Time) (*Bundle, error) {
	const op = "issue identity"
	if err := id.Validate(); err != nil {
		return nil, err
	}
	key, err := newKey()
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, "", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, "", err)
	}
	u, err := url.Parse(id.String())
	if err != nil {
		return nil, errs.Wrap(errs.Invalid, op, id.String(), err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: id.String(), Organization: []string{"weft"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(IdentityLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		URIs:         []*url.URL{u},
	}
	if id.Role.Server() {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		tmpl.DNSNames = []string{"localhost"}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else if h != "" {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, id.String(), err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, id.String(), err)
	}
	chain := [][]byte{der}
	if ca.Cross != nil {
		chain = append(chain, ca.Cross.Raw)
	}
	return &Bundle{
		Cert:     tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf},
		Identity: id,
		Trusted:  ca.Trusted,
	}, nil
}

// Write stores the bundle in dir (created 0700): cert.pem, key.pem (0600)
// and ca.crt, the CA certificates it trusts.
func (b *Bundle) Write(dir string) error {
	const op = "write identity"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return errs.Wrap(fileKind(err), op, dir, err)
	}
	keyPEM, err := encodeKey(b.Cert.PrivateKey.(crypto.Signer))
	if err != nil {
		return errs.Wrap(errs.Invalid, op, dir, err)
	}
	if err := writeFileAtomic(filepath.Join(dir, KeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	var chain []*x509.Certificate
	for _, der := range b.Cert.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return errs.Wrap(errs.Invalid, op, dir, err)
		}
		chain = append(chain, c)
	}
	if err := writeFileAtomic(filepath.Join(dir, CertFile), encodeCerts(chain), 0o644); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, CACertFile), encodeCerts(b.Trusted), 0o644)
}

// LoadIdentity reads an identity directory written by Bundle.Write. The
// certificate must chain to one of the CA certificates beside it.
func LoadIdentity(dir string) (*Bundle, error) {
	const op = "load identity"
	certs, err := readCerts(filepath.Join(dir, CertFile))
	if err != nil {
		return nil, errs.WithPath(err, op, dir)
	}
	key, err := readKey(filepath.Join(dir, KeyFile))
	if err != nil {
		return nil, errs.WithPath(err, op, dir)
	}
	trusted, err := readCerts(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, errs.WithPath(err, op, dir)
	}
	leaf := certs[0]
	if !publicKeyMatches(leaf, key) {
		return nil, errs.New(errs.Invalid, op, "%s: key.pem is not the key of cert.pem", dir)
	}
	b := &Bundle{Trusted: trusted, Cert: tls.Certificate{PrivateKey: key, Leaf: leaf}}
	for _, c := range certs {
		b.Cert.Certificate = append(b.Cert.Certificate, c.Raw)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: b.pool(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, errs.Wrap(errs.Invalid, op, dir, err)
	}
	if b.Identity, err = IdentityOf(leaf); err != nil {
		return nil, errs.WithPath(err, op, dir)
	}
	return b, nil
}

func (b *Bundle) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range b.Trusted {
		pool.AddCert(c)
	}
	return pool
}

// ServerTLS is the TLS configuration of a server holding b: TLS 1.3 only,
// and a client certificate signed by the cluster CA required of every
// connection.
func (b *Bundle) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{b.Cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    b.pool(),
		// No resumption: every connection proves its certificate, and
		// no ticket travels after the handshake (the integrity-only
		// record layer takes the connection over right after it).
		SessionTicketsDisabled: true,
	}
}

// ClientTLS is the TLS configuration of a dialer holding b: TLS 1.3 only,
// the cluster CA as the only root, and a server certificate whose role is
// meta or store (a client's certificate cannot pose as a server).
func (b *Bundle) ClientTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{b.Cert},
		RootCAs:      b.pool(),
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errs.New(errs.Permission, "verify server", "no certificate")
			}
			id, err := IdentityOf(cs.PeerCertificates[0])
			if err != nil {
				return err
			}
			if !id.Role.Server() {
				return errs.New(errs.Permission, "verify server", "the server's certificate is a %s identity, not a server's", id.Role)
			}
			return nil
		},
	}
}

// ServerOptions sets a server's TLS, identification and method policy in
// opts.
func (b *Bundle) ServerOptions(opts *rpc.ServerOptions) {
	opts.TLS = b.ServerTLS()
	opts.Identify = identifyPeer
	opts.Authorize = Authorize
}

// DialOptions sets a dialer's TLS and in-process identity in opts.
func (b *Bundle) DialOptions(opts *rpc.DialOptions) {
	opts.TLS = b.ClientTLS()
	opts.Identity = b.Identity
}
