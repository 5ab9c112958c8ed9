package meta

import (
	"syscall"
	"testing"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// peerAs returns a connection to e's handlers that carries id, as a TLS
// connection with id's certificate would, under the cluster's method
// policy.
func peerAs(t *testing.T, e *env, id auth.Identity) *rpc.Peer {
	t.Helper()
	mux := rpc.NewMux()
	e.Register(mux)
	srv := rpc.NewServer(mux, rpc.ServerOptions{Authorize: auth.Authorize})
	t.Cleanup(func() { srv.Close() })
	p := rpc.NewPeer("in-process", rpc.DialOptions{Local: srv, Identity: id})
	t.Cleanup(func() { p.Close() })
	return p
}

func certFor(uid uint32) auth.Identity {
	return auth.Identity{Role: auth.RoleClient, UIDs: auth.Range{Min: uid, Max: uid}, GIDs: auth.Range{Min: uid, Max: uid}}
}

func credsAs(uid uint32) *weftpb.Creds { return &weftpb.Creds{Uid: uid, Gid: uid} }

// TestCredsBoundToIdentity: a client certificate for uid 1000 that claims
// uid 0 gets nobody's rights: it cannot read root's 0600 file, list root's
// 0700 directory or create in root's 0755 root directory. Before identities
// bound credentials, the claim was trusted and all three succeeded.
func TestCredsBoundToIdentity(t *testing.T) {
	e := newEnv(t)
	admin := peerAs(t, e, auth.Identity{Role: auth.RoleAdmin})
	var secret weftpb.CreateReply
	if err := admin.Call(ctx, weftpb.MethodCreate, &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: "secret", Mode: syscall.S_IFREG | 0o600}, &secret); err != nil {
		t.Fatal(err)
	}
	var dir weftpb.MkdirReply
	if err := admin.Call(ctx, weftpb.MethodMkdir, &weftpb.MkdirRequest{Creds: rootCreds(), Parent: root, Name: "private", Mode: 0o700}, &dir); err != nil {
		t.Fatal(err)
	}

	forger := peerAs(t, e, certFor(1000))
	err := forger.Call(ctx, weftpb.MethodOpen, &weftpb.OpenRequest{Creds: rootCreds(), Node: &weftpb.NodeRef{Parent: root, Name: "secret", Ino: secret.Attr.Ino}, Flags: syscall.O_RDONLY}, &weftpb.OpenReply{})
	wantKind(t, err, errs.Permission)
	err = forger.Call(ctx, weftpb.MethodReadDir, &weftpb.ReadDirRequest{Creds: rootCreds(), Dir: dir.Attr.Ino}, &weftpb.ReadDirReply{})
	wantKind(t, err, errs.Permission)
	err = forger.Call(ctx, weftpb.MethodCreate, &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: "planted", Mode: syscall.S_IFREG | 0o644}, &weftpb.CreateReply{})
	wantKind(t, err, errs.Permission)

	// A root client and the admin may act as root.
	rootClient := peerAs(t, e, auth.Identity{Role: auth.RoleClient, Root: true})
	if err := rootClient.Call(ctx, weftpb.MethodOpen, &weftpb.OpenRequest{Creds: rootCreds(), Node: &weftpb.NodeRef{Parent: root, Name: "secret", Ino: secret.Attr.Ino}, Flags: syscall.O_RDONLY}, &weftpb.OpenReply{}); err != nil {
		t.Fatalf("root client opening root's file: %v", err)
	}
}

// TestCredsTwoUsers: files created under one user's identity carry that
// user, and another user's identity claiming the first's uid is squashed
// and refused.
func TestCredsTwoUsers(t *testing.T) {
	e := newEnv(t)
	admin := peerAs(t, e, auth.Identity{Role: auth.RoleAdmin})
	var shared weftpb.MkdirReply
	if err := admin.Call(ctx, weftpb.MethodMkdir, &weftpb.MkdirRequest{Creds: rootCreds(), Parent: root, Name: "shared", Mode: 0o777}, &shared); err != nil {
		t.Fatal(err)
	}
	alice, bob := peerAs(t, e, certFor(1000)), peerAs(t, e, certFor(1001))
	var f weftpb.CreateReply
	if err := alice.Call(ctx, weftpb.MethodCreate, &weftpb.CreateRequest{Creds: credsAs(1000), Parent: shared.Attr.Ino, Name: "a", Mode: syscall.S_IFREG | 0o600}, &f); err != nil {
		t.Fatal(err)
	}
	if f.Attr.Uid != 1000 {
		t.Fatalf("alice's file is owned by %d", f.Attr.Uid)
	}
	for _, claim := range []uint32{1001, 1000, 0} {
		err := bob.Call(ctx, weftpb.MethodOpen, &weftpb.OpenRequest{Creds: credsAs(claim), Node: &weftpb.NodeRef{Parent: shared.Attr.Ino, Name: "a", Ino: f.Attr.Ino}, Flags: syscall.O_RDONLY}, &weftpb.OpenReply{})
		wantKind(t, err, errs.Permission)
	}
	// Bob's files are his, whatever uid he claims.
	var g weftpb.CreateReply
	if err := bob.Call(ctx, weftpb.MethodCreate, &weftpb.CreateRequest{Creds: credsAs(1001), Parent: shared.Attr.Ino, Name: "b", Mode: syscall.S_IFREG | 0o600}, &g); err != nil || g.Attr.Uid != 1001 {
		t.Fatalf("bob's create: %v, owner %d", err, g.GetAttr().GetUid())
	}
	var h weftpb.CreateReply
	if err := bob.Call(ctx, weftpb.MethodCreate, &weftpb.CreateRequest{Creds: credsAs(1000), Parent: shared.Attr.Ino, Name: "c", Mode: syscall.S_IFREG | 0o644}, &h); err != nil || h.Attr.Uid != Nobody {
		t.Fatalf("bob's create claiming alice: %v, owner %d; want %d", err, h.GetAttr().GetUid(), Nobody)
	}
}

// TestCredsWithoutIdentityUnchanged: security = "none" trusts the claim.
func TestCredsWithoutIdentityUnchanged(t *testing.T) {
	e := newEnv(t)
	mux := rpc.NewMux()
	e.Register(mux)
	srv := rpc.NewServer(mux, rpc.ServerOptions{})
	defer srv.Close()
	p := rpc.NewPeer("in-process", rpc.DialOptions{Local: srv})
	defer p.Close()
	var shared weftpb.MkdirReply
	if err := p.Call(ctx, weftpb.MethodMkdir, &weftpb.MkdirRequest{Creds: rootCreds(), Parent: root, Name: "shared", Mode: 0o777}, &shared); err != nil {
		t.Fatal(err)
	}
	var f weftpb.CreateReply
	if err := p.Call(ctx, weftpb.MethodCreate, &weftpb.CreateRequest{Creds: credsAs(42), Parent: shared.Attr.Ino, Name: "f", Mode: syscall.S_IFREG | 0o600}, &f); err != nil || f.Attr.Uid != 42 {
		t.Fatalf("create as 42 without identities: %v, owner %d", err, f.GetAttr().GetUid())
	}
}
