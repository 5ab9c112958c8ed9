package meta

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/proto/weftpb"
)

// fakeStore answers the reclaimer's calls and records them; while down it
// refuses them, as a store that is unreachable.
type fakeStore struct {
	addr string
	mu   struct {
		sync.Mutex
		down    bool
		deletes []*weftpb.DeleteChunksRequest
		truncs  []*weftpb.TruncateChunkRequest
	}
}

func newFakeStore(t *testing.T) *fakeStore {
	t.Helper()
	f := &fakeStore{}
	mux := rpc.NewMux()
	rpc.Handle(mux, weftpb.MethodDeleteChunks, func(_ context.Context, req *weftpb.DeleteChunksRequest) (*weftpb.DeleteChunksReply, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.mu.down {
			return nil, errs.New(errs.Unavailable, "delete chunks", "store down")
		}
		f.mu.deletes = append(f.mu.deletes, req)
		return &weftpb.DeleteChunksReply{}, nil
	})
	rpc.Handle(mux, weftpb.MethodTruncateChunk, func(_ context.Context, req *weftpb.TruncateChunkRequest) (*weftpb.TruncateChunkReply, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.mu.down {
			return nil, errs.New(errs.Unavailable, "truncate chunk", "store down")
		}
		f.mu.truncs = append(f.mu.truncs, req)
		return &weftpb.TruncateChunkReply{}, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(mux, rpc.ServerOptions{})
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	f.addr = ln.Addr().String()
	return f
}

func (f *fakeStore) setDown(down bool) {
	f.mu.Lock()
	f.mu.down = down
	f.mu.Unlock()
}

func (f *fakeStore) deleted(ino uint64) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var froms []uint64
	for _, d := range f.mu.deletes {
		if d.Ino == ino {
			froms = append(froms, d.From)
		}
	}
	return froms
}

// reclaims returns the reclaim records on e's store.
func (e *env) reclaims() map[core.Ino][]*weftpb.ReclaimRecord {
	e.t.Helper()
	out := map[core.Ino][]*weftpb.ReclaimRecord{}
	if err := e.scanReclaims(func(_ []byte, ino core.Ino, r *weftpb.ReclaimRecord) { out[ino] = append(out[ino], r) }); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// chunked creates name in the root and commits it as a chunked file of size.
func (e *env) chunked(name string, size uint64) uint64 {
	e.t.Helper()
	a := e.create(rootCreds(), root, name, core.ModeFile|0o644)
	if _, err := e.Commit(ctx, &weftpb.CommitRequest{Creds: rootCreds(), Node: fileRef(root, name, a.Ino), Size: size}); err != nil {
		e.t.Fatal(err)
	}
	return a.Ino
}

// TestReclaimRecordedInTheBatch: an unlink, a truncate and an O_TRUNC of a
// chunked file each leave a durable reclaim record (it survives a restart
// of a server that has no stores to carry it out); an inline file's unlink
// leaves none.
func TestReclaimRecordedInTheBatch(t *testing.T) {
	e := newEnv(t)
	gone := e.chunked("gone", 10<<20)
	cut := e.chunked("cut", 10<<20)
	trunc := e.chunked("trunc", 10<<20)
	e.create(rootCreds(), root, "inline", core.ModeFile|0o644)
	must[*weftpb.UnlinkReply](t)(e.Unlink(ctx, &weftpb.UnlinkRequest{Creds: rootCreds(), Parent: root, Name: "gone"}))
	must[*weftpb.UnlinkReply](t)(e.Unlink(ctx, &weftpb.UnlinkRequest{Creds: rootCreds(), Parent: root, Name: "inline"}))
	must[*weftpb.SetAttrReply](t)(e.SetAttr(ctx, &weftpb.SetAttrRequest{Creds: rootCreds(), Node: fileRef(root, "cut", cut),
		Valid: uint32(weftpb.SetAttrBits_SETATTR_SIZE), Size: 5 << 20, ChunkSize: 1 << 20}))
	must[*weftpb.OpenReply](t)(e.Open(ctx, &weftpb.OpenRequest{Creds: rootCreds(), Node: fileRef(root, "trunc", trunc), Flags: oWrOnly | oTrunc}))
	e.reopen()
	got := e.reclaims()
	if len(got) != 3 {
		t.Fatalf("reclaim records for %d inodes, want 3: %v", len(got), got)
	}
	if r := got[core.Ino(gone)]; len(r) != 1 || r[0].Size != 0 || r[0].Truncate || r[0].Held {
		t.Errorf("unlink record: %v", r)
	}
	if r := got[core.Ino(cut)]; len(r) != 1 || r[0].Size != 5<<20 || !r[0].Truncate || r[0].ChunkSize != 1<<20 {
		t.Errorf("truncate record: %v", r)
	}
	if r := got[core.Ino(trunc)]; len(r) != 1 || r[0].Size != 0 || !r[0].Truncate {
		t.Errorf("O_TRUNC record: %v", r)
	}
	// The fence survives the restart: the truncated file cannot grow
	// while its drop is pending.
	_, err := e.Commit(ctx, &weftpb.CommitRequest{Creds: rootCreds(), Node: fileRef(root, "cut", cut), Size: 6 << 20})
	wantKind(t, err, errs.Unavailable)
	if _, err := e.Commit(ctx, &weftpb.CommitRequest{Creds: rootCreds(), Node: fileRef(root, "cut", cut), Size: 4 << 20}); err != nil {
		t.Fatalf("a commit within the truncated size: %v", err)
	}
}

// TestReclaimerRetriesUntilStoresConfirm: a record whose store is down is
// retried and deleted only after every store took the drop.
func TestReclaimerRetriesUntilStoresConfirm(t *testing.T) {
	a, b := newFakeStore(t), newFakeStore(t)
	b.setDown(true)
	e := newEnv(t, func(c *Config) { c.Stores = []string{a.addr, b.addr}; c.ReclaimRetryMax = 100 * time.Millisecond })
	ino := e.chunked("f", 9<<20)
	must[*weftpb.UnlinkReply](t)(e.Unlink(ctx, &weftpb.UnlinkRequest{Creds: rootCreds(), Parent: root, Name: "f"}))
	waitfor.Until(t, 10*time.Second, "store a never got the delete", func() bool { return len(a.deleted(ino)) > 0 })
	if len(e.reclaims()) != 1 {
		t.Fatal("the record went while store b had not confirmed")
	}
	b.setDown(false)
	waitfor.Until(t, 10*time.Second, "the record stayed after both stores confirmed", func() bool { return len(e.reclaims()) == 0 })
	if froms := b.deleted(ino); len(froms) == 0 || froms[0] != 0 {
		t.Fatalf("store b's deletes: %v, want from 0", froms)
	}
}

// TestTruncateDropsBeforeAnswering: with the stores up, a truncate's record
// is carried out and gone when the truncate answers, so a write the client
// sends next is never hit by a late drop, and growth is allowed at once.
// With a store down the truncate still answers (its size is committed) and
// growth past the new size waits for the drop.
func TestTruncateDropsBeforeAnswering(t *testing.T) {
	a := newFakeStore(t)
	e := newEnv(t, func(c *Config) { c.Stores = []string{a.addr}; c.ReclaimRetryMax = 50 * time.Millisecond })
	ino := e.chunked("f", 10<<20)
	ref := fileRef(root, "f", ino)
	setSize := func(size uint64) error {
		_, err := e.SetAttr(ctx, &weftpb.SetAttrRequest{Creds: rootCreds(), Node: ref,
			Valid: uint32(weftpb.SetAttrBits_SETATTR_SIZE), Size: size, ChunkSize: 1 << 20, Replication: 1})
		return err
	}
	if err := setSize(2<<20 + 5); err != nil {
		t.Fatal(err)
	}
	if n := len(e.reclaims()); n != 0 {
		t.Fatalf("%d records left after a truncate with the stores up", n)
	}
	if froms := a.deleted(ino); len(froms) != 1 || froms[0] != 3 {
		t.Fatalf("deletes %v, want chunks from 3", froms)
	}
	a.mu.Lock()
	truncs := a.mu.truncs
	a.mu.Unlock()
	if len(truncs) != 1 || truncs[0].Chunk.Index != 2 || truncs[0].Size != 5 {
		t.Fatalf("chunk truncates %v, want chunk 2 cut to 5 bytes", truncs)
	}
	if err := setSize(10 << 20); err != nil {
		t.Fatalf("growth right after a finished truncate: %v", err)
	}

	a.setDown(true)
	if err := setSize(1 << 20); err != nil {
		t.Fatalf("a truncate with the store down: %v", err)
	}
	wantKind(t, setSize(3<<20), errs.Unavailable)
	_, err := e.Commit(ctx, &weftpb.CommitRequest{Creds: rootCreds(), Node: ref, Size: 2 << 20})
	wantKind(t, err, errs.Unavailable)
	a.setDown(false)
	waitfor.Until(t, 10*time.Second, "growth still refused after the store came back", func() bool { return setSize(3<<20) == nil })
}

// TestHeldReclaimWaitsForRelease: an unlink by a client that has the file
// open holds the record until ReleaseReclaim.
func TestHeldReclaimWaitsForRelease(t *testing.T) {
	a := newFakeStore(t)
	e := newEnv(t, func(c *Config) { c.Stores = []string{a.addr} })
	ino := e.chunked("f", 3<<20)
	must[*weftpb.UnlinkReply](t)(e.Unlink(ctx, &weftpb.UnlinkRequest{Creds: rootCreds(), Parent: root, Name: "f", Open: []uint64{ino}}))
	e.reclaim.poke()
	// A reclaimer pass that ignored the hold would have deleted by now;
	// wait for one pass to have counted the record.
	waitfor.Until(t, 10*time.Second, "no pass counted the held record", func() bool { return e.reclaim.held.Load() == 1 })
	if len(a.deleted(ino)) != 0 {
		t.Fatal("a held record was carried out")
	}
	must[*weftpb.Empty](t)(e.ReleaseReclaim(ctx, &weftpb.ReleaseReclaimRequest{Ino: ino}))
	waitfor.Until(t, 10*time.Second, "the released record was not carried out", func() bool { return len(e.reclaims()) == 0 })
	if len(a.deleted(ino)) == 0 {
		t.Fatal("the record went without a delete")
	}
}
