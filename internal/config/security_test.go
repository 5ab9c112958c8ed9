package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftfs/weft/internal/errs"
)

const securedFile = `
security = "secure"
ca = "pki/ca"
admin_identity = "pki/admin"

[[meta]]
addr = "127.0.0.1:7000"
identity = "pki/meta-0"

[[store]]
addr = "127.0.0.1:7100"
identity = "/abs/store-0"
`

func TestSecurityFields(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cluster.toml")
	if err := os.WriteFile(path, []byte(securedFile), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.SecurityMode() != SecuritySecure || !c.Secured() {
		t.Errorf("mode %q", c.SecurityMode())
	}
	if want := filepath.Join(dir, "pki/meta-0"); c.Meta[0].Identity != want {
		t.Errorf("meta identity %q; want %q (relative to the file)", c.Meta[0].Identity, want)
	}
	if c.Store[0].Identity != "/abs/store-0" || c.CA != filepath.Join(dir, "pki/ca") || c.AdminIdentity != filepath.Join(dir, "pki/admin") {
		t.Errorf("paths: %q %q %q", c.Store[0].Identity, c.CA, c.AdminIdentity)
	}
}

func TestSecurityDefaultsToNoneForOldFiles(t *testing.T) {
	c, err := Parse([]byte("[[meta]]\naddr = \"127.0.0.1:7000\"\n[[store]]\naddr = \"127.0.0.1:7100\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.SecurityMode() != SecurityNone || c.Secured() {
		t.Errorf("a file naming no security: %q", c.SecurityMode())
	}
}

func TestSecurityValidation(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{strings.Replace(securedFile, `"secure"`, `"tight"`, 1), `security: "tight" is not one of none, secure, private`},
		{strings.Replace(securedFile, `identity = "pki/meta-0"`, "", 1), "meta[0].identity: is empty"},
		{strings.Replace(securedFile, `admin_identity = "pki/admin"`, "", 1), "admin_identity: is empty"},
	} {
		_, err := Parse([]byte(c.file))
		if !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v; want Invalid with %q", err, c.want)
		}
	}
	// security = "none" needs no identities.
	if _, err := Parse([]byte(strings.Replace(strings.Replace(securedFile, `"secure"`, `"none"`, 1), `identity = "pki/meta-0"`, "", 1))); err != nil {
		t.Errorf("none without identities: %v", err)
	}
}
