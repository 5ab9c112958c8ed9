package meta

import (
	"slices"
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

func (e *env) setx(c *weftpb.Creds, n *weftpb.NodeRef, name, value string, flags uint32) error {
	_, err := e.SetXattr(ctx, &weftpb.SetXattrRequest{Creds: c, Node: n, Name: name, Value: []byte(value), Flags: flags})
	return err
}

func (e *env) getx(c *weftpb.Creds, n *weftpb.NodeRef, name string) (string, error) {
	r, err := e.GetXattr(ctx, &weftpb.GetXattrRequest{Creds: c, Node: n, Name: name})
	if err != nil {
		return "", err
	}
	return string(r.Value), nil
}

func TestXattrs(t *testing.T) {
	e := newEnv(t)
	f := aliceFile(t, e, 0o644)
	before := e.mustLookup(root, "f")
	e.clock.Advance()
	if err := e.setx(alice, f, "user.a", "1", 0); err != nil {
		t.Fatal(err)
	}
	if a := e.mustLookup(root, "f"); a.CtimeNs == before.CtimeNs {
		t.Fatal("setxattr did not move ctime")
	}
	wantKind(t, e.setx(alice, f, "user.a", "2", xattrCreate), errs.Exist)
	wantKind(t, e.setx(alice, f, "user.b", "2", xattrReplace), errs.NoData)
	if err := e.setx(alice, f, "user.a", "2", xattrReplace); err != nil {
		t.Fatal(err)
	}
	if v, err := e.getx(bob, f, "user.a"); err != nil || v != "2" {
		t.Fatalf("get: %q %v", v, err)
	}
	_, err := e.getx(alice, f, "user.none")
	wantKind(t, err, errs.NoData)
	wantKind(t, e.setx(bob, f, "user.c", "x", 0), errs.Permission)
	wantKind(t, e.setx(alice, f, "user.big", string(make([]byte, core.MaxXattrValue+1)), 0), errs.Range)
	if err := e.setx(alice, f, "user.max", string(make([]byte, core.MaxXattrValue)), 0); err != nil {
		t.Fatalf("largest value: %v", err)
	}
	wantKind(t, e.setx(alice, f, "bogus.x", "x", 0), errs.NotSupported)
	wantKind(t, e.setx(alice, f, "", "x", 0), errs.Invalid)
	wantKind(t, e.setx(alice, f, "user.a", "x", 8), errs.Invalid)
	wantKind(t, e.setx(rootCreds(), f, "system.posix_acl_access", "x", 0), errs.NotSupported)
	// trusted: root only, hidden from others; security: root writes, all read.
	wantKind(t, e.setx(alice, f, "trusted.t", "x", 0), errs.NotPermitted)
	if err := e.setx(rootCreds(), f, "trusted.t", "x", 0); err != nil {
		t.Fatal(err)
	}
	_, err = e.getx(alice, f, "trusted.t")
	wantKind(t, err, errs.NotPermitted)
	wantKind(t, e.setx(alice, f, "security.s", "x", 0), errs.NotPermitted)
	if err := e.setx(rootCreds(), f, "security.s", "y", 0); err != nil {
		t.Fatal(err)
	}
	if v, err := e.getx(bob, f, "security.s"); err != nil || v != "y" {
		t.Fatalf("security read: %q %v", v, err)
	}
	list := func(c *weftpb.Creds) []string {
		r := must[*weftpb.ListXattrReply](t)(e.ListXattr(ctx, &weftpb.ListXattrRequest{Creds: c, Node: f}))
		slices.Sort(r.Names)
		return r.Names
	}
	if got := list(alice); !slices.Equal(got, []string{"security.s", "user.a", "user.max"}) {
		t.Fatalf("alice lists %v", got)
	}
	if got := list(rootCreds()); len(got) != 4 {
		t.Fatalf("root lists %v", got)
	}
	_, err = e.RemoveXattr(ctx, &weftpb.RemoveXattrRequest{Creds: alice, Node: f, Name: "user.a"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.RemoveXattr(ctx, &weftpb.RemoveXattrRequest{Creds: alice, Node: f, Name: "user.a"})
	wantKind(t, err, errs.NoData)
	_, err = e.RemoveXattr(ctx, &weftpb.RemoveXattrRequest{Creds: bob, Node: f, Name: "user.max"})
	wantKind(t, err, errs.Permission)
	// No read permission, no user.* read.
	e.chmod(alice, f, 0o600)
	_, err = e.getx(bob, f, "user.max")
	wantKind(t, err, errs.Permission)
}

func TestXattrsOnDirsAndSymlinks(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o1777)
	if err := e.setx(rootCreds(), inoRef(d.Ino), "user.x", "1", 0); err != nil {
		t.Fatal(err)
	}
	// A sticky directory's user xattrs are its owner's, even when writable.
	wantKind(t, e.setx(alice, inoRef(d.Ino), "user.y", "1", 0), errs.NotPermitted)
	s := must[*weftpb.SymlinkReply](t)(e.Symlink(ctx, &weftpb.SymlinkRequest{Creds: rootCreds(), Parent: root, Name: "l", Target: "d"}))
	l := fileRef(root, "l", s.Attr.Ino)
	wantKind(t, e.setx(rootCreds(), l, "user.x", "1", 0), errs.NotPermitted)
	_, err := e.getx(rootCreds(), l, "user.x")
	wantKind(t, err, errs.NoData)
	if err := e.setx(rootCreds(), l, "trusted.x", "1", 0); err != nil {
		t.Fatalf("trusted xattr on a symlink: %v", err)
	}
	// Directory xattrs go with the directory.
	must[*weftpb.Empty](t)(e.Rmdir(ctx, &weftpb.RmdirRequest{Creds: rootCreds(), Parent: root, Name: "d"}))
	if n := countPrefix(t, e, xattrPrefix(core.Ino(d.Ino))); n != 0 {
		t.Fatalf("%d xattrs of a removed dir remain", n)
	}
}
