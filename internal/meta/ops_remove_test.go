package meta

import (
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

func (e *env) unlink(c *weftpb.Creds, parent uint64, name string) (*weftpb.UnlinkReply, error) {
	return e.Unlink(ctx, &weftpb.UnlinkRequest{Creds: c, Parent: parent, Name: name})
}

func (e *env) rmdir(c *weftpb.Creds, parent uint64, name string) error {
	_, err := e.Rmdir(ctx, &weftpb.RmdirRequest{Creds: c, Parent: parent, Name: name})
	return err
}

func TestUnlink(t *testing.T) {
	e := newEnv(t)
	f := e.create(rootCreds(), root, "f", 0o644)
	must[*weftpb.Empty](t)(e.SetXattr(ctx, &weftpb.SetXattrRequest{Creds: rootCreds(), Node: fileRef(root, "f", f.Ino), Name: "user.a", Value: []byte("1")}))
	before := e.getattr(root)
	e.clock.Advance()
	r := must[*weftpb.UnlinkReply](t)(e.unlink(rootCreds(), root, "f"))
	if r.Freed || r.Attr.Ino != f.Ino || r.Attr.Nlink != 0 {
		t.Fatalf("unlink of an inline file: %+v", r)
	}
	if _, err := e.lookup(rootCreds(), root, "f"); !errs.Is(err, errs.NotExist) {
		t.Fatalf("lookup after unlink: %v", err)
	}
	if after := e.getattr(root); after.MtimeNs <= before.MtimeNs {
		t.Fatal("parent mtime not updated")
	}
	// The xattrs went with the inode.
	if n := countPrefix(t, e, xattrPrefix(core.Ino(f.Ino))); n != 0 {
		t.Fatalf("%d xattr keys left", n)
	}
	_, err := e.unlink(rootCreds(), root, "f")
	wantKind(t, err, errs.NotExist)
	e.mkdir(rootCreds(), root, "d", 0o755)
	_, err = e.unlink(rootCreds(), root, "d")
	wantKind(t, err, errs.IsDir)
	// A chunked file's last link frees it.
	g := e.create(rootCreds(), root, "g", 0o644)
	must[*weftpb.CommitReply](t)(e.Commit(ctx, &weftpb.CommitRequest{Creds: rootCreds(), Node: fileRef(root, "g", g.Ino), Size: 1 << 20}))
	r = must[*weftpb.UnlinkReply](t)(e.unlink(rootCreds(), root, "g"))
	if !r.Freed || r.Attr.Size != 1<<20 {
		t.Fatalf("unlink of a chunked file: %+v", r)
	}
	e.create(rootCreds(), root, "h", 0o644)
	_, err = e.unlink(alice, root, "h")
	wantKind(t, err, errs.Permission)
	st := must[*weftpb.StatFSReply](t)(e.StatFS(ctx, &weftpb.StatFSRequest{}))
	if st.Files != 3 { // root, d, h
		t.Fatalf("files %d, want 3", st.Files)
	}
}

func countPrefix(t *testing.T, e *env, p []byte) int {
	t.Helper()
	it, err := e.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.SeekGE(p); ok && len(it.Key()) >= len(p) && string(it.Key()[:len(p)]) == string(p); ok = it.Next() {
		n++
	}
	return n
}

func TestStickyDirectory(t *testing.T) {
	e := newEnv(t)
	tmp := e.mkdir(rootCreds(), root, "tmp", 0o1777)
	carol := user(1002, 1002)
	e.create(alice, tmp.Ino, "a", 0o666)
	e.create(alice, tmp.Ino, "a2", 0o666)
	e.mkdir(alice, tmp.Ino, "ad", 0o777)
	_, err := e.unlink(bob, tmp.Ino, "a")
	wantKind(t, err, errs.NotPermitted)
	wantKind(t, e.rmdir(bob, tmp.Ino, "ad"), errs.NotPermitted)
	_, err = e.Rename(ctx, &weftpb.RenameRequest{Creds: bob, SrcParent: tmp.Ino, SrcName: "a", DstParent: tmp.Ino, DstName: "b"})
	wantKind(t, err, errs.NotPermitted)
	e.create(bob, tmp.Ino, "b", 0o666)
	_, err = e.Rename(ctx, &weftpb.RenameRequest{Creds: bob, SrcParent: tmp.Ino, SrcName: "b", DstParent: tmp.Ino, DstName: "a"})
	wantKind(t, err, errs.NotPermitted) // replacing alice's file
	// The file's owner, the directory's owner (after chown) and root may.
	must[*weftpb.UnlinkReply](t)(e.unlink(alice, tmp.Ino, "a"))
	must[*weftpb.SetAttrReply](t)(e.SetAttr(ctx, &weftpb.SetAttrRequest{Creds: rootCreds(), Node: inoRef(tmp.Ino), Valid: bUID, Uid: 1002}))
	must[*weftpb.UnlinkReply](t)(e.unlink(carol, tmp.Ino, "a2"))
	if err := e.rmdir(rootCreds(), tmp.Ino, "ad"); err != nil {
		t.Fatalf("root rmdir in sticky dir: %v", err)
	}
}

func TestRmdir(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o755)
	sub := e.mkdir(rootCreds(), d.Ino, "sub", 0o755)
	e.create(rootCreds(), sub.Ino, "f", 0o644)
	e.create(rootCreds(), d.Ino, "file", 0o644)
	wantKind(t, e.rmdir(rootCreds(), d.Ino, "file"), errs.NotDir)
	wantKind(t, e.rmdir(rootCreds(), d.Ino, "sub"), errs.NotEmpty)
	wantKind(t, e.rmdir(rootCreds(), d.Ino, "nope"), errs.NotExist)
	wantKind(t, e.rmdir(alice, root, "d"), errs.Permission)
	wantKind(t, e.rmdir(rootCreds(), d.Ino, "."), errs.Invalid)
	must[*weftpb.UnlinkReply](t)(e.unlink(rootCreds(), sub.Ino, "f"))
	if n := e.getattr(d.Ino).Nlink; n != 3 {
		t.Fatalf("nlink before rmdir %d", n)
	}
	if err := e.rmdir(rootCreds(), d.Ino, "sub"); err != nil {
		t.Fatal(err)
	}
	if n := e.getattr(d.Ino).Nlink; n != 2 {
		t.Fatalf("nlink after rmdir %d, want 2", n)
	}
	_, err := e.GetAttr(ctx, &weftpb.GetAttrRequest{Creds: rootCreds(), Node: inoRef(sub.Ino)})
	wantKind(t, err, errs.Stale)
	_, err = e.Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: sub.Ino, Name: "x"})
	wantKind(t, err, errs.Stale)
	if e.hasInodeRecord(sub.Ino) {
		t.Fatal("record of a removed directory remains")
	}
}
