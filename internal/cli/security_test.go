package cli

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestSecureByDefault runs the attacks of issue 13 against a cluster of
// real server processes started by weft cluster start with its default
// security: a client certificate for uid 1000 claiming root, another
// user's certificate, a plaintext connection, a foreign CA's certificate,
// and a client calling meta-to-meta and store-internal methods. Before
// security, every one of them succeeded.
func TestSecureByDefault(t *testing.T) {
	dir := t.TempDir()
	startCluster(t, dir)
	file := filepath.Join(dir, cluster.ClusterFileName)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SecurityMode() != config.SecuritySecure {
		t.Fatalf("a new cluster's security is %q, want secure", cfg.SecurityMode())
	}

	// Root's files, made with the cluster's admin identity.
	admin := newTestClient(t, cfg, "", core.Root)
	writeFile(t, ctx, admin, "/secret", 0o600, "root only")
	if err := admin.Mkdir(ctx, "/private", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := admin.Mkdir(ctx, "/shared", 0o777); err != nil {
		t.Fatal(err)
	}

	issue := func(name string, args ...string) string {
		out := filepath.Join(dir, name)
		if _, stderr, err := run(ctx, append([]string{"--cluster", file, "ca", "issue", "--out", out}, args...)...); err != nil {
			t.Fatalf("ca issue %v: %v\n%s", args, err, stderr)
		}
		return out
	}
	u1000 := issue("u1000", "--role", "client", "--uid", "1000")
	u1001 := issue("u1001", "--role", "client", "--uid", "1001")

	// A certificate for uid 1000 claiming root gets nobody's rights.
	forger := newTestClient(t, cfg, u1000, core.Root)
	if _, err := forger.Open(ctx, "/secret", 0, 0); !errs.Is(err, errs.Permission) {
		t.Errorf("uid 1000 claiming root opened root's 0600 file: %v", err)
	}
	if _, err := forger.ReadDir(ctx, "/private"); !errs.Is(err, errs.Permission) {
		t.Errorf("uid 1000 claiming root listed root's 0700 directory: %v", err)
	}
	if _, err := forger.Create(ctx, "/planted", 0o644); !errs.Is(err, errs.Permission) {
		t.Errorf("uid 1000 claiming root created in root's 0755 directory: %v", err)
	}
	// The CLI with --identity, as a root process: the same.
	if _, _, err := run(ctx, "--cluster", file, "--identity", u1000, "get", "/secret", filepath.Join(dir, "stolen")); err == nil {
		t.Error("weft --identity (uid 1000) get of root's 0600 file succeeded")
	}

	// Two users: neither reads the other's 0600 file, whatever it claims.
	alice := newTestClient(t, cfg, u1000, core.Creds{UID: 1000, GID: 1000})
	writeFile(t, ctx, alice, "/shared/a", 0o600, "alice's")
	bob := newTestClient(t, cfg, u1001, core.Creds{UID: 1000, GID: 1000})
	if _, err := bob.Open(ctx, "/shared/a", 0, 0); !errs.Is(err, errs.Permission) {
		t.Errorf("uid 1001 claiming 1000 opened 1000's 0600 file: %v", err)
	}

	// Connections without the cluster's certificates are refused.
	if err := dialAndCall(ctx, cfg.Meta[0].Addr, rpc.DialOptions{}, weftpb.MethodStatFS); !errs.Is(err, errs.Unavailable) {
		t.Errorf("a plaintext connection to a secure meta server: %v; want Unavailable (refused)", err)
	}
	foreignCA, err := auth.InitCA(filepath.Join(t.TempDir(), "ca"), "other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := foreignCA.Issue(auth.Identity{Role: auth.RoleAdmin}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var fopts rpc.DialOptions
	foreign.DialOptions(&fopts)
	if err := dialAndCall(ctx, cfg.Meta[0].Addr, fopts, weftpb.MethodStatFS); !errs.Is(err, errs.Unavailable) {
		t.Errorf("a foreign CA's admin certificate: %v; want Unavailable (refused)", err)
	}

	// A client certificate cannot call peer or store-internal methods.
	client1000, err := cluster.DialOptions(cfg, u1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := dialAndCall(ctx, cfg.Meta[0].Addr, client1000, weftpb.MethodPeerApply); !errs.Is(err, errs.Permission) {
		t.Errorf("a client calling peer_apply: %v; want Permission", err)
	}
	if err := dialAndCall(ctx, cfg.Store[0].Addr, client1000, weftpb.MethodListChunks); !errs.Is(err, errs.Permission) {
		t.Errorf("a client calling list_chunks: %v; want Permission", err)
	}
	// delete_chunks is open to clients (a writer drops the chunks of a file
	// it removed while open), under the file's write capability.
	if err := dialAndCall(ctx, cfg.Store[0].Addr, client1000, weftpb.MethodDeleteChunks); !errs.Is(err, errs.CapabilityRefused) {
		t.Errorf("a client calling delete_chunks without a capability: %v; want CapabilityRefused", err)
	}
	// fsck, which reads raw records, needs the admin's identity.
	if _, _, err := run(ctx, "--cluster", file, "--identity", u1000, "fsck"); !errs.Is(err, errs.Permission) {
		t.Errorf("fsck with a client identity: %v; want Permission", err)
	}
	if out, stderr, err := run(ctx, "--cluster", file, "fsck"); err != nil {
		t.Errorf("fsck with the admin identity: %v\n%s%s", err, out, stderr)
	}
}

// newTestClient connects to cfg with the identity in dir (the admin's if
// empty) acting with creds.
func newTestClient(t *testing.T, cfg *config.Cluster, dir string, creds core.Creds) *client.Client {
	t.Helper()
	cc := cluster.ClientConfig(cfg, creds, nil)
	if dir != "" {
		cc.Identity = dir
	}
	c, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func writeFile(t *testing.T, ctx context.Context, c *client.Client, path string, perm uint32, content string) {
	t.Helper()
	f, err := c.Create(ctx, path, perm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// dialAndCall makes one call with an empty request on a new connection.
func dialAndCall(ctx context.Context, addr string, opts rpc.DialOptions, method uint16) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, addr, opts)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(ctx, method, &weftpb.Empty{}, &weftpb.Empty{})
}

// TestSecurityModes: weft cluster start --security private and none give
// working clusters; a private cluster refuses a client speaking the secure
// mode's record layer, and a none cluster needs no identity at all.
func TestSecurityModes(t *testing.T) {
	for _, mode := range []string{config.SecurityPrivate, config.SecurityNone} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			startCluster(t, dir, "--security", mode)
			file := filepath.Join(dir, cluster.ClusterFileName)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cfg, err := config.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.SecurityMode() != mode {
				t.Fatalf("security %q; want %q", cfg.SecurityMode(), mode)
			}
			local := filepath.Join(dir, "in")
			writeLocal(t, local, "mode "+mode)
			if _, stderr, err := run(ctx, "--cluster", file, "put", local, "/f"); err != nil {
				t.Fatalf("put: %v\n%s", err, stderr)
			}
			if out, _, err := run(ctx, "--cluster", file, "get", "/f", "-"); err != nil || out != "mode "+mode {
				t.Fatalf("get: %q, %v", out, err)
			}
			dial, err := cluster.DialOptions(cfg, "")
			if err != nil {
				t.Fatal(err)
			}
			if mode == config.SecurityNone {
				if dial.TLS != nil {
					t.Fatal("none mode dials with TLS")
				}
				return
			}
			dial.IntegrityOnly = true
			if err := dialAndCall(ctx, cfg.Meta[0].Addr, dial, weftpb.MethodStatFS); !errs.Is(err, errs.Unavailable) {
				t.Errorf("a secure-mode client to a private server: %v; want Unavailable", err)
			}
		})
	}
}

func writeLocal(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRecordsOnLoopback: a secure cluster's loopback connections go bare
// after the handshake, to its meta and store servers alike; one started
// with --records-on-loopback keeps the record layer, for its own clients
// and for a client that offers the bare path.
func TestRecordsOnLoopback(t *testing.T) {
	for _, c := range []struct {
		name    string
		args    []string
		records bool
		want    string
	}{
		{"default", nil, false, rpc.TransportLoopback},
		{"records", []string{"--records-on-loopback"}, true, rpc.TransportRecords},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			startCluster(t, dir, c.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cfg, err := config.Load(filepath.Join(dir, cluster.ClusterFileName))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.SecurityMode() != config.SecuritySecure || cfg.RecordsOnLoopback != c.records {
				t.Fatalf("cluster file: security %q, records_on_loopback %v", cfg.SecurityMode(), cfg.RecordsOnLoopback)
			}
			dial, err := cluster.DialOptions(cfg, "")
			if err != nil {
				t.Fatal(err)
			}
			offer := dial
			offer.RecordsOnLoopback = false // what a client that offers the bare path gets
			for addr, method := range map[string]uint16{cfg.Meta[0].Addr: weftpb.MethodStatFS, cfg.Store[0].Addr: weftpb.MethodStoreStatFS} {
				for _, opts := range []rpc.DialOptions{dial, offer} {
					conn, err := rpc.Dial(ctx, addr, opts)
					if err != nil {
						t.Fatal(err)
					}
					got := conn.Transport()
					err = conn.Call(ctx, method, &weftpb.Empty{}, &weftpb.Empty{})
					conn.Close()
					if err != nil || got != c.want {
						t.Fatalf("%s (client records %v): transport %q, call %v; want %q", addr, opts.RecordsOnLoopback, got, err, c.want)
					}
				}
			}
		})
	}
}
