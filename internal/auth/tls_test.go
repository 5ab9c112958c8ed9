package auth

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// testPKI is a CA with a meta server's identity, written under a test
// directory.
type testPKI struct {
	dir  string
	ca   *CA
	meta *Bundle
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := InitCA(filepath.Join(dir, "ca"), "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{dir: dir, ca: ca}
	p.meta = p.issue(t, "meta", Identity{Role: RoleMeta})
	return p
}

// issue writes an identity to the directory name and loads it back, as a
// server or client would.
func (p *testPKI) issue(t *testing.T, name string, id Identity) *Bundle {
	t.Helper()
	b, err := p.ca.Issue(id, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(p.dir, name)
	if err := b.Write(dir); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Identity != id {
		t.Fatalf("loaded %+v; issued %+v", loaded.Identity, id)
	}
	return loaded
}

func client1000() Identity {
	return Identity{Role: RoleClient, UIDs: Range{1000, 1000}, GIDs: Range{1000, 1000}}
}

// startServer serves, with b's identity and the cluster policy, a method
// that answers with the caller's identity, and a peer and a store-internal
// method.
func startServer(t *testing.T, b *Bundle) string {
	t.Helper()
	return startServerWith(t, b, nil)
}

// startServerWith is startServer with more options (secure mode's).
func startServerWith(t *testing.T, b *Bundle, more func(*rpc.ServerOptions)) string {
	t.Helper()
	mux := rpc.NewMux()
	whoami := func(ctx context.Context, _ *pb.Empty) (*pb.ReadlinkReply, error) {
		id, ok := FromContext(ctx)
		if !ok {
			return nil, errs.New(errs.Invalid, "whoami", "no identity")
		}
		return &pb.ReadlinkReply{Target: id.String()}, nil
	}
	rpc.Handle(mux, pb.MethodReadlink, whoami)
	rpc.Handle(mux, pb.MethodPeerApply, whoami)
	rpc.Handle(mux, pb.MethodListChunks, whoami)
	rpc.Handle(mux, pb.MethodDeleteChunks, whoami)
	var opts rpc.ServerOptions
	b.ServerOptions(&opts)
	if more != nil {
		more(&opts)
	}
	srv := rpc.NewServer(mux, opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dialAs(t *testing.T, addr string, b *Bundle) (*rpc.Conn, error) {
	t.Helper()
	return dialAsWith(t, addr, b, nil)
}

// dialAsWith is dialAs with more options (secure mode's).
func dialAsWith(t *testing.T, addr string, b *Bundle, more func(*rpc.DialOptions)) (*rpc.Conn, error) {
	t.Helper()
	var opts rpc.DialOptions
	if b != nil {
		b.DialOptions(&opts)
	}
	if more != nil {
		more(&opts)
	}
	c, err := rpc.Dial(testCtx(t), addr, opts)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func whoami(t *testing.T, c *rpc.Conn, method uint16) (string, error) {
	var r pb.ReadlinkReply
	err := c.Call(testCtx(t), method, &pb.Empty{}, &r)
	return r.GetTarget(), err
}

func TestMutualTLSCarriesIdentity(t *testing.T) {
	p := newTestPKI(t)
	addr := startServer(t, p.meta)
	client := p.issue(t, "client", client1000())
	c, err := dialAs(t, addr, client)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := whoami(t, c, pb.MethodReadlink); err != nil || got != client1000().String() {
		t.Fatalf("whoami = %q, %v; want %q", got, err, client1000())
	}
}

func TestKeysArePrivate(t *testing.T) {
	p := newTestPKI(t)
	for _, f := range []string{filepath.Join(p.dir, "ca", CAKeyFile), filepath.Join(p.dir, "meta", KeyFile)} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v; want 0600", f, fi.Mode().Perm())
		}
	}
	if _, err := InitCA(filepath.Join(p.dir, "ca"), "test", time.Now()); !errs.Is(err, errs.Exist) {
		t.Errorf("InitCA over an existing CA: %v; want Exist", err)
	}
}

func TestForeignCARefused(t *testing.T) {
	p := newTestPKI(t)
	addr := startServer(t, p.meta)
	foreign := newTestPKI(t)
	// A client of another cluster, even an administrator, is refused at
	// the handshake.
	admin := foreign.issue(t, "admin", Identity{Role: RoleAdmin})
	c, err := dialAs(t, addr, admin)
	if err == nil {
		// TLS 1.3 clients finish before the server checks their
		// certificate; the refusal arrives with the first read.
		_, err = whoami(t, c, pb.MethodReadlink)
	}
	if err == nil {
		t.Fatal("a certificate of a foreign CA was accepted")
	}
	// Nor does a client of this cluster trust a foreign server.
	faddr := startServer(t, foreign.meta)
	if _, err := dialAs(t, faddr, p.issue(t, "client", client1000())); !errs.Is(err, errs.Unavailable) {
		t.Fatalf("dial to a foreign server: %v; want Unavailable", err)
	}
}

func TestPlaintextRefused(t *testing.T) {
	p := newTestPKI(t)
	addr := startServer(t, p.meta)
	c, err := dialAs(t, addr, nil)
	if err == nil {
		_, err = whoami(t, c, pb.MethodReadlink)
	}
	if err == nil {
		t.Fatal("a plaintext connection to a TLS server was served")
	}
}

func TestClientCertificateCannotPoseAsServer(t *testing.T) {
	p := newTestPKI(t)
	addr := startServer(t, p.issue(t, "client", client1000()))
	if _, err := dialAs(t, addr, p.issue(t, "admin", Identity{Role: RoleAdmin})); !errs.Is(err, errs.Unavailable) {
		t.Fatalf("dial to a server holding a client certificate: %v; want Unavailable", err)
	}
}

func TestRolesAndMethods(t *testing.T) {
	p := newTestPKI(t)
	addr := startServer(t, p.meta)
	as := map[string]*Bundle{
		"client": p.issue(t, "client", client1000()),
		"root":   p.issue(t, "root", Identity{Role: RoleClient, Root: true}),
		"admin":  p.issue(t, "admin", Identity{Role: RoleAdmin}),
		"store":  p.issue(t, "store", Identity{Role: RoleStore}),
		"edge":   p.issue(t, "edge", Identity{Role: RoleEdge}),
		"meta":   p.meta,
	}
	for _, c := range []struct {
		who    string
		method uint16
		ok     bool
	}{
		{"client", pb.MethodReadlink, true},
		{"client", pb.MethodPeerApply, false},
		{"client", pb.MethodListChunks, false},
		{"client", pb.MethodDeleteChunks, true}, // then the store checks the capability
		{"root", pb.MethodPeerApply, false},
		{"root", pb.MethodListChunks, false},
		{"admin", pb.MethodPeerApply, true},
		{"admin", pb.MethodListChunks, true},
		{"store", pb.MethodPeerApply, false},
		{"store", pb.MethodListChunks, true},
		{"edge", pb.MethodReadlink, true},
		{"edge", pb.MethodPeerApply, false},
		{"edge", pb.MethodListChunks, false},
		{"meta", pb.MethodPeerApply, true},
		{"meta", pb.MethodDeleteChunks, true},
	} {
		conn, err := dialAs(t, addr, as[c.who])
		if err != nil {
			t.Fatal(err)
		}
		_, err = whoami(t, conn, c.method)
		if c.ok && err != nil {
			t.Errorf("%s calling %s: %v", c.who, pb.MethodName(c.method), err)
		}
		if !c.ok && !errs.Is(err, errs.Permission) {
			t.Errorf("%s calling %s: %v; want Permission", c.who, pb.MethodName(c.method), err)
		}
	}
}

func TestLocalCallsCarryTheCallersIdentity(t *testing.T) {
	p := newTestPKI(t)
	mux := rpc.NewMux()
	rpc.Handle(mux, pb.MethodReadlink, func(ctx context.Context, _ *pb.Empty) (*pb.ReadlinkReply, error) {
		id, _ := FromContext(ctx)
		return &pb.ReadlinkReply{Target: id.String()}, nil
	})
	rpc.Handle(mux, pb.MethodPeerApply, func(ctx context.Context, _ *pb.Empty) (*pb.Empty, error) { return &pb.Empty{}, nil })
	var sopts rpc.ServerOptions
	p.meta.ServerOptions(&sopts)
	srv := rpc.NewServer(mux, sopts)
	defer srv.Close()
	opts := rpc.DialOptions{Local: srv}
	p.issue(t, "client", client1000()).DialOptions(&opts)
	peer := rpc.NewPeer("in-process", opts)
	defer peer.Close()
	var r pb.ReadlinkReply
	if err := peer.Call(testCtx(t), pb.MethodReadlink, &pb.Empty{}, &r); err != nil || r.Target != client1000().String() {
		t.Fatalf("local whoami = %q, %v", r.Target, err)
	}
	if err := peer.Call(testCtx(t), pb.MethodPeerApply, &pb.Empty{}, &pb.Empty{}); !errs.Is(err, errs.Permission) {
		t.Fatalf("local client calling peer_apply: %v; want Permission", err)
	}
}

// TestRotationKeepsOldAndNewTalking checks the transition of a rotation:
// a server re-issued under the new CA serves a client that still holds an
// identity (and trust) of the old CA, and a client issued under the new CA
// is served by a server not yet re-issued.
func TestRotationKeepsOldAndNewTalking(t *testing.T) {
	p := newTestPKI(t)
	oldClient := p.issue(t, "old-client", client1000())
	oldMeta := p.meta
	ca, err := RotateCA(filepath.Join(p.dir, "ca"), "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if ca.Cross == nil || len(ca.Trusted) != 2 {
		t.Fatalf("rotated CA: cross %v, %d trusted", ca.Cross != nil, len(ca.Trusted))
	}
	loaded, err := LoadCA(filepath.Join(p.dir, "ca"))
	if err != nil || loaded.Cross == nil || !loaded.Cert.Equal(ca.Cert) {
		t.Fatalf("LoadCA after rotate: %v", err)
	}
	p.ca = loaded
	newMeta := p.issue(t, "new-meta", Identity{Role: RoleMeta})
	newClient := p.issue(t, "new-client", client1000())

	for _, c := range []struct {
		name           string
		server, client *Bundle
	}{
		{"old client, new server", newMeta, oldClient},
		{"new client, old server", oldMeta, newClient},
		{"new client, new server", newMeta, newClient},
	} {
		addr := startServer(t, c.server)
		conn, err := dialAs(t, addr, c.client)
		if err == nil {
			_, err = whoami(t, conn, pb.MethodReadlink)
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
