package store

import (
	"context"
	"testing"

	"github.com/weftfs/weft/internal/erasure"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestDeleteChunksKeepsParity: a truncate's deletion (from a data index
// above 0) leaves the parity units of an erasure-coded file; one from 0
// (the file is gone) or from a parity index takes them too.
func TestDeleteChunksKeepsParity(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		ctx := context.Background()
		p0, p1 := erasure.ParityBase, erasure.ParityBase+1
		for _, idx := range []uint64{0, 1, 2, p0, p1} {
			mustWrite(t, s, 7, idx, 0, []byte("unit"))
		}
		del := func(from uint64, before int64) uint64 {
			r, err := s.DeleteChunks(ctx, &weftpb.DeleteChunksRequest{Ino: 7, From: from, ChangedBeforeNs: before})
			if err != nil {
				t.Fatal(err)
			}
			return r.GetDeleted()
		}
		if n := del(2, 0); n != 1 {
			t.Fatalf("delete from 2: %d chunks, want 1 (chunk 2; parity stays)", n)
		}
		if n := del(1, 1<<62); n != 1 {
			t.Fatalf("late delete from 1: %d chunks, want 1 (chunk 1; parity stays)", n)
		}
		wantBytes(t, "parity unit 0", mustRead(t, s, 7, p0, 0, 4), []byte("unit"))
		if n := del(p1, 0); n != 1 {
			t.Fatalf("delete from parity unit 1: %d chunks, want 1", n)
		}
		if n := del(0, 0); n != 2 {
			t.Fatalf("delete from 0: %d chunks, want 2 (chunk 0 and parity unit 0)", n)
		}
	})
}
