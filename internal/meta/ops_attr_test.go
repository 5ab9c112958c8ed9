package meta

import (
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

const (
	bMode     = uint32(weftpb.SetAttrBits_SETATTR_MODE)
	bUID      = uint32(weftpb.SetAttrBits_SETATTR_UID)
	bGID      = uint32(weftpb.SetAttrBits_SETATTR_GID)
	bSize     = uint32(weftpb.SetAttrBits_SETATTR_SIZE)
	bAtime    = uint32(weftpb.SetAttrBits_SETATTR_ATIME)
	bMtime    = uint32(weftpb.SetAttrBits_SETATTR_MTIME)
	bAtimeNow = uint32(weftpb.SetAttrBits_SETATTR_ATIME_NOW)
	bMtimeNow = uint32(weftpb.SetAttrBits_SETATTR_MTIME_NOW)
)

// aliceFile makes a file owned by alice in a world-writable directory.
func aliceFile(t *testing.T, e *env, mode uint32) *weftpb.NodeRef {
	t.Helper()
	if err := e.chmod(rootCreds(), inoRef(root), 0o777); err != nil {
		t.Fatal(err)
	}
	a := e.create(alice, root, "f", mode)
	return fileRef(root, "f", a.Ino)
}

func (e *env) setattr(c *weftpb.Creds, n *weftpb.NodeRef, req *weftpb.SetAttrRequest) (*weftpb.SetAttrReply, error) {
	req.Creds, req.Node = c, n
	return e.SetAttr(ctx, req)
}

func TestChmod(t *testing.T) {
	e := newEnv(t)
	f := aliceFile(t, e, 0o644)
	wantKind(t, e.chmod(bob, f, 0o777), errs.NotPermitted)
	e.clock.Advance()
	r := must[*weftpb.SetAttrReply](t)(e.setattr(alice, f, &weftpb.SetAttrRequest{Valid: bMode, Mode: 0o4755 | core.ModeDir}))
	// The type bits in the request are ignored; ctime moves.
	if r.Attr.Mode != core.ModeFile|0o4755 || r.Attr.CtimeNs != e.clock.Now().UnixNano() {
		t.Fatalf("chmod: %+v", r.Attr)
	}
	// A non-root owner outside the file's group loses setgid.
	must[*weftpb.SetAttrReply](t)(e.setattr(rootCreds(), f, &weftpb.SetAttrRequest{Valid: bGID, Gid: 500}))
	r = must[*weftpb.SetAttrReply](t)(e.setattr(alice, f, &weftpb.SetAttrRequest{Valid: bMode, Mode: 0o2755}))
	if r.Attr.Mode&core.ModeSetgid != 0 {
		t.Fatalf("non-member kept setgid: %#o", r.Attr.Mode)
	}
	r = must[*weftpb.SetAttrReply](t)(e.setattr(rootCreds(), f, &weftpb.SetAttrRequest{Valid: bMode, Mode: 0o2755}))
	if r.Attr.Mode&core.ModeSetgid == 0 {
		t.Fatalf("root lost setgid: %#o", r.Attr.Mode)
	}
	if a := e.mustLookup(root, "f"); a.Mode != core.ModeFile|0o2755 {
		t.Fatalf("stored mode %#o", a.Mode)
	}
}

func TestChown(t *testing.T) {
	e := newEnv(t)
	f := aliceFile(t, e, 0o6755)
	_, err := e.setattr(alice, f, &weftpb.SetAttrRequest{Valid: bUID, Uid: 1001})
	wantKind(t, err, errs.NotPermitted)
	_, err = e.setattr(bob, f, &weftpb.SetAttrRequest{Valid: bGID, Gid: 1001})
	wantKind(t, err, errs.NotPermitted)
	_, err = e.setattr(alice, f, &weftpb.SetAttrRequest{Valid: bGID, Gid: 77})
	wantKind(t, err, errs.NotPermitted)
	// Owner to itself: allowed (a no-op chown) and clears setuid/setgid.
	r := must[*weftpb.SetAttrReply](t)(e.setattr(alice, f, &weftpb.SetAttrRequest{Valid: bUID, Uid: 1000}))
	if r.Attr.Mode&(core.ModeSetuid|core.ModeSetgid) != 0 {
		t.Fatalf("chown kept setuid/setgid: %#o", r.Attr.Mode)
	}
	// Owner to a supplementary group.
	r = must[*weftpb.SetAttrReply](t)(e.setattr(user(1000, 1000, 77), f, &weftpb.SetAttrRequest{Valid: bGID, Gid: 77}))
	if r.Attr.Gid != 77 {
		t.Fatalf("gid %d", r.Attr.Gid)
	}
	r = must[*weftpb.SetAttrReply](t)(e.setattr(rootCreds(), f, &weftpb.SetAttrRequest{Valid: bUID | bGID, Uid: 5, Gid: 6}))
	if r.Attr.Uid != 5 || r.Attr.Gid != 6 {
		t.Fatalf("root chown: %+v", r.Attr)
	}
	// Setgid without group-exec (mandatory locking) survives a chown; a
	// directory keeps its setgid.
	must[*weftpb.SetAttrReply](t)(e.setattr(rootCreds(), f, &weftpb.SetAttrRequest{Valid: bMode, Mode: 0o2644}))
	r = must[*weftpb.SetAttrReply](t)(e.setattr(rootCreds(), f, &weftpb.SetAttrRequest{Valid: bUID, Uid: 7}))
	if r.Attr.Mode&core.ModeSetgid == 0 {
		t.Fatalf("setgid without group-exec cleared: %#o", r.Attr.Mode)
	}
	d := e.mkdir(rootCreds(), root, "d", 0o2755)
	must[*weftpb.SetAttrReply](t)(e.setattr(rootCreds(), inoRef(d.Ino), &weftpb.SetAttrRequest{Valid: bMode, Mode: 0o2775}))
	dr := must[*weftpb.SetAttrReply](t)(e.setattr(rootCreds(), inoRef(d.Ino), &weftpb.SetAttrRequest{Valid: bUID, Uid: 9}))
	if dr.Attr.Mode&core.ModeSetgid == 0 {
		t.Fatalf("directory lost setgid on chown: %#o", dr.Attr.Mode)
	}
}

func TestSetAttrSize(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.InlineLimit = 16 })
	f := aliceFile(t, e, 0o644)
	must[*weftpb.CommitReply](t)(e.Commit(ctx, &weftpb.CommitRequest{Creds: alice, Node: f, Size: 5, Inline: true, InlineData: []byte("hello")}))
	_, err := e.setattr(bob, f, &weftpb.SetAttrRequest{Valid: bSize, Size: 1})
	wantKind(t, err, errs.Permission)
	// ftruncate on a handle open for writing skips the permission check.
	r := must[*weftpb.SetAttrReply](t)(e.setattr(bob, f, &weftpb.SetAttrRequest{Valid: bSize, Size: 2, ByHandle: true}))
	if r.OldSize != 5 || r.Attr.Size != 2 || !r.Attr.Inline {
		t.Fatalf("truncate: %+v old %d", r.Attr, r.OldSize)
	}
	o := must[*weftpb.OpenReply](t)(e.Open(ctx, &weftpb.OpenRequest{Creds: alice, Node: f, Flags: oRdOnly}))
	if string(o.InlineData) != "he" {
		t.Fatalf("content after truncate %q", o.InlineData)
	}
	r = must[*weftpb.SetAttrReply](t)(e.setattr(alice, f, &weftpb.SetAttrRequest{Valid: bSize, Size: 8}))
	o = must[*weftpb.OpenReply](t)(e.Open(ctx, &weftpb.OpenRequest{Creds: alice, Node: f, Flags: oRdOnly}))
	if string(o.InlineData) != "he\x00\x00\x00\x00\x00\x00" || r.Attr.Size != 8 {
		t.Fatalf("content after extend %q", o.InlineData)
	}
	// Content cannot grow past the inline limit here.
	_, err = e.setattr(alice, f, &weftpb.SetAttrRequest{Valid: bSize, Size: 17})
	wantKind(t, err, errs.Invalid)
	// Zeros can: the file turns chunked (sparse).
	must[*weftpb.SetAttrReply](t)(e.setattr(alice, f, &weftpb.SetAttrRequest{Valid: bSize, Size: 0}))
	r = must[*weftpb.SetAttrReply](t)(e.setattr(alice, f, &weftpb.SetAttrRequest{Valid: bSize, Size: 1 << 20}))
	if r.Attr.Inline || r.Attr.Size != 1<<20 {
		t.Fatalf("sparse extend: %+v", r.Attr)
	}
	_, err = e.setattr(rootCreds(), inoRef(root), &weftpb.SetAttrRequest{Valid: bSize, Size: 0})
	wantKind(t, err, errs.IsDir)
	s := must[*weftpb.SymlinkReply](t)(e.Symlink(ctx, &weftpb.SymlinkRequest{Creds: rootCreds(), Parent: root, Name: "l", Target: "x"}))
	_, err = e.setattr(rootCreds(), fileRef(root, "l", s.Attr.Ino), &weftpb.SetAttrRequest{Valid: bSize, Size: 0})
	wantKind(t, err, errs.Invalid)
}

func TestSetAttrTimes(t *testing.T) {
	e := newEnv(t)
	f := aliceFile(t, e, 0o666)
	_, err := e.setattr(bob, f, &weftpb.SetAttrRequest{Valid: bAtime | bMtime, AtimeNs: 1, MtimeNs: 2})
	wantKind(t, err, errs.NotPermitted)
	// Bob may set the times to now: he has write permission.
	e.clock.Advance()
	r := must[*weftpb.SetAttrReply](t)(e.setattr(bob, f, &weftpb.SetAttrRequest{Valid: bAtimeNow | bMtimeNow}))
	now := e.clock.Now().UnixNano()
	if r.Attr.AtimeNs != now || r.Attr.MtimeNs != now || r.Attr.CtimeNs != now {
		t.Fatalf("times now: %+v", r.Attr)
	}
	e.chmod(alice, f, 0o644)
	_, err = e.setattr(bob, f, &weftpb.SetAttrRequest{Valid: bMtimeNow})
	wantKind(t, err, errs.Permission)
	r = must[*weftpb.SetAttrReply](t)(e.setattr(alice, f, &weftpb.SetAttrRequest{Valid: bAtime | bMtime, AtimeNs: 11, MtimeNs: 22}))
	if r.Attr.AtimeNs != 11 || r.Attr.MtimeNs != 22 || r.Attr.CtimeNs != now {
		t.Fatalf("explicit times: %+v", r.Attr)
	}
	_, err = e.setattr(alice, f, &weftpb.SetAttrRequest{Valid: 1 << 20})
	wantKind(t, err, errs.Invalid)
}

func TestGetAttrAndAccess(t *testing.T) {
	e := newEnv(t)
	f := aliceFile(t, e, 0o640)
	a := must[*weftpb.GetAttrReply](t)(e.GetAttr(ctx, &weftpb.GetAttrRequest{Creds: bob, Node: f}))
	if a.Attr.Ino != f.Ino {
		t.Fatalf("getattr %+v", a.Attr)
	}
	access := func(c *weftpb.Creds, n *weftpb.NodeRef, mask uint32) error {
		_, err := e.Access(ctx, &weftpb.AccessRequest{Creds: c, Node: n, Mask: mask})
		return err
	}
	if err := access(alice, f, mayRead|mayWrite); err != nil {
		t.Fatalf("owner rw: %v", err)
	}
	wantKind(t, access(alice, f, mayExec), errs.Permission)
	wantKind(t, access(bob, f, mayRead), errs.Permission)
	if err := access(bob, f, 0); err != nil {
		t.Fatalf("existence check: %v", err)
	}
	if err := access(user(1001, 1000), f, mayRead); err != nil {
		t.Fatalf("group read: %v", err)
	}
	if err := access(user(1001, 5, 1000), f, mayRead); err != nil {
		t.Fatalf("supplementary group read: %v", err)
	}
	// Root reads and writes anything but executes only with some x bit.
	if err := access(rootCreds(), f, mayRead|mayWrite); err != nil {
		t.Fatalf("root rw: %v", err)
	}
	wantKind(t, access(rootCreds(), f, mayExec), errs.Permission)
	e.chmod(alice, f, 0o001)
	if err := access(rootCreds(), f, mayExec); err != nil {
		t.Fatalf("root exec with o+x: %v", err)
	}
	// The owner class applies even when it grants less than others.
	wantKind(t, access(alice, f, mayExec), errs.Permission)
	wantKind(t, access(alice, f, 8), errs.Invalid)
	wantKind(t, access(alice, fileRef(root, "f", f.Ino+1), 0), errs.Stale)
	wantKind(t, access(alice, fileRef(root, "g", 0), 0), errs.NotExist)
	wantKind(t, access(alice, inoRef(f.Ino), 0), errs.Stale) // one-link file: not by ino
}
