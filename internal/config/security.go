package config

import (
	"fmt"
	"path/filepath"
)

// Security modes (docs/design.md, "Threat model").
const (
	// SecurityNone: plaintext connections, no identities; any process
	// that reaches a port owns the cluster. For benchmarks and closed
	// test networks.
	SecurityNone = "none"
	// SecuritySecure: every connection authenticated with mutual TLS 1.3
	// against the cluster CA and every record integrity-protected, but
	// not encrypted.
	SecuritySecure = "secure"
	// SecurityPrivate: mutual TLS 1.3 with encryption on every connection.
	SecurityPrivate = "private"
)

// SecurityMode returns the cluster's security mode, SecurityNone for a file
// that names none.
func (c *Cluster) SecurityMode() string {
	if c.Security == "" {
		return SecurityNone
	}
	return c.Security
}

// Secured reports whether the cluster's connections use TLS identities.
func (c *Cluster) Secured() bool { return c.SecurityMode() != SecurityNone }

// SecurityLayout names the CA and identity directories of a cluster whose
// security material lives under one directory, as weft up and weft cluster
// start create it: pki/ca, pki/meta-N, pki/store-N and pki/admin, relative
// to the cluster file.
func (c *Cluster) SecurityLayout(dir string) {
	c.CA = filepath.Join(dir, "ca")
	c.AdminIdentity = filepath.Join(dir, "admin")
	for i := range c.Meta {
		c.Meta[i].Identity = filepath.Join(dir, fmt.Sprintf("meta-%d", i))
	}
	for i := range c.Store {
		c.Store[i].Identity = filepath.Join(dir, fmt.Sprintf("store-%d", i))
	}
}

func (c *Cluster) validateSecurity(v *validator) {
	switch c.SecurityMode() {
	case SecurityNone:
		return
	case SecuritySecure, SecurityPrivate:
	default:
		v.addf("security", "%q is not one of %s, %s, %s", c.Security, SecurityNone, SecuritySecure, SecurityPrivate)
		return
	}
	if c.AdminIdentity == "" {
		v.addf("admin_identity", "is empty; security %q needs the identity directory the CLI uses", c.Security)
	}
	for i, m := range c.Meta {
		if m.Identity == "" {
			v.addf(fmt.Sprintf("meta[%d].identity", i), "is empty; security %q needs each server's identity directory", c.Security)
		}
	}
	for i, s := range c.Store {
		if s.Identity == "" {
			v.addf(fmt.Sprintf("store[%d].identity", i), "is empty; security %q needs each server's identity directory", c.Security)
		}
	}
}

// resolveSecurityPaths makes relative CA and identity paths relative to the
// cluster file's directory, base, as data directories are.
func (c *Cluster) resolveSecurityPaths(base string) {
	c.CA = resolveDir(base, c.CA)
	c.AdminIdentity = resolveDir(base, c.AdminIdentity)
	for i := range c.Meta {
		c.Meta[i].Identity = resolveDir(base, c.Meta[i].Identity)
	}
	for i := range c.Store {
		c.Store[i].Identity = resolveDir(base, c.Store[i].Identity)
	}
}
