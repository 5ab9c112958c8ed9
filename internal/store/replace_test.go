package store

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestReplaceIsConditional checks the write repair copies with: it takes
// effect only on the version the pass listed, and leaves the chunk with
// exactly the copied bytes at the source's version.
func TestReplaceIsConditional(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		ctx := context.Background()
		mustWrite(t, s, 9, 0, 0, bytes.Repeat([]byte("old"), 30000))
		mustWrite(t, s, 9, 0, 5, []byte("x")) // version 2
		replace := func(expect, set uint64, data []byte) error {
			_, err := s.WriteChunk(ctx, &weftpb.WriteChunkRequest{
				Chunk: cid(9, 0), Data: data, Replace: true, ExpectVersion: expect, SetVersion: set,
			})
			return err
		}
		wantKind(t, "replace expecting version 1", replace(1, 7, []byte("new")), errs.Stale)
		wantKind(t, "replace of an absent chunk expecting version 2", replaceOther(ctx, s), errs.Stale)
		if err := replace(2, 7, []byte("new")); err != nil {
			t.Fatal(err)
		}
		r, err := s.ReadChunk(ctx, &weftpb.ReadChunkRequest{Chunk: cid(9, 0), Length: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if !r.GetFound() || r.GetVersion() != 7 || r.GetChunkSize() != 3 || string(r.GetData()) != "new" {
			t.Fatalf("after replace: found %v version %d size %d data %q", r.GetFound(), r.GetVersion(), r.GetChunkSize(), r.GetData())
		}
		// Into a store that lacks the chunk: expect 0.
		if err := replace(0, 3, []byte("y")); !errs.Is(err, errs.Stale) {
			t.Fatalf("replace expecting absence of a present chunk: %v", err)
		}
		if _, err := s.WriteChunk(ctx, &weftpb.WriteChunkRequest{Chunk: cid(9, 1), Data: []byte("z"), Replace: true, SetVersion: 4}); err != nil {
			t.Fatal(err)
		}
		wantBytes(t, "replaced absent chunk", mustRead(t, s, 9, 1, 0, 10), []byte("z"))
	})
}

func replaceOther(ctx context.Context, s *Server) error {
	_, err := s.WriteChunk(ctx, &weftpb.WriteChunkRequest{
		Chunk: cid(9, 5), Data: []byte("n"), Replace: true, ExpectVersion: 2, SetVersion: 3,
	})
	return err
}

// TestLateDropKeepsNewerChunks checks the fence of a truncate's late drop:
// chunks changed at or after the truncate stay, older ones go.
func TestLateDropKeepsNewerChunks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		ctx := context.Background()
		mustWrite(t, s, 4, 0, 0, []byte("old chunk 0"))
		mustWrite(t, s, 4, 2, 0, []byte("old chunk 2"))
		truncatedAt := afterClockTick()
		afterClockTick()
		mustWrite(t, s, 4, 1, 0, []byte("new chunk 1"))
		mustWrite(t, s, 4, 2, 0, []byte("new chunk 2"))
		r, err := s.DeleteChunks(ctx, &weftpb.DeleteChunksRequest{Ino: 4, ChangedBeforeNs: truncatedAt})
		if err != nil {
			t.Fatal(err)
		}
		if r.GetDeleted() != 1 {
			t.Fatalf("deleted %d chunks, want 1 (chunk 0)", r.GetDeleted())
		}
		if got, _ := read(s, 4, 0, 0, 100); len(got) != 0 {
			t.Fatalf("chunk 0 from before the truncate survived: %q", got)
		}
		wantBytes(t, "chunk 1", mustRead(t, s, 4, 1, 0, 100), []byte("new chunk 1"))
		wantBytes(t, "chunk 2", mustRead(t, s, 4, 2, 0, 100), []byte("new chunk 2"))
		_, err = s.TruncateChunk(ctx, &weftpb.TruncateChunkRequest{Chunk: cid(4, 1), Size: 3, ChangedBeforeNs: truncatedAt})
		if err != nil {
			t.Fatal(err)
		}
		wantBytes(t, "chunk 1 after a late cut", mustRead(t, s, 4, 1, 0, 100), []byte("new chunk 1"))
	})
}

// afterClockTick returns a time that file times stamped before the call
// are below and file times stamped after it are above. Here the wait is the
// point: file times come from a coarse clock that ticks every few ms.
func afterClockTick() int64 {
	t := time.Now()
	time.Sleep(20 * time.Millisecond)
	return t.Add(10 * time.Millisecond).UnixNano()
}
