package meta

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weftfs/weft/proto/weftpb"
)

// applyBatch applies ops to dir, failing the test or benchmark on error.
func (e *env) applyBatch(dir uint64, ops []*weftpb.BatchOp) {
	e.t.Helper()
	if _, err := e.ApplyBatch(ctx, &weftpb.ApplyBatchRequest{Dir: dir, Ops: ops}); err != nil {
		e.t.Fatal(err)
	}
}

// allocInos hands n inode numbers to the test as a client would take them.
func (e *env) allocInos(n int) uint64 {
	e.t.Helper()
	r, err := e.AllocInos(ctx, &weftpb.AllocInosRequest{Count: uint32(n)})
	if err != nil || int(r.Count) != n {
		e.t.Fatalf("alloc %d: %+v, %v", n, r, err)
	}
	return r.First
}

// The index follows written-back batches whose old entries it knows from
// the txn's own reads (index_hint.go): after creates, then unlinks,
// renames and chmods of what they created, in batches, it holds exactly
// what the records imply.
func TestApplyBatchIndexFromReadHints(t *testing.T) {
	e := newEnv(t)
	e.chmod(rootCreds(), inoRef(root), 0o777)
	const n = 64
	first := e.allocInos(n)
	var ops []*weftpb.BatchOp
	for i := range n {
		ops = append(ops, batchCreate(alice, "f"+itoa(i), first+uint64(i)))
	}
	e.applyBatch(root, ops)
	ops = ops[:0]
	for i := range n {
		name, ino := "f"+itoa(i), first+uint64(i)
		switch i % 3 {
		case 0:
			ops = append(ops, &weftpb.BatchOp{Creds: alice, Unlink: &weftpb.BatchUnlink{Name: name, Ino: ino}})
		case 1:
			ops = append(ops, &weftpb.BatchOp{Creds: alice, Rename: &weftpb.BatchRename{Src: name, Dst: "g" + itoa(i), Ino: ino, TimeNs: 2}})
		case 2:
			ops = append(ops, &weftpb.BatchOp{Creds: alice, Setattr: &weftpb.BatchSetAttr{Name: name, Ino: ino,
				Valid: uint32(weftpb.SetAttrBits_SETATTR_MODE), Mode: 0o600, TimeNs: 3}})
		}
	}
	e.applyBatch(root, ops)
	problems, err := checkIndexDB(e.db)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if got := len(e.names(root)); got != n-n/3-1 {
		t.Fatalf("%d names left, want %d", got, n-n/3-1)
	}
}

// BenchmarkApplyBatch is the meta server's CPU per written-back create and
// per unlink, in batches of 1024 (the client's wbMaxBatch) on an
// in-memory store: an op is a batch of creates and a batch of unlinks of
// the same files; ns/file is per file op.
func BenchmarkApplyBatch(b *testing.B) {
	const size = 1024
	e := newEnv(b, func(c *Config) { c.FS, c.Dir = vfs.NewMem(), "/meta" })
	e.chmod(rootCreds(), inoRef(root), 0o777)
	creates := make([]*weftpb.BatchOp, size)
	unlinks := make([]*weftpb.BatchOp, size)
	b.ResetTimer()
	for round := range b.N {
		b.StopTimer()
		first := e.allocInos(size)
		for i := range size {
			name, ino := "r"+itoa(round)+"."+itoa(i), first+uint64(i)
			creates[i] = batchCreate(alice, name, ino)
			unlinks[i] = &weftpb.BatchOp{Creds: alice, Unlink: &weftpb.BatchUnlink{Name: name, Ino: ino}}
		}
		b.StartTimer()
		e.applyBatch(root, creates)
		e.applyBatch(root, unlinks)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2*size), "ns/file")
}
