package auth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// Files of a CA directory and of an identity directory.
const (
	CACertFile = "ca.crt" // PEM: the current CA certificate, then the previous one during a rotation
	CAKeyFile  = "ca.key" // PEM: the current CA's private key, mode 0600
	CertFile   = "cert.pem"
	KeyFile    = "key.pem" // mode 0600
)

// Lifetimes. A CA outlives every identity it signs; a cluster rotates its CA
// (weft ca rotate) long before either ends.
const (
	CALifetime       = 20 * 365 * 24 * time.Hour
	IdentityLifetime = 10 * 365 * 24 * time.Hour
	// clockSkew backdates certificates so that a peer whose clock is a
	// little behind accepts a certificate issued a moment ago.
	clockSkew = time.Hour
)

// CA is a cluster's certificate authority: the key that signs identities and
// the certificates a cluster trusts.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// Trusted is the current CA certificate first, then the previous one
	// while a rotation is in progress (ca_rotate.go).
	Trusted []*x509.Certificate
	// Cross, after a rotation, is Cert signed by the previous CA; nil
	// otherwise.
	Cross *x509.Certificate
}

// newKey is the key of every CA and identity: ECDSA P-256, whose handshakes
// cost less than RSA's and which every TLS stack accepts.
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// NewCA returns a fresh self-signed CA named after cluster; nothing is
// written.
func NewCA(cluster string, now time.Time) (*CA, error) {
	const op = "new cluster ca"
	key, err := newKey()
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, "", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, "", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "weft cluster CA " + cluster, Organization: []string{"weft"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		IsCA:                  true,
		BasicConstraintsValid: true,
		// One CA below it at most: the next CA's cross certificate
		// (ca_rotate.go), which signs identities only.
		MaxPathLen: 1,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, "", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, "", err)
	}
	return &CA{Cert: cert, Key: key, Trusted: []*x509.Certificate{cert}}, nil
}

// InitCA creates a CA in dir (created with mode 0700 if missing). A
// directory that already holds a CA is left alone: errs.Exist.
func InitCA(dir, cluster string, now time.Time) (*CA, error) {
	const op = "init cluster ca"
	if _, err := os.Stat(filepath.Join(dir, CAKeyFile)); err == nil {
		return nil, errs.New(errs.Exist, op, "%s already holds a CA; use weft ca rotate to replace it", dir)
	}
	ca, err := NewCA(cluster, now)
	if err != nil {
		return nil, err
	}
	if err := ca.Write(dir); err != nil {
		return nil, err
	}
	return ca, nil
}

// Write stores the CA in dir: the trusted certificates in ca.crt (0644) and
// the key in ca.key (0600). Each file is replaced atomically; the key goes
// first, so that a crash between the two leaves a key with no certificate
// trusting it yet rather than a certificate whose key is lost.
func (ca *CA) Write(dir string) error {
	const op = "write cluster ca"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return errs.Wrap(fileKind(err), op, dir, err)
	}
	keyPEM, err := encodeKey(ca.Key)
	if err != nil {
		return errs.Wrap(errs.Invalid, op, dir, err)
	}
	if err := writeFileAtomic(filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, CACertFile), encodeCerts(ca.Trusted), 0o644)
}

// LoadCA reads the CA in dir.
func LoadCA(dir string) (*CA, error) {
	const op = "load cluster ca"
	certs, err := readCerts(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, errs.WithPath(err, op, dir)
	}
	key, err := readKey(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, errs.WithPath(err, op, dir)
	}
	if !publicKeyMatches(certs[0], key) {
		return nil, errs.New(errs.Invalid, op, "%s: ca.key is not the key of the first certificate in ca.crt", dir)
	}
	if !certs[0].IsCA {
		return nil, errs.New(errs.Invalid, op, "%s: the first certificate in ca.crt is not a CA", dir)
	}
	ca := &CA{Cert: certs[0], Key: key, Trusted: certs}
	ca.Cross = loadCross(dir, ca)
	return ca, nil
}

// Pool returns the certificates the cluster trusts as a pool.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range ca.Trusted {
		pool.AddCert(c)
	}
	return pool
}

func publicKeyMatches(cert *x509.Certificate, key crypto.Signer) bool {
	pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(key.Public())
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func encodeCerts(certs []*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range certs {
		pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

// readCerts reads a PEM file of one or more certificates.
func readCerts(path string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, errs.Wrap(fileKind(err), "read certificates", path, err)
	}
	var certs []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, errs.Wrap(errs.Invalid, "read certificates", path, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errs.New(errs.Invalid, "read certificates", "%s holds no PEM certificate", path)
	}
	return certs, nil
}

// readKey reads a PEM PKCS#8 private key.
func readKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, errs.Wrap(fileKind(err), "read key", path, err)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, errs.New(errs.Invalid, "read key", "%s holds no PEM private key", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, errs.Wrap(errs.Invalid, "read key", path, err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, errs.New(errs.Invalid, "read key", "%s: a %T cannot sign", path, k)
	}
	return s, nil
}

// writeFileAtomic writes data to path through a synced temporary file and a
// rename, so that a reader sees the old content or the new, never a part.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	const op = "write"
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return errs.Wrap(fileKind(err), op, path, err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	err = tmp.Chmod(mode)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return errs.Wrap(fileKind(err), op, path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func fileKind(err error) errs.Kind {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errs.NotExist
	case errors.Is(err, os.ErrPermission):
		return errs.Permission
	case errors.Is(err, os.ErrExist):
		return errs.Exist
	}
	return errs.IO
}
