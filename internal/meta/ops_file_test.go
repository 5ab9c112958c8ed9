package meta

import (
	"bytes"
	"slices"
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

func (e *env) openFile(c *weftpb.Creds, n *weftpb.NodeRef, flags uint32) (*weftpb.OpenReply, error) {
	return e.Open(ctx, &weftpb.OpenRequest{Creds: c, Node: n, Flags: flags})
}

func (e *env) commit(c *weftpb.Creds, n *weftpb.NodeRef, size uint64, inline bool, data []byte) (*weftpb.CommitReply, error) {
	return e.Commit(ctx, &weftpb.CommitRequest{Creds: c, Node: n, Size: size, Inline: inline, InlineData: data, MtimeNs: 77})
}

func TestOpenPermissions(t *testing.T) {
	e := newEnv(t)
	f := aliceFile(t, e, 0o604) // owner rw, others r
	for _, c := range []struct {
		who   *weftpb.Creds
		flags uint32
		kind  errs.Kind // Other = success
	}{
		{alice, oRdOnly, errs.Other},
		{alice, oRdWr, errs.Other},
		{bob, oRdOnly, errs.Other},
		{bob, oWrOnly, errs.Permission},
		{bob, oRdWr, errs.Permission},
		{bob, oRdOnly | oTrunc, errs.Permission},
		{user(1001, 1000), oRdOnly, errs.Permission}, // group class has no bits
		{rootCreds(), oRdWr, errs.Other},
		{alice, oAccMode, errs.Invalid},
	} {
		_, err := e.openFile(c.who, f, c.flags)
		if c.kind == errs.Other {
			if err != nil {
				t.Errorf("open uid %d flags %#o: %v", c.who.Uid, c.flags, err)
			}
			continue
		}
		if errs.KindOf(err) != c.kind || err == nil {
			t.Errorf("open uid %d flags %#o: %v, want %v", c.who.Uid, c.flags, err, c.kind)
		}
	}
	_, err := e.openFile(rootCreds(), inoRef(root), oRdOnly)
	if err != nil {
		t.Fatalf("open dir read-only: %v", err)
	}
	for _, fl := range []uint32{oWrOnly, oRdWr, oRdOnly | oTrunc} {
		_, err = e.openFile(rootCreds(), inoRef(root), fl)
		wantKind(t, err, errs.IsDir)
	}
	s := must[*weftpb.SymlinkReply](t)(e.Symlink(ctx, &weftpb.SymlinkRequest{Creds: rootCreds(), Parent: root, Name: "l", Target: "f"}))
	_, err = e.openFile(rootCreds(), fileRef(root, "l", s.Attr.Ino), oRdOnly)
	wantKind(t, err, errs.Loop)
}

func TestOpenTruncate(t *testing.T) {
	e := newEnv(t)
	f := aliceFile(t, e, 0o6777)
	must[*weftpb.CommitReply](t)(e.commit(alice, f, 3, true, []byte("abc")))
	e.clock.Advance()
	r := must[*weftpb.OpenReply](t)(e.openFile(bob, f, oWrOnly|oTrunc))
	if r.OldSize != 3 || r.Attr.Size != 0 || len(r.InlineData) != 0 || r.Attr.MtimeNs != e.clock.Now().UnixNano() {
		t.Fatalf("O_TRUNC: %+v", r)
	}
	if r.Attr.Mode&(core.ModeSetuid|core.ModeSetgid) != 0 {
		t.Fatalf("truncate by a non-root writer kept setuid/setgid: %#o", r.Attr.Mode)
	}
	// A chunked file truncated to 0 becomes inline again.
	must[*weftpb.CommitReply](t)(e.commit(alice, f, 100000, false, nil))
	r = must[*weftpb.OpenReply](t)(e.openFile(alice, f, oRdWr|oTrunc))
	if r.OldSize != 100000 || !r.Attr.Inline || r.Attr.Size != 0 {
		t.Fatalf("truncate chunked: %+v", r)
	}
}

func TestCommitInlineAndChunked(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.InlineLimit = 64 })
	f := aliceFile(t, e, 0o644)
	data := bytes.Repeat([]byte("x"), 64)
	e.clock.Advance()
	c := must[*weftpb.CommitReply](t)(e.commit(alice, f, 64, true, data))
	if !c.Attr.Inline || c.Attr.Size != 64 || c.Attr.MtimeNs != 77 || c.Attr.CtimeNs != e.clock.Now().UnixNano() {
		t.Fatalf("inline commit: %+v", c.Attr)
	}
	o := must[*weftpb.OpenReply](t)(e.openFile(alice, f, oRdOnly))
	if !bytes.Equal(o.InlineData, data) {
		t.Fatalf("inline content %q", o.InlineData)
	}
	_, err := e.commit(alice, f, 65, true, append(data, 'y'))
	wantKind(t, err, errs.Invalid) // over the limit
	_, err = e.commit(alice, f, 10, true, data)
	wantKind(t, err, errs.Invalid) // size does not match content
	_, err = e.commit(alice, f, 10, false, data)
	wantKind(t, err, errs.Invalid) // content for a chunked file
	_, err = e.commit(bob, f, 1, true, []byte("z"))
	wantKind(t, err, errs.Permission)
	// The transition to chunked.
	c = must[*weftpb.CommitReply](t)(e.commit(alice, f, 1<<30, false, nil))
	if c.Attr.Inline || c.Attr.Size != 1<<30 {
		t.Fatalf("chunked commit: %+v", c.Attr)
	}
	o = must[*weftpb.OpenReply](t)(e.openFile(alice, f, oRdOnly))
	if len(o.InlineData) != 0 || o.Attr.Inline {
		t.Fatalf("chunked open: %+v", o)
	}
	_, err = e.commit(alice, f, 1, true, []byte("z"))
	wantKind(t, err, errs.Invalid) // no way back to inline but truncation
	e.reopen()
	if a := e.mustLookup(root, "f"); a.Inline || a.Size != 1<<30 {
		t.Fatalf("after reopen %+v", a)
	}
	_, err = e.commit(alice, inoRef(root), 0, false, nil)
	wantKind(t, err, errs.IsDir)
}

func TestCommitDropsPrivileges(t *testing.T) {
	e := newEnv(t)
	f := aliceFile(t, e, 0o6777)
	c := must[*weftpb.CommitReply](t)(e.commit(rootCreds(), f, 1, true, []byte("a")))
	if c.Attr.Mode&core.ModeBits != 0o6777 {
		t.Fatalf("root writer changed mode: %#o", c.Attr.Mode)
	}
	c = must[*weftpb.CommitReply](t)(e.commit(bob, f, 1, true, []byte("b")))
	if c.Attr.Mode&core.ModeBits != 0o777 {
		t.Fatalf("non-root writer: mode %#o, want 0777", c.Attr.Mode)
	}
	// setgid without group-exec stays.
	e.chmod(alice, f, 0o2666)
	c = must[*weftpb.CommitReply](t)(e.commit(bob, f, 1, true, []byte("c")))
	if c.Attr.Mode&core.ModeBits != 0o2666 {
		t.Fatalf("mode %#o, want 02666", c.Attr.Mode)
	}
}

// TestCommitExtents: a commit's written ranges join the file's record in
// its batch, a truncate trims them, bad ranges are refused and change
// nothing, and a file written in too many runs becomes untracked until it
// is truncated to 0 (core.Extents).
func TestCommitExtents(t *testing.T) {
	e := newEnv(t)
	f := aliceFile(t, e, 0o644)
	commit := func(size uint64, ext ...uint64) (*weftpb.CommitReply, error) {
		return e.Commit(ctx, &weftpb.CommitRequest{Creds: alice, Node: f, Size: size, Extents: ext})
	}
	wantExtents := func(what string, a *weftpb.Attr, untracked bool, want ...uint64) {
		t.Helper()
		if a.ExtentsUntracked != untracked || !slices.Equal(a.Extents, want) {
			t.Fatalf("%s: extents %v (untracked %v), want %v (untracked %v)", what, a.Extents, a.ExtentsUntracked, want, untracked)
		}
	}
	r := must[*weftpb.CommitReply](t)(commit(300, 0, 100))
	wantExtents("first commit", r.Attr, false, 0, 100)
	r = must[*weftpb.CommitReply](t)(commit(300, 200, 400)) // past the size: trimmed
	wantExtents("second commit", r.Attr, false, 0, 100, 200, 300)
	r = must[*weftpb.CommitReply](t)(commit(300, 100, 200))
	wantExtents("joining commit", r.Attr, false, 0, 300)

	for _, bad := range [][]uint64{{5}, {10, 10}, {20, 10}, {0, 10, 5, 20}} {
		_, err := commit(300, bad...)
		wantKind(t, err, errs.Invalid)
	}
	_, err := e.Commit(ctx, &weftpb.CommitRequest{Creds: alice, Node: f, Size: 3, Inline: true, InlineData: []byte("abc"), Extents: []uint64{0, 3}})
	wantKind(t, err, errs.Invalid)
	o := must[*weftpb.OpenReply](t)(e.openFile(alice, f, oRdOnly))
	wantExtents("after refused commits", o.Attr, false, 0, 300)

	sz := uint64(150)
	a := must[*weftpb.SetAttrReply](t)(e.SetAttr(ctx, &weftpb.SetAttrRequest{Creds: alice, Node: f, Valid: uint32(weftpb.SetAttrBits_SETATTR_SIZE), Size: sz}))
	wantExtents("truncate", a.Attr, false, 0, 150)

	// Another file: a truncate's pending drop fences f's growth here.
	f = fileRef(root, "g", e.create(alice, root, "g", 0o644).Ino)
	var many []uint64
	for i := range uint64(core.MaxExtents + 1) {
		many = append(many, 1000+i*10, 1000+i*10+5)
	}
	r = must[*weftpb.CommitReply](t)(commit(1<<20, many...))
	wantExtents("too many runs", r.Attr, true)
	r = must[*weftpb.CommitReply](t)(commit(1<<20, 0, 10))
	wantExtents("untracked stays", r.Attr, true)
	o = must[*weftpb.OpenReply](t)(e.openFile(alice, f, oRdWr|oTrunc))
	wantExtents("O_TRUNC: tracked again, from none", o.Attr, false)

	// A writer that wrote more runs than it sends says so.
	f = fileRef(root, "h", e.create(alice, root, "h", 0o644).Ino)
	r = must[*weftpb.CommitReply](t)(e.Commit(ctx, &weftpb.CommitRequest{Creds: alice, Node: f, Size: 100, Extents: []uint64{0, 10}, ExtentsOverflow: true}))
	wantExtents("overflow", r.Attr, true)
}
