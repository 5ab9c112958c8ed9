package edge_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/weftbin"
)

// startSecureUpstream starts a secure cluster (one meta, one store) and
// returns it with its CA.
func startSecureUpstream(t *testing.T) (*cluster.Procs, *auth.CA) {
	t.Helper()
	p, err := cluster.StartProcs(context.Background(), cluster.ProcsOptions{
		Binary: weftbin.Path(t), Dir: t.TempDir(), Meta: 1, Store: 1, Security: config.SecuritySecure,
	})
	if err != nil {
		t.Fatalf("StartProcs: %v", err)
	}
	t.Cleanup(func() {
		if err := p.KillAll(); err != nil {
			t.Errorf("KillAll: %v", err)
		}
	})
	ca, err := auth.LoadCA(p.Config().CA)
	if err != nil {
		t.Fatal(err)
	}
	return p, ca
}

// issueIdentity writes an identity of ca under a new directory.
func issueIdentity(t *testing.T, ca *auth.CA, id auth.Identity) string {
	t.Helper()
	b, err := ca.Issue(id, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "identity")
	if err := b.Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// clientAs is a client of cfg connecting with the identity in dir and
// claiming creds.
func clientAs(t *testing.T, cfg *config.Cluster, dir string, creds core.Creds) *client.Client {
	t.Helper()
	cc := cluster.ClientConfig(cfg, creds, nil)
	cc.Identity = dir
	c, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func writeBytes(ctx context.Context, c *client.Client, path string, mode uint32, data []byte) error {
	f, err := c.Create(ctx, path, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TestSecuredEdge: an edge in front of a secure cluster, with an edge
// identity of the cluster's CA. A client with the cluster's admin identity
// works through it, data included (the capabilities the meta server hands
// out pass through unchanged and the store accepts them); a client whose
// certificate is for uid 65534 and that claims root reads what everyone
// may and not root's 0600 files, inline or in chunks; clients of another
// CA and plaintext clients are refused by the edge.
func TestSecuredEdge(t *testing.T) {
	p, ca := startSecureUpstream(t)
	e := startEdge(t, p.ClusterFile(), "--identity", issueIdentity(t, ca, auth.Identity{Role: auth.RoleEdge}))
	ctx := testCtx(t, 90*time.Second)
	if e.cfg.SecurityMode() != config.SecuritySecure || e.cfg.Meta[0].Identity == "" {
		t.Fatalf("the edge's cluster file: security %q, meta identity %q", e.cfg.SecurityMode(), e.cfg.Meta[0].Identity)
	}

	admin := newClient(t, e.cfg) // the cluster's admin identity, as root
	big := bytes.Repeat([]byte("chunked "), 64<<10)
	for _, f := range []struct {
		path string
		mode uint32
		data []byte
	}{
		{"/public", 0o644, []byte("for everyone")},
		{"/secret", 0o600, []byte("root only")},
		{"/public-big", 0o644, big},
		{"/secret-big", 0o600, big},
	} {
		if err := writeBytes(ctx, admin, f.path, f.mode, f.data); err != nil {
			t.Fatalf("write %s through the edge: %v", f.path, err)
		}
		if got, err := readAll(ctx, admin, f.path); err != nil || got != string(f.data) {
			t.Fatalf("read %s back through the edge: %d bytes, %v", f.path, len(got), err)
		}
	}
	direct := newClient(t, p.Config())
	if got, err := readAll(ctx, direct, "/secret-big"); err != nil || got != string(big) {
		t.Fatalf("direct read of what the edge's client wrote: %d bytes, %v", len(got), err)
	}

	nobody := clientAs(t, e.cfg, issueIdentity(t, ca, auth.Identity{Role: auth.RoleClient, UIDs: auth.Range{Min: 65534, Max: 65534}, GIDs: auth.Range{Min: 65534, Max: 65534}}), core.Root)
	for _, path := range []string{"/public", "/public-big"} {
		if _, err := readAll(ctx, nobody, path); err != nil {
			t.Fatalf("uid 65534 reading %s (mode 0644): %v", path, err)
		}
	}
	for _, path := range []string{"/secret", "/secret-big"} {
		if got, err := readAll(ctx, nobody, path); !errs.Is(err, errs.Permission) {
			t.Fatalf("uid 65534 claiming root read %s (mode 0600, root's): %q, %v; want Permission", path, got, err)
		}
	}
	if err := writeBytes(ctx, nobody, "/planted", 0o644, []byte("x")); !errs.Is(err, errs.Permission) {
		t.Fatalf("uid 65534 claiming root created a file in root's /: %v; want Permission", err)
	}
	if err := nobody.Chmod(ctx, "/secret", 0o666); !errs.Is(err, errs.NotPermitted) {
		t.Fatalf("uid 65534 claiming root chmod'ed root's file: %v; want NotPermitted", err)
	}

	// Another cluster's administrator, and a client without any
	// certificate, are refused by the edge.
	foreign, err := auth.InitCA(filepath.Join(t.TempDir(), "ca"), "other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stranger := clientAs(t, e.cfg, issueIdentity(t, foreign, auth.Identity{Role: auth.RoleAdmin}), core.Root)
	if _, err := stranger.Stat(ctx, "/public"); err == nil {
		t.Fatal("the edge served a client of another CA")
	}
	plain := e.cfg.Clone()
	plain.Security = config.SecurityNone
	if _, err := newClient(t, plain).Stat(ctx, "/public"); err == nil {
		t.Fatal("the edge served a plaintext client")
	}
}

// TestEdgeNeedsAnEdgeIdentity: on a secured cluster, weft edge without an
// identity, or with one of another role, refuses to start and says why.
func TestEdgeNeedsAnEdgeIdentity(t *testing.T) {
	p, ca := startSecureUpstream(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no identity", nil, "--role edge"},
		{"a client's identity", []string{"--identity", issueIdentity(t, ca, auth.Identity{Role: auth.RoleClient, Root: true})}, "holds a client identity"},
	} {
		cmd := exec.Command(weftbin.Path(t), append([]string{"edge", "--upstream", p.ClusterFile(), "--out", filepath.Join(t.TempDir(), "edge.toml")}, c.args...)...)
		cmd.Env = append(cmd.Environ(), "WEFT_IDENTITY=")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%s: weft edge: %v, %s; want a failure naming %q", c.name, err, out, c.want)
		}
	}
}
