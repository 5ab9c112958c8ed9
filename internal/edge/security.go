package edge

import (
	"path/filepath"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
)

// secure sets up the edge's side of the upstream's security mode: on a
// secured cluster it loads the edge's identity (role edge), sets it in
// cfg.Dial for the upstream connections, and returns the options of the
// listeners, which serve the site's clients as a meta server would (mutual
// TLS against the same CA, the same record layer, the same role policy;
// credentials are bound per request, creds.go).
func secure(cfg *Config) (rpc.ServerOptions, error) {
	const op = "edge start"
	opts := rpc.ServerOptions{Logger: cfg.Log}
	up := cfg.Upstream
	if !up.Secured() {
		return opts, nil
	}
	if cfg.IdentityDir == "" {
		return opts, errs.New(errs.Invalid, op, "the upstream cluster's security is %q: the edge needs an identity of its own "+
			"(weft ca issue --role edge --out DIR, then weft edge --identity DIR)", up.SecurityMode())
	}
	dir, err := filepath.Abs(cfg.IdentityDir)
	if err != nil {
		return opts, errs.Wrap(errs.Invalid, op, cfg.IdentityDir, err)
	}
	cfg.IdentityDir = dir
	b, err := auth.LoadIdentity(dir)
	if err != nil {
		return opts, err
	}
	if b.Identity.Role != auth.RoleEdge {
		return opts, errs.New(errs.Invalid, op, "%s holds a %s identity; the edge needs one issued with --role edge", dir, b.Identity.Role)
	}
	integrity := up.SecurityMode() == config.SecuritySecure
	b.ServerOptions(&opts)
	opts.IntegrityOnly, opts.RecordsOnLoopback = integrity, up.RecordsOnLoopback
	b.DialOptions(&cfg.Dial)
	cfg.Dial.IntegrityOnly, cfg.Dial.RecordsOnLoopback = integrity, up.RecordsOnLoopback
	return opts, nil
}
