package meta

import (
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

func batchCreate(c *weftpb.Creds, name string, ino uint64) *weftpb.BatchOp {
	return &weftpb.BatchOp{Creds: c, Create: &weftpb.BatchCreate{Name: name, Ino: ino, Mode: core.ModeFile | 0o644, TimeNs: 1}}
}

// A batch applies all its ops or none: an op that fails (here a create of
// a name that exists, after other valid ops) leaves the directory as it
// was, and its error names the op and keeps its kind.
func TestApplyBatchAllOrNothing(t *testing.T) {
	e := newEnv(t)
	e.chmod(rootCreds(), inoRef(root), 0o777)
	old := e.create(alice, root, "old", 0o644)
	r, err := e.AllocInos(ctx, &weftpb.AllocInosRequest{Count: 8})
	if err != nil {
		t.Fatal(err)
	}
	if r.First == 0 || r.Count != 8 {
		t.Fatalf("alloc %+v", r)
	}
	// Numbers handed to the client are never handed out again.
	if a := e.create(alice, root, "other", 0o644); a.Ino >= r.First && a.Ino < r.First+8 {
		t.Fatalf("create got %d, inside the client's range from %d", a.Ino, r.First)
	}
	bad := []*weftpb.BatchOp{
		batchCreate(alice, "a", r.First),
		{Creds: alice, Unlink: &weftpb.BatchUnlink{Name: "old", Ino: old.Ino}},
		batchCreate(alice, "other", r.First+1),
	}
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: bad})
	wantKind(t, err, errs.Exist)
	if got := e.names(root); len(got) != 2 || got[0] != "old" || got[1] != "other" {
		t.Fatalf("after a failed batch: %v", got)
	}
	good := []*weftpb.BatchOp{
		batchCreate(alice, "a", r.First),
		{Creds: alice, Unlink: &weftpb.BatchUnlink{Name: "old", Ino: old.Ino}},
		{Creds: alice, Rename: &weftpb.BatchRename{Src: "other", Dst: "b", Ino: e.mustLookup(root, "other").Ino, TimeNs: 2}},
		{Creds: alice, Setattr: &weftpb.BatchSetAttr{Name: "a", Ino: r.First, Valid: uint32(weftpb.SetAttrBits_SETATTR_MODE), Mode: 0o600, TimeNs: 3}},
	}
	// The setattr names "a" twice in one batch: refused, nothing applied.
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: good})
	wantKind(t, err, errs.Invalid)
	if _, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: good[:3]}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: good[3:]}); err != nil {
		t.Fatal(err)
	}
	if got := e.names(root); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("after the batches: %v", got)
	}
	// weft status counts them.
	st, err := e.Status(ctx, &weftpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.WritebackBatches != 2 || st.WritebackOps != 4 || st.WritebackRefused != 2 {
		t.Errorf("status: %d batches of %d ops, %d refused; want 2 of 4, 2 refused", st.WritebackBatches, st.WritebackOps, st.WritebackRefused)
	}
	if a := e.mustLookup(root, "a"); a.Ino != r.First || a.Mode != core.ModeFile|0o600 || a.Uid != 1000 {
		t.Fatalf("a: %+v", a)
	}
}

// A batch is checked as its ops would be alone: permissions, inode
// numbers nobody handed out, setattr bits a batch may not carry.
func TestApplyBatchRefusals(t *testing.T) {
	e := newEnv(t)
	r, err := e.AllocInos(ctx, &weftpb.AllocInosRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The root is 0755 root's: alice may not create in it.
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: []*weftpb.BatchOp{batchCreate(alice, "x", r.First)}})
	wantKind(t, err, errs.Permission)
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: []*weftpb.BatchOp{batchCreate(rootCreds(), "x", r.First+100)}})
	wantKind(t, err, errs.Invalid)
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: []*weftpb.BatchOp{
		{Creds: rootCreds(), Setattr: &weftpb.BatchSetAttr{Name: "x", Ino: r.First, Valid: uint32(weftpb.SetAttrBits_SETATTR_SIZE)}}}})
	wantKind(t, err, errs.Invalid)
	_, err = e.AllocInos(ctx, &weftpb.AllocInosRequest{Count: 0})
	wantKind(t, err, errs.Invalid)
	if got := e.names(root); len(got) != 0 {
		t.Fatalf("refused batches left %v", got)
	}
}

// Changes folded into a create apply in order to the new file, each
// checked as if it came alone: a write, an owner change the rules allow,
// times and mode. One the rules refuse (a chgrp to a group the owner is
// not in), a change of another name, or content past the inline limit
// fails the batch, which changes nothing. A written-back commit of an
// existing file needs the name to still hold the inode.
func TestApplyBatchFoldedChanges(t *testing.T) {
	e := newEnv(t)
	e.chmod(rootCreds(), inoRef(root), 0o777)
	r, err := e.AllocInos(ctx, &weftpb.AllocInosRequest{Count: 4})
	if err != nil {
		t.Fatal(err)
	}
	carol := user(1002, 1002, 1002, 50)
	create := func(name string, ino uint64, then ...*weftpb.BatchOp) []*weftpb.BatchOp {
		op := batchCreate(carol, name, ino)
		op.Create.Then = then
		return []*weftpb.BatchOp{op}
	}
	write := func(name string, ino uint64, data string, mtime int64) *weftpb.BatchOp {
		return &weftpb.BatchOp{Creds: carol, Write: &weftpb.BatchWrite{Name: name, Ino: ino, Data: []byte(data), MtimeNs: mtime, TimeNs: 10}}
	}
	chgrp := func(name string, ino uint64, gid uint32) *weftpb.BatchOp {
		return &weftpb.BatchOp{Creds: carol, Owner: &weftpb.BatchOwner{Name: name, Ino: ino, Valid: uint32(weftpb.SetAttrBits_SETATTR_GID), Gid: gid, TimeNs: 11}}
	}
	stamp := &weftpb.BatchOp{Creds: carol, Setattr: &weftpb.BatchSetAttr{Name: "a", Ino: r.First,
		Valid: uint32(weftpb.SetAttrBits_SETATTR_MTIME | weftpb.SetAttrBits_SETATTR_MODE), Mode: 0o640, MtimeNs: 7, TimeNs: 12}}

	for _, bad := range []struct {
		ops  []*weftpb.BatchOp
		kind errs.Kind
	}{
		{create("a", r.First, write("a", r.First, "x", 5), chgrp("a", r.First, 99)), errs.NotPermitted},
		{create("a", r.First, write("b", r.First, "x", 5)), errs.Invalid},
		{create("a", r.First, write("a", r.First+1, "x", 5)), errs.Invalid},
		{create("a", r.First, write("a", r.First, string(make([]byte, 64<<10+1)), 5)), errs.Invalid},
	} {
		_, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: bad.ops})
		wantKind(t, err, bad.kind)
	}
	if got := e.names(root); len(got) != 0 {
		t.Fatalf("refused batches left %v", got)
	}
	ops := create("a", r.First, write("a", r.First, "hello", 5), chgrp("a", r.First, 50), stamp)
	if _, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: ops}); err != nil {
		t.Fatal(err)
	}
	a := e.mustLookup(root, "a")
	if a.Size != 5 || a.Gid != 50 || a.Uid != 1002 || a.Mode != core.ModeFile|0o640 || a.MtimeNs != 7 || a.CtimeNs != 12 {
		t.Errorf("folded create: %+v", a)
	}
	o, err := e.openFile(carol, fileRef(root, "a", r.First), oRdOnly)
	if err != nil || string(o.InlineData) != "hello" {
		t.Fatalf("content %q, %v", o.GetInlineData(), err)
	}
	// A commit of the file as its own op; then one naming an inode the
	// name no longer holds is stale.
	if _, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: []*weftpb.BatchOp{write("a", r.First, "again", 20)}}); err != nil {
		t.Fatal(err)
	}
	if a := e.mustLookup(root, "a"); a.Size != 5 || a.MtimeNs != 20 {
		t.Errorf("after the written-back commit: %+v", a)
	}
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: []*weftpb.BatchOp{write("a", r.First+1, "other", 30)}})
	wantKind(t, err, errs.Stale)
	// Another user may not write a 0640 file it does not own.
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: []*weftpb.BatchOp{
		{Creds: bob, Write: &weftpb.BatchWrite{Name: "a", Ino: r.First, Data: []byte("bob"), TimeNs: 40}}}})
	wantKind(t, err, errs.Permission)
}
