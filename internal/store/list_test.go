package store

import (
	"context"
	"slices"
	"testing"

	"github.com/weftfs/weft/proto/weftpb"
)

// listAll pages through ListChunks with limit and returns every chunk.
func listAll(t *testing.T, s *Server, ino uint64, limit uint32) []*weftpb.ChunkInfo {
	t.Helper()
	var all []*weftpb.ChunkInfo
	var after *weftpb.ChunkID
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("ListChunks does not end")
		}
		r, err := s.ListChunks(context.Background(), &weftpb.ListChunksRequest{After: after, Limit: limit, Ino: ino})
		if err != nil {
			t.Fatalf("ListChunks: %v", err)
		}
		if limit > 0 && len(r.Chunks) > int(limit) {
			t.Fatalf("page of %d chunks, limit %d", len(r.Chunks), limit)
		}
		all = append(all, r.Chunks...)
		if !r.More {
			return all
		}
		if len(r.Chunks) == 0 {
			t.Fatal("an empty page says more")
		}
		after = r.Chunks[len(r.Chunks)-1].Chunk
	}
}

func TestListChunks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		// Inodes and indexes whose hex names and hash order differ from
		// their numeric order.
		want := []ChunkKey{{1, 0}, {1, 2}, {1, 0x10}, {1, 1 << 40}, {2, 5}, {0x100, 1}, {1 << 60, 0}}
		for i, k := range slices.Backward(want) {
			mustWrite(t, s, k.Ino, k.Index, int64(i), []byte("chunk"))
		}
		mustWrite(t, s, 9, 0, 0, []byte("gone"))
		if _, err := s.DeleteChunks(context.Background(), &weftpb.DeleteChunksRequest{Ino: 9}); err != nil {
			t.Fatal(err)
		}
		for _, limit := range []uint32{0, 1, 2, 3, 7, 100} {
			got := listAll(t, s, 0, limit)
			var keys []ChunkKey
			for _, c := range got {
				keys = append(keys, ChunkKey{c.Chunk.GetIno(), c.Chunk.GetIndex()})
			}
			if !slices.Equal(keys, want) {
				t.Fatalf("limit %d: listed %v, want %v", limit, keys, want)
			}
			for i, c := range got {
				if c.Size != int64(i)+5 || c.MtimeUnixNano == 0 {
					t.Fatalf("chunk %v: size %d mtime %d, want size %d and an mtime", keys[i], c.Size, c.MtimeUnixNano, int64(i)+5)
				}
			}
		}
		one := listAll(t, s, 1, 2)
		if len(one) != 4 || one[3].Chunk.GetIndex() != 1<<40 {
			t.Fatalf("ino 1: listed %v", one)
		}
		r, err := s.ListChunks(context.Background(), &weftpb.ListChunksRequest{After: cid(1, 2), Ino: 1})
		if err != nil || len(r.Chunks) != 2 || r.Chunks[0].Chunk.GetIndex() != 0x10 || r.More {
			t.Fatalf("ino 1 after index 2: %v, %v", r, err)
		}
		r, err = s.ListChunks(context.Background(), &weftpb.ListChunksRequest{After: cid(1<<60, 0)})
		if err != nil || len(r.Chunks) != 0 || r.More {
			t.Fatalf("after the last chunk: %v, %v", r, err)
		}
	})
}
