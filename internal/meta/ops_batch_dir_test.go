package meta

import (
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// A written-back mkdir writes the entry and the new directory's record in
// one batch, with the parent's link; a create inside it works at once; an
// rmdir of a non-empty directory fails the batch, of an empty one removes
// it; a number in use or never handed out is refused.
func TestApplyBatchMkdirRmdir(t *testing.T) {
	e := newEnv(t)
	e.chmod(rootCreds(), inoRef(root), 0o777)
	r, err := e.AllocInos(ctx, &weftpb.AllocInosRequest{Count: 8})
	if err != nil {
		t.Fatal(err)
	}
	before := e.getattr(root).Nlink
	mk := func(name string, ino uint64) *weftpb.BatchOp {
		return &weftpb.BatchOp{Creds: alice, Mkdir: &weftpb.BatchMkdir{Name: name, Ino: ino, Mode: core.ModeDir | core.ModeSetuid | 0o750, TimeNs: 5}}
	}
	if _, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: []*weftpb.BatchOp{mk("d", r.First)}}); err != nil {
		t.Fatal(err)
	}
	d := e.mustLookup(root, "d")
	if d.Ino != r.First || d.Mode != core.ModeDir|0o750 || d.Nlink != 2 || d.Uid != 1000 {
		t.Fatalf("d: %+v", d)
	}
	if got := e.getattr(root).Nlink; got != before+1 {
		t.Errorf("root nlink %d, want %d", got, before+1)
	}
	// Inside it at once, in the directory's own batch.
	if _, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: r.First, Ops: []*weftpb.BatchOp{batchCreate(alice, "f", r.First+1)}}); err != nil {
		t.Fatal(err)
	}
	// Numbers in use, or never handed out, are refused.
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: []*weftpb.BatchOp{mk("e", r.First)}})
	wantKind(t, err, errs.Invalid)
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: []*weftpb.BatchOp{mk("e", r.First+1000)}})
	wantKind(t, err, errs.Invalid)
	rm := &weftpb.BatchOp{Creds: alice, Rmdir: &weftpb.BatchRmdir{Name: "d", Ino: r.First, TimeNs: 6}}
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: []*weftpb.BatchOp{rm}})
	wantKind(t, err, errs.NotEmpty)
	if _, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: r.First, Ops: []*weftpb.BatchOp{
		{Creds: alice, Unlink: &weftpb.BatchUnlink{Name: "f", Ino: r.First + 1, TimeNs: 6}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: []*weftpb.BatchOp{rm}}); err != nil {
		t.Fatal(err)
	}
	if got := e.names(root); len(got) != 0 {
		t.Errorf("root holds %v after the rmdir", got)
	}
	if got := e.getattr(root).Nlink; got != before {
		t.Errorf("root nlink %d after the rmdir, want %d", got, before)
	}
	// rmdir of a file is ENOTDIR.
	f := e.create(alice, root, "file", 0o644)
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: []*weftpb.BatchOp{
		{Creds: alice, Rmdir: &weftpb.BatchRmdir{Name: "file", Ino: f.Ino}}}})
	wantKind(t, err, errs.NotDir)
}

// A change of the batch's directory's own attributes applies in order with
// its entries' changes: a create before it does not move the mtime it sets.
func TestApplyBatchDirAttr(t *testing.T) {
	e := newEnv(t)
	e.chmod(rootCreds(), inoRef(root), 0o777)
	d := e.mkdir(alice, root, "d", 0o755)
	r, err := e.AllocInos(ctx, &weftpb.AllocInosRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	set := &weftpb.BatchOp{Creds: alice, DirSetattr: &weftpb.BatchSetAttr{Ino: d.Ino,
		Valid: uint32(weftpb.SetAttrBits_SETATTR_MODE | weftpb.SetAttrBits_SETATTR_MTIME), Mode: 0o700, MtimeNs: 7_000_000_000, TimeNs: 9_000_000_000}}
	if _, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: d.Ino, Ops: []*weftpb.BatchOp{
		batchCreate(alice, "f", r.First), set}}); err != nil {
		t.Fatal(err)
	}
	got := e.getattr(d.Ino)
	if got.Mode != core.ModeDir|0o700 || got.MtimeNs != 7_000_000_000 {
		t.Errorf("d after the batch: mode %#o mtime %d", got.Mode, got.MtimeNs)
	}
	if n := e.names(d.Ino); len(n) != 1 {
		t.Errorf("d holds %v", n)
	}
	// Another user may not; a named or foreign change is refused.
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: d.Ino, Ops: []*weftpb.BatchOp{{Creds: bob, DirSetattr: set.DirSetattr}}})
	wantKind(t, err, errs.NotPermitted)
	named := &weftpb.BatchOp{Creds: alice, DirSetattr: &weftpb.BatchSetAttr{Name: "f", Ino: d.Ino, Valid: uint32(weftpb.SetAttrBits_SETATTR_MODE), Mode: 0o755}}
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: d.Ino, Ops: []*weftpb.BatchOp{named}})
	wantKind(t, err, errs.Invalid)
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: []*weftpb.BatchOp{set}})
	wantKind(t, err, errs.Invalid)
}

// A batch of many mkdirs, and one of many rmdirs, applies: each new or
// removed directory's lock is taken from the start (a relock for each gave
// up after 64: "could not settle the locks it needs").
func TestApplyBatchManyDirs(t *testing.T) {
	e := newEnv(t)
	const n = 300
	r, err := e.AllocInos(ctx, &weftpb.AllocInosRequest{Count: n})
	if err != nil {
		t.Fatal(err)
	}
	var mk, rm []*weftpb.BatchOp
	for i := range uint64(n) {
		name := "d" + itoa(int(i))
		mk = append(mk, &weftpb.BatchOp{Creds: rootCreds(), Mkdir: &weftpb.BatchMkdir{Name: name, Ino: r.First + i, Mode: core.ModeDir | 0o755, TimeNs: 1}})
		rm = append(rm, &weftpb.BatchOp{Creds: rootCreds(), Rmdir: &weftpb.BatchRmdir{Name: name, Ino: r.First + i, TimeNs: 2}})
	}
	if _, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: mk}); err != nil {
		t.Fatalf("%d mkdirs: %v", n, err)
	}
	if got := len(e.names(root)); got != n {
		t.Fatalf("%d names after the mkdirs", got)
	}
	if _, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: root, Ops: rm}); err != nil {
		t.Fatalf("%d rmdirs: %v", n, err)
	}
	if got := len(e.names(root)); got != 0 {
		t.Fatalf("%d names after the rmdirs", got)
	}
}
