package auth

import (
	"crypto/rand"
	"crypto/x509"
	"os"
	"path/filepath"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// CACrossFile holds, after a rotation, the new CA's certificate signed by
// the previous CA: identities issued by the new CA send it along, so that
// peers still holding only the previous CA's certificate verify them.
const CACrossFile = "ca-cross.crt"

// Rotation. RotateCA replaces a cluster's CA without a flag day:
//
//   - the new CA's ca.crt trusts the new certificate and the previous one,
//     so identities issued before the rotation keep working everywhere
//     that loads the new trust bundle;
//   - the new CA's certificate is also signed by the previous CA (the
//     cross certificate), and every identity issued after the rotation
//     carries it in its chain, so peers that still trust only the previous
//     CA accept the new identities too.
//
// Re-issuing the identities (weft ca rotate does it for the cluster file's
// servers and admin) and restarting the servers completes the move. A
// second rotation drops the CA before the previous one: only one previous
// CA is trusted at a time.

// RotateCA replaces the CA in dir with a new one and returns it.
func RotateCA(dir, cluster string, now time.Time) (*CA, error) {
	const op = "rotate cluster ca"
	old, err := LoadCA(dir)
	if err != nil {
		return nil, err
	}
	ca, err := NewCA(cluster, now)
	if err != nil {
		return nil, err
	}
	tmpl := *ca.Cert
	tmpl.MaxPathLen, tmpl.MaxPathLenZero = 0, true
	cross, err := x509.CreateCertificate(rand.Reader, &tmpl, old.Cert, ca.Cert.PublicKey, old.Key)
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, dir, err)
	}
	if ca.Cross, err = x509.ParseCertificate(cross); err != nil {
		return nil, errs.Wrap(errs.IO, op, dir, err)
	}
	ca.Trusted = []*x509.Certificate{ca.Cert, old.Cert}
	// The cross certificate goes first: a crash before ca.crt is
	// replaced leaves the old CA whole (LoadCA ignores a cross
	// certificate that does not match its key).
	if err := writeFileAtomic(filepath.Join(dir, CACrossFile), encodeCerts([]*x509.Certificate{ca.Cross}), 0o644); err != nil {
		return nil, err
	}
	if err := ca.Write(dir); err != nil {
		return nil, err
	}
	return ca, nil
}

// loadCross reads the cross certificate in dir if it certifies ca's key;
// nil otherwise.
func loadCross(dir string, ca *CA) *x509.Certificate {
	if _, err := os.Stat(filepath.Join(dir, CACrossFile)); err != nil {
		return nil
	}
	certs, err := readCerts(filepath.Join(dir, CACrossFile))
	if err != nil || !publicKeyMatches(certs[0], ca.Key) {
		return nil
	}
	return certs[0]
}
