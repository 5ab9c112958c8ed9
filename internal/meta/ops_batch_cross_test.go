package meta

import (
	"slices"
	"testing"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// A rename into another directory of the server, queued in the source
// directory's batch (BatchRename.dst_dir), and a create folded with such
// a rename (BatchCreate.dir): applied in the batch's one txn, so a file is
// in exactly one of the two directories; a batch that fails after them
// leaves both directories as they were.
func TestApplyBatchCrossDir(t *testing.T) {
	e := newEnv(t)
	e.chmod(rootCreds(), inoRef(root), 0o777)
	src := e.mkdir(alice, root, "tmp", 0o755)
	dst := e.mkdir(alice, root, "cur", 0o755)
	old := e.create(alice, src.Ino, "old", 0o644)
	r, err := e.AllocInos(ctx, &weftpb.AllocInosRequest{Count: 4})
	if err != nil {
		t.Fatal(err)
	}
	moveOld := &weftpb.BatchOp{Creds: alice, Rename: &weftpb.BatchRename{Src: "old", Dst: "old", Ino: old.Ino, TimeNs: 5, DstDir: dst.Ino}}
	folded := batchCreate(alice, "new", r.First)
	folded.Create.Dir, folded.Create.MovedNs = dst.Ino, 6
	folded.Create.Then = []*weftpb.BatchOp{{Creds: alice, Write: &weftpb.BatchWrite{Name: "new", Ino: r.First, Data: []byte("hello"), MtimeNs: 2, TimeNs: 2}}}

	// The same name in the two directories is two names, not one named twice.
	// A failing op after them (a create over a name that exists) applies
	// nothing: the file stays in tmp, nothing is in cur.
	bad := []*weftpb.BatchOp{moveOld, folded, batchCreate(alice, "old", r.First+1)}
	bad[2].Create.Dir = dst.Ino
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: src.Ino, Ops: bad})
	if err == nil {
		t.Fatal("a batch creating cur/old after moving old there was applied")
	}
	if got := e.names(src.Ino); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("tmp after a refused batch: %v", got)
	}
	if got := e.names(dst.Ino); len(got) != 0 {
		t.Fatalf("cur after a refused batch: %v", got)
	}

	if _, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: src.Ino, Ops: []*weftpb.BatchOp{moveOld, folded}}); err != nil {
		t.Fatal(err)
	}
	if got := e.names(src.Ino); len(got) != 0 {
		t.Fatalf("tmp after the batch: %v", got)
	}
	if got := e.names(dst.Ino); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"new", "old"}) {
		t.Fatalf("cur after the batch: %v", got)
	}
	a := e.mustLookup(dst.Ino, "old")
	if a.Ino != old.Ino || a.Nlink != 1 || a.CtimeNs != 5 {
		t.Fatalf("cur/old: %+v", a)
	}
	n := e.mustLookup(dst.Ino, "new")
	if n.Ino != r.First || n.Size != 5 || n.CtimeNs != 6 || n.Nlink != 1 {
		t.Fatalf("cur/new: %+v", n)
	}
	// Both directories' times moved (tmp lost names, cur gained them), and
	// their entry counts follow: tmp can be removed, cur cannot.
	if d := e.getattr(src.Ino); d.MtimeNs < 6 {
		t.Errorf("tmp mtime %d, want the rename's 6", d.MtimeNs)
	}
	if d := e.getattr(dst.Ino); d.MtimeNs < 6 {
		t.Errorf("cur mtime %d, want the rename's 6", d.MtimeNs)
	}
	_, err = e.Rmdir(ctx, &weftpb.RmdirRequest{Creds: alice, Parent: root, Name: "cur"})
	wantKind(t, err, errs.NotEmpty)
	if _, err := e.Rmdir(ctx, &weftpb.RmdirRequest{Creds: alice, Parent: root, Name: "tmp"}); err != nil {
		t.Fatalf("rmdir of the emptied tmp: %v", err)
	}

	// A rename into a directory the caller may not write is refused.
	locked := e.mkdir(rootCreds(), root, "locked", 0o755)
	f := e.create(alice, dst.Ino, "f", 0o644)
	_, err = e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: dst.Ino, Ops: []*weftpb.BatchOp{
		{Creds: alice, Rename: &weftpb.BatchRename{Src: "f", Dst: "f", Ino: f.Ino, TimeNs: 7, DstDir: locked.Ino}}}})
	wantKind(t, err, errs.Permission)
	if got := e.names(locked.Ino); len(got) != 0 {
		t.Fatalf("locked after a refused rename: %v", got)
	}
}
