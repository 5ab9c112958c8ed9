package meta

import (
	"testing"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

func (e *env) link(c *weftpb.Creds, n *weftpb.NodeRef, parent uint64, name string) (*weftpb.LinkReply, error) {
	return e.Link(ctx, &weftpb.LinkRequest{Creds: c, Node: n, NewParent: parent, NewName: name})
}

// A second link moves the attributes to a standalone record; dropping back
// to one link moves them into the remaining entry.
func TestHardLinkMovesAttributes(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o755)
	f := e.create(rootCreds(), root, "f", 0o644)
	must[*weftpb.Empty](t)(e.SetXattr(ctx, &weftpb.SetXattrRequest{Creds: rootCreds(), Node: fileRef(root, "f", f.Ino), Name: "user.k", Value: []byte("v")}))
	e.clock.Advance()
	l := must[*weftpb.LinkReply](t)(e.link(rootCreds(), fileRef(root, "f", f.Ino), d.Ino, "g"))
	if l.Attr.Nlink != 2 || l.Attr.Ino != f.Ino || l.Attr.CtimeNs != e.clock.Now().UnixNano() {
		t.Fatalf("link attr %+v", l.Attr)
	}
	if !e.hasInodeRecord(f.Ino) || e.entryRecord(root, "f").Attr != nil || e.entryRecord(d.Ino, "g").Attr != nil {
		t.Fatal("after link the attributes must be standalone and the entries pointers")
	}
	// Both names (and the ino alone) see one set of attributes.
	must[*weftpb.SetAttrReply](t)(e.SetAttr(ctx, &weftpb.SetAttrRequest{Creds: rootCreds(), Node: fileRef(d.Ino, "g", f.Ino), Valid: bMode, Mode: 0o600}))
	if a := e.mustLookup(root, "f"); a.Mode&0o777 != 0o600 || a.Nlink != 2 {
		t.Fatalf("f after chmod via g: %+v", a)
	}
	if a := e.getattr(f.Ino); a.Mode&0o777 != 0o600 {
		t.Fatalf("by ino: %+v", a)
	}
	must[*weftpb.LinkReply](t)(e.link(rootCreds(), inoRef(f.Ino), root, "h"))
	if a := e.getattr(f.Ino); a.Nlink != 3 {
		t.Fatalf("nlink %d, want 3", a.Nlink)
	}
	// Rename of one link keeps the link list right: unlink the others and
	// the attributes land in the renamed entry.
	must[*weftpb.RenameReply](t)(e.rename(rootCreds(), d.Ino, "g", d.Ino, "g2", 0))
	r := must[*weftpb.UnlinkReply](t)(e.unlink(rootCreds(), root, "f"))
	if r.Freed || r.Attr.Nlink != 2 {
		t.Fatalf("unlink of one of three links: %+v", r)
	}
	r = must[*weftpb.UnlinkReply](t)(e.unlink(rootCreds(), root, "h"))
	if r.Freed || r.Attr.Nlink != 1 {
		t.Fatalf("unlink of one of two links: %+v", r)
	}
	if e.hasInodeRecord(f.Ino) {
		t.Fatal("standalone record remains at one link")
	}
	ent := e.entryRecord(d.Ino, "g2")
	if ent.Attr == nil || ent.Attr.Nlink != 1 || ent.Attr.Mode&0o777 != 0o600 || len(ent.Attr.Links) != 0 {
		t.Fatalf("remaining entry %+v", ent)
	}
	v := must[*weftpb.GetXattrReply](t)(e.GetXattr(ctx, &weftpb.GetXattrRequest{Creds: rootCreds(), Node: fileRef(d.Ino, "g2", f.Ino), Name: "user.k"}))
	if string(v.Value) != "v" {
		t.Fatalf("xattr lost in the moves: %q", v.Value)
	}
	// And back again, then drop both.
	must[*weftpb.LinkReply](t)(e.link(rootCreds(), fileRef(d.Ino, "g2", f.Ino), root, "f"))
	must[*weftpb.UnlinkReply](t)(e.unlink(rootCreds(), d.Ino, "g2"))
	must[*weftpb.UnlinkReply](t)(e.unlink(rootCreds(), root, "f"))
	if n := countPrefix(t, e, xattrPrefix(0)[:1]); n != 0 {
		t.Fatalf("%d xattr keys remain", n)
	}
	st := must[*weftpb.StatFSReply](t)(e.StatFS(ctx, &weftpb.StatFSRequest{}))
	if st.Files != 2 {
		t.Fatalf("files %d, want 2", st.Files)
	}
}

func TestLinkErrors(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o755)
	f := e.create(rootCreds(), root, "f", 0o644)
	_, err := e.link(rootCreds(), inoRef(d.Ino), root, "d2")
	wantKind(t, err, errs.NotPermitted)
	_, err = e.link(rootCreds(), fileRef(root, "f", f.Ino), root, "d")
	wantKind(t, err, errs.Exist)
	_, err = e.link(alice, fileRef(root, "f", f.Ino), root, "x")
	wantKind(t, err, errs.Permission)
	_, err = e.link(rootCreds(), fileRef(root, "f", f.Ino+1), root, "x")
	wantKind(t, err, errs.Stale)
	_, err = e.link(rootCreds(), nil, root, "x")
	wantKind(t, err, errs.Invalid)
	// A failed link leaves the attributes embedded.
	if e.hasInodeRecord(f.Ino) {
		t.Fatal("failed link moved the attributes")
	}
}

// Replacing one of two links by rename moves the attributes back into the
// other link.
func TestRenameOverHardLink(t *testing.T) {
	e := newEnv(t)
	f := e.create(rootCreds(), root, "f", 0o644)
	must[*weftpb.LinkReply](t)(e.link(rootCreds(), fileRef(root, "f", f.Ino), root, "g"))
	e.create(rootCreds(), root, "x", 0o644)
	r := must[*weftpb.RenameReply](t)(e.rename(rootCreds(), root, "x", root, "g", 0))
	if r.Freed || r.Replaced.Ino != f.Ino || r.Replaced.Nlink != 1 {
		t.Fatalf("rename over a link: %+v", r)
	}
	if e.hasInodeRecord(f.Ino) || e.entryRecord(root, "f").Attr == nil {
		t.Fatal("attributes not back in the remaining entry")
	}
}
