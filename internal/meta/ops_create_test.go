package meta

import (
	"strings"
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

func TestCreateFile(t *testing.T) {
	e := newEnv(t)
	e.chmod(rootCreds(), inoRef(root), 0o777)
	before := e.getattr(root)
	e.clock.Advance()
	a := e.create(alice, root, "f", 0o640)
	if a.Mode != core.ModeFile|0o640 || a.Uid != 1000 || a.Gid != 1000 || a.Nlink != 1 || !a.Inline || a.Size != 0 {
		t.Fatalf("attr %+v", a)
	}
	if core.Ino(a.Ino).Server() != 0 || a.Ino == root {
		t.Fatalf("ino %d", a.Ino)
	}
	if got := e.mustLookup(root, "f"); got.Ino != a.Ino || got.Mode != a.Mode {
		t.Fatalf("lookup %+v, want %+v", got, a)
	}
	after := e.getattr(root)
	if after.MtimeNs <= before.MtimeNs || after.CtimeNs <= before.CtimeNs || after.Nlink != 2 {
		t.Fatalf("parent times/nlink not updated: %+v -> %+v", before, after)
	}
	// Attributes are embedded in the entry: no standalone record.
	if e.hasInodeRecord(a.Ino) || e.entryRecord(root, "f").Attr == nil {
		t.Fatal("a one-link file has a standalone record")
	}
	_, err := e.Create(ctx, &weftpb.CreateRequest{Creds: alice, Parent: root, Name: "f", Mode: 0o644, Exclusive: true})
	wantKind(t, err, errs.Exist)
}

func TestCreateErrors(t *testing.T) {
	e := newEnv(t)
	f := e.create(rootCreds(), root, "f", 0o644)
	cases := []struct {
		name string
		req  *weftpb.CreateRequest
		kind errs.Kind
	}{
		{"no creds", &weftpb.CreateRequest{Parent: root, Name: "x"}, errs.Invalid},
		{"parent not dir", &weftpb.CreateRequest{Creds: rootCreds(), Parent: f.Ino, Name: "x"}, errs.Stale},
		{"no parent", &weftpb.CreateRequest{Creds: rootCreds(), Parent: 999999, Name: "x"}, errs.Stale},
		{"dot", &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: "."}, errs.Invalid},
		{"dotdot", &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: ".."}, errs.Invalid},
		{"slash", &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: "a/b"}, errs.Invalid},
		{"empty", &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: ""}, errs.NotExist},
		{"long", &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: strings.Repeat("a", 256)}, errs.NameTooLong},
		{"dir type", &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: "x", Mode: core.ModeDir | 0o755}, errs.Invalid},
		{"symlink type", &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: "x", Mode: core.ModeLink | 0o777}, errs.Invalid},
		{"device by user", &weftpb.CreateRequest{Creds: alice, Parent: root, Name: "x", Mode: core.ModeChar | 0o666}, errs.NotPermitted},
		{"no write on parent", &weftpb.CreateRequest{Creds: alice, Parent: root, Name: "x", Mode: 0o644}, errs.Permission},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.Create(ctx, c.req)
			wantKind(t, err, c.kind)
		})
	}
	// A file as parent is found by ino as a standalone record: a one-link
	// file has none, so Stale; a directory-less ino as well. A hard-linked
	// file as parent is NotDir.
	must[*weftpb.LinkReply](t)(e.Link(ctx, &weftpb.LinkRequest{Creds: rootCreds(), Node: fileRef(root, "f", f.Ino), NewParent: root, NewName: "f2"}))
	_, err := e.Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: f.Ino, Name: "x"})
	wantKind(t, err, errs.NotDir)
}

func TestCreateSpecialFiles(t *testing.T) {
	e := newEnv(t)
	for _, m := range []uint32{core.ModeFIFO | 0o600, core.ModeSocket | 0o600, core.ModeChar | 0o600, core.ModeBlock | 0o600, 0o600} {
		name := "n" + itoa(int(m))
		r := must[*weftpb.CreateReply](t)(e.Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: name, Mode: m, Rdev: 0x0801}))
		want := m
		if m&core.ModeType == 0 {
			want |= core.ModeFile
		}
		if r.Attr.Mode != want {
			t.Errorf("%s: mode %#o, want %#o", name, r.Attr.Mode, want)
		}
		dev := m&core.ModeType == core.ModeChar || m&core.ModeType == core.ModeBlock
		if dev != (r.Attr.Rdev == 0x0801) {
			t.Errorf("%s: rdev %#x", name, r.Attr.Rdev)
		}
		if r.Attr.Inline != core.IsRegular(want) {
			t.Errorf("%s: inline %v", name, r.Attr.Inline)
		}
	}
}

func TestCreateExistingOpens(t *testing.T) {
	e := newEnv(t)
	f := e.create(rootCreds(), root, "f", 0o666)
	must[*weftpb.CommitReply](t)(e.Commit(ctx, &weftpb.CommitRequest{Creds: rootCreds(), Node: fileRef(root, "f", f.Ino), Size: 5, Inline: true, InlineData: []byte("hello")}))
	r := must[*weftpb.CreateReply](t)(e.Create(ctx, &weftpb.CreateRequest{Creds: alice, Parent: root, Name: "f", Mode: 0o600, OpenFlags: oRdOnly}))
	if !r.Existed || r.Attr.Ino != f.Ino || string(r.InlineData) != "hello" {
		t.Fatalf("create existing: %+v", r)
	}
	r = must[*weftpb.CreateReply](t)(e.Create(ctx, &weftpb.CreateRequest{Creds: alice, Parent: root, Name: "f", Mode: 0o600, OpenFlags: oWrOnly | oTrunc}))
	if !r.Existed || r.Attr.Size != 0 || len(r.InlineData) != 0 {
		t.Fatalf("create O_TRUNC: %+v", r)
	}
	if a := e.mustLookup(root, "f"); a.Size != 0 {
		t.Fatalf("size after O_TRUNC %d", a.Size)
	}
	e.chmod(rootCreds(), fileRef(root, "f", f.Ino), 0o644)
	_, err := e.Create(ctx, &weftpb.CreateRequest{Creds: alice, Parent: root, Name: "f", OpenFlags: oWrOnly})
	wantKind(t, err, errs.Permission)
	e.mkdir(rootCreds(), root, "d", 0o755)
	_, err = e.Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: "d", OpenFlags: oRdOnly})
	wantKind(t, err, errs.IsDir)
}

func TestMkdirAndNlink(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o6777)
	// mkdir ignores setuid and setgid in its mode (the sticky bit stays).
	if d.Mode != core.ModeDir|0o777 || d.Nlink != 2 {
		t.Fatalf("mkdir attr mode %#o nlink %d", d.Mode, d.Nlink)
	}
	e.mkdir(rootCreds(), d.Ino, "a", 0o755)
	e.mkdir(rootCreds(), d.Ino, "b", 0o755)
	e.create(rootCreds(), d.Ino, "f", 0o644)
	if n := e.getattr(d.Ino).Nlink; n != 4 {
		t.Fatalf("nlink of a dir with 2 subdirs = %d, want 4", n)
	}
	if n := e.getattr(root).Nlink; n != 3 {
		t.Fatalf("root nlink %d, want 3", n)
	}
	_, err := e.Mkdir(ctx, &weftpb.MkdirRequest{Creds: rootCreds(), Parent: d.Ino, Name: "a"})
	wantKind(t, err, errs.Exist)
	_, err = e.Mkdir(ctx, &weftpb.MkdirRequest{Creds: alice, Parent: root, Name: "x", Mode: 0o755})
	wantKind(t, err, errs.Permission)
	e.chmod(rootCreds(), inoRef(d.Ino), 0o766) // no search for others
	_, err = e.Mkdir(ctx, &weftpb.MkdirRequest{Creds: alice, Parent: d.Ino, Name: "x", Mode: 0o755})
	wantKind(t, err, errs.Permission)
}

func TestSetgidDirectoryInheritance(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "shared", 0o777)
	must[*weftpb.SetAttrReply](t)(e.SetAttr(ctx, &weftpb.SetAttrRequest{Creds: rootCreds(), Node: inoRef(d.Ino),
		Valid: uint32(weftpb.SetAttrBits_SETATTR_GID | weftpb.SetAttrBits_SETATTR_MODE), Gid: 500, Mode: 0o2777}))
	f := e.create(alice, d.Ino, "f", 0o644)
	if f.Gid != 500 || f.Uid != 1000 {
		t.Fatalf("file in setgid dir: uid %d gid %d, want 1000/500", f.Uid, f.Gid)
	}
	sub := e.mkdir(alice, d.Ino, "sub", 0o755)
	if sub.Gid != 500 || sub.Mode&core.ModeSetgid == 0 {
		t.Fatalf("dir in setgid dir: gid %d mode %#o", sub.Gid, sub.Mode)
	}
	// A setgid group-executable file made by a non-member loses setgid.
	g := e.create(alice, d.Ino, "g", 0o2755)
	if g.Mode&core.ModeSetgid != 0 {
		t.Fatalf("non-member kept setgid: %#o", g.Mode)
	}
	h := e.create(user(1000, 1000, 500), d.Ino, "h", 0o2755)
	if h.Mode&core.ModeSetgid == 0 {
		t.Fatalf("member lost setgid: %#o", h.Mode)
	}
	// Outside a setgid dir the creator's gid is used.
	o := e.create(rootCreds(), root, "o", 0o644)
	if o.Gid != 0 {
		t.Fatalf("gid %d", o.Gid)
	}
}

func TestSymlinkReadlink(t *testing.T) {
	e := newEnv(t)
	r := must[*weftpb.SymlinkReply](t)(e.Symlink(ctx, &weftpb.SymlinkRequest{Creds: rootCreds(), Parent: root, Name: "l", Target: "../some/where"}))
	if r.Attr.Mode != core.ModeLink|0o777 || r.Attr.Size != uint64(len("../some/where")) {
		t.Fatalf("symlink attr %+v", r.Attr)
	}
	rl := must[*weftpb.ReadlinkReply](t)(e.Readlink(ctx, &weftpb.ReadlinkRequest{Creds: alice, Node: fileRef(root, "l", r.Attr.Ino)}))
	if rl.Target != "../some/where" {
		t.Fatalf("readlink %q", rl.Target)
	}
	f := e.create(rootCreds(), root, "f", 0o644)
	_, err := e.Readlink(ctx, &weftpb.ReadlinkRequest{Creds: rootCreds(), Node: fileRef(root, "f", f.Ino)})
	wantKind(t, err, errs.Invalid)
	_, err = e.Readlink(ctx, &weftpb.ReadlinkRequest{Creds: rootCreds(), Node: inoRef(root)})
	wantKind(t, err, errs.Invalid)
	for _, c := range []struct {
		target string
		kind   errs.Kind
	}{{"", errs.NotExist}, {strings.Repeat("x", 4096), errs.NameTooLong}, {"a\x00b", errs.Invalid}} {
		_, err := e.Symlink(ctx, &weftpb.SymlinkRequest{Creds: rootCreds(), Parent: root, Name: "bad", Target: c.target})
		wantKind(t, err, c.kind)
	}
	_, err = e.Symlink(ctx, &weftpb.SymlinkRequest{Creds: rootCreds(), Parent: root, Name: "max", Target: strings.Repeat("x", 4095)})
	if err != nil {
		t.Fatalf("4095-byte target: %v", err)
	}
	_, err = e.Symlink(ctx, &weftpb.SymlinkRequest{Creds: rootCreds(), Parent: root, Name: "l", Target: "x"})
	wantKind(t, err, errs.Exist)
}

func TestLookupErrors(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o700)
	e.create(rootCreds(), d.Ino, "f", 0o644)
	_, err := e.lookup(rootCreds(), root, "nope")
	wantKind(t, err, errs.NotExist)
	_, err = e.lookup(alice, d.Ino, "f")
	wantKind(t, err, errs.Permission)
	_, err = e.lookup(rootCreds(), d.Ino, ".")
	wantKind(t, err, errs.Invalid)
	_, err = e.lookup(rootCreds(), d.Ino, "..")
	wantKind(t, err, errs.Invalid)
	_, err = e.Lookup(ctx, &weftpb.LookupRequest{Parent: root, Name: "d"})
	wantKind(t, err, errs.Invalid)
	if _, err := e.lookup(alice, root, "d"); err != nil {
		t.Fatalf("lookup with search permission: %v", err)
	}
}
