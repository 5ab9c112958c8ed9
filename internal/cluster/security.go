package cluster

import (
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
)

// PKIDirName is the directory, beside a cluster file that weft up or weft
// cluster start created, holding the cluster CA and every identity.
const PKIDirName = "pki"

// security is one process's side of its cluster's security mode: the
// identity it serves and dials with; nil bundle for security = "none".
type security struct {
	mode    string
	records bool // records_on_loopback
	bundle  *auth.Bundle
}

// loadSecurity loads the identity in dir for cfg's security mode; for
// "none" it loads nothing.
func loadSecurity(cfg *config.Cluster, dir string) (*security, error) {
	s := &security{mode: cfg.SecurityMode(), records: cfg.RecordsOnLoopback}
	if !cfg.Secured() {
		return s, nil
	}
	if dir == "" {
		return nil, errs.New(errs.Invalid, "load identity", "security is %q and no identity directory is given", s.mode)
	}
	b, err := auth.LoadIdentity(dir)
	if err != nil {
		return nil, err
	}
	s.bundle = b
	return s, nil
}

// serverOptions sets a server's TLS and policy in opts.
func (s *security) serverOptions(opts *rpc.ServerOptions) {
	if s.bundle != nil {
		s.bundle.ServerOptions(opts)
		opts.IntegrityOnly = s.mode == config.SecuritySecure
		opts.RecordsOnLoopback = s.records
	}
}

// dial is the template of the connections the process dials.
func (s *security) dial() rpc.DialOptions {
	var opts rpc.DialOptions
	if s.bundle != nil {
		s.bundle.DialOptions(&opts)
		opts.IntegrityOnly = s.mode == config.SecuritySecure
		opts.RecordsOnLoopback = s.records
	}
	return opts
}

// DialOptions returns the template of a client's connections to cfg's
// servers: the identity in dir, or the cluster's admin identity when dir is
// empty; zero options for security = "none".
func DialOptions(cfg *config.Cluster, dir string) (rpc.DialOptions, error) {
	if dir == "" {
		dir = cfg.AdminIdentity
	}
	s, err := loadSecurity(cfg, dir)
	if err != nil {
		return rpc.DialOptions{}, err
	}
	return s.dial(), nil
}

// InitSecurity gives a new cluster its CA and every identity under
// base/pki, and names them in cfg (absolute paths): the servers' (valid
// for 127.0.0.1, localhost and their addresses' hosts) and the
// administrator's. cfg's mode is set to secure unless it names one.
func InitSecurity(cfg *config.Cluster, base string) error {
	if cfg.Security == "" {
		cfg.Security = config.SecuritySecure
	}
	if !cfg.Secured() {
		return nil
	}
	cfg.SecurityLayout(filepath.Join(base, PKIDirName))
	ca, err := auth.InitCA(cfg.CA, cfg.Name, time.Now())
	if errs.Is(err, errs.Exist) {
		// A first start that failed after creating the CA: keep it.
		ca, err = auth.LoadCA(cfg.CA)
	}
	if err != nil {
		return err
	}
	return IssueIdentities(cfg, ca)
}

// IssueIdentities (re)issues, with ca, the identities cfg names: every
// server's and the administrator's.
func IssueIdentities(cfg *config.Cluster, ca *auth.CA) error {
	issue := func(dir string, id auth.Identity, addr string) error {
		if dir == "" {
			return nil
		}
		var hosts []string
		if h, _, err := net.SplitHostPort(addr); err == nil && h != "" {
			hosts = append(hosts, h)
		}
		b, err := ca.Issue(id, hosts, time.Now())
		if err != nil {
			return err
		}
		return b.Write(dir)
	}
	for i, m := range cfg.Meta {
		if err := issue(m.Identity, auth.Identity{Role: auth.RoleMeta}, m.Addr); err != nil {
			return errs.WithPath(err, "issue identities", fmt.Sprintf("meta[%d]", i))
		}
	}
	for i, s := range cfg.Store {
		if err := issue(s.Identity, auth.Identity{Role: auth.RoleStore}, s.Addr); err != nil {
			return errs.WithPath(err, "issue identities", fmt.Sprintf("store[%d]", i))
		}
	}
	return issue(cfg.AdminIdentity, auth.Identity{Role: auth.RoleAdmin}, "")
}

// relativeSecurityPaths rewrites cfg's CA and identity paths under base as
// paths relative to it, for the cluster file written there.
func relativeSecurityPaths(cfg *config.Cluster, base string) {
	rel := func(p *string) {
		if r, err := filepath.Rel(base, *p); err == nil && *p != "" && filepath.IsAbs(*p) {
			*p = r
		}
	}
	rel(&cfg.CA)
	rel(&cfg.AdminIdentity)
	for i := range cfg.Meta {
		rel(&cfg.Meta[i].Identity)
	}
	for i := range cfg.Store {
		rel(&cfg.Store[i].Identity)
	}
}
