package store

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Behaviour every backend shares, run against each.

func TestWriteReadRanges(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		data := []byte("hello, chunk store")
		mustWrite(t, s, 7, 0, 0, data)
		for _, tc := range []struct {
			off, n int64
			want   string
		}{
			{0, 100, "hello, chunk store"},
			{0, 5, "hello"},
			{7, 5, "chunk"},
			{13, 100, "store"},
			{18, 10, ""}, // at the end
			{50, 10, ""}, // past the end
			{3, 0, ""},
		} {
			wantBytes(t, fmt.Sprintf("read [%d,+%d)", tc.off, tc.n), mustRead(t, s, 7, 0, tc.off, tc.n), []byte(tc.want))
		}
		mustWrite(t, s, 7, 0, 7, []byte("CHUNK"))
		wantBytes(t, "overwrite", mustRead(t, s, 7, 0, 0, 100), []byte("hello, CHUNK store"))
		mustWrite(t, s, 7, 0, 13, []byte("storage!"))
		wantBytes(t, "overwrite and grow", mustRead(t, s, 7, 0, 0, 100), []byte("hello, CHUNK storage!"))
		// Other chunks of the same inode, and other inodes, are separate.
		wantBytes(t, "other index", mustRead(t, s, 7, 1, 0, 100), nil)
		wantBytes(t, "other ino", mustRead(t, s, 8, 0, 0, 100), nil)
	})
}

func TestHolesAndGaps(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		wantBytes(t, "missing chunk", mustRead(t, s, 1, 3, 0, 1000), nil)
		if n := chunkCount(t, s); n != 0 {
			t.Fatalf("reading a hole created a chunk: %d chunks", n)
		}
		// A write far beyond the end leaves a gap of zeros spanning blocks.
		const gapAt = 3*DefaultBlockSize + 100
		mustWrite(t, s, 1, 3, 10, []byte("head"))
		mustWrite(t, s, 1, 3, gapAt, []byte("tail"))
		got := mustRead(t, s, 1, 3, 0, gapAt+100)
		want := make([]byte, gapAt+4)
		copy(want[10:], "head")
		copy(want[gapAt:], "tail")
		wantBytes(t, "gap", got, want)
		wantBytes(t, "read inside the gap", mustRead(t, s, 1, 3, DefaultBlockSize, 10), make([]byte, 10))
		if n := chunkCount(t, s); n != 1 {
			t.Fatalf("chunks = %d, want 1", n)
		}
	})
}

func TestTruncate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		r := rand.New(rand.NewPCG(1, 2))
		data := randBytes(r, 3*DefaultBlockSize+777)
		mustWrite(t, s, 2, 0, 0, data)

		mustTruncate(t, s, 2, 0, DefaultBlockSize+5) // shrink into a block
		wantBytes(t, "shrink", mustRead(t, s, 2, 0, 0, 1<<20), data[:DefaultBlockSize+5])

		mustTruncate(t, s, 2, 0, 2*DefaultBlockSize+9) // extend with zeros
		want := append(bytes.Clone(data[:DefaultBlockSize+5]), make([]byte, DefaultBlockSize+4)...)
		wantBytes(t, "extend", mustRead(t, s, 2, 0, 0, 1<<20), want)

		mustTruncate(t, s, 2, 0, DefaultBlockSize) // shrink to a block boundary
		wantBytes(t, "shrink to boundary", mustRead(t, s, 2, 0, 0, 1<<20), data[:DefaultBlockSize])

		mustWrite(t, s, 2, 0, DefaultBlockSize+10, []byte("x")) // grow again after the shrinks
		want = append(bytes.Clone(data[:DefaultBlockSize]), make([]byte, 11)...)
		want[DefaultBlockSize+10] = 'x'
		wantBytes(t, "write after shrink", mustRead(t, s, 2, 0, 0, 1<<20), want)

		mustTruncate(t, s, 2, 0, 0)
		wantBytes(t, "truncate to 0", mustRead(t, s, 2, 0, 0, 100), nil)
		if n := chunkCount(t, s); n != 0 {
			t.Fatalf("chunks after truncate to 0 = %d, want 0", n)
		}
		// A missing chunk stays missing, truncated up or down: a made-up
		// chunk of zeros would hide a lost one (TestTruncateOfMissingChunkCreatesNothing).
		mustTruncate(t, s, 2, 5, 1000)
		mustTruncate(t, s, 2, 6, 0)
		if n := chunkCount(t, s); n != 0 {
			t.Fatalf("chunks = %d, want 0", n)
		}
	})
}

func TestDeleteChunks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		ctx := context.Background()
		for idx := range uint64(5) {
			mustWrite(t, s, 3, idx, 0, []byte{byte(idx)})
		}
		mustWrite(t, s, 4, 9, 0, []byte("other"))
		r, err := s.DeleteChunks(ctx, &weftpb.DeleteChunksRequest{Ino: 3, From: 2})
		if err != nil || r.GetDeleted() != 3 {
			t.Fatalf("DeleteChunks(3, from 2) = %d, %v; want 3", r.GetDeleted(), err)
		}
		for idx := range uint64(5) {
			got := mustRead(t, s, 3, idx, 0, 10)
			if (idx < 2) != (len(got) == 1) {
				t.Fatalf("chunk 3/%d after delete from 2: %q", idx, got)
			}
		}
		wantBytes(t, "other inode", mustRead(t, s, 4, 9, 0, 10), []byte("other"))
		r, err = s.DeleteChunks(ctx, &weftpb.DeleteChunksRequest{Ino: 3})
		if err != nil || r.GetDeleted() != 2 {
			t.Fatalf("DeleteChunks(3, from 0) = %d, %v; want 2", r.GetDeleted(), err)
		}
		r, err = s.DeleteChunks(ctx, &weftpb.DeleteChunksRequest{Ino: 3})
		if err != nil || r.GetDeleted() != 0 {
			t.Fatalf("DeleteChunks of nothing = %d, %v; want 0", r.GetDeleted(), err)
		}
		if n := chunkCount(t, s); n != 1 {
			t.Fatalf("chunks = %d, want 1", n)
		}
		mustWrite(t, s, 3, 0, 0, []byte("again")) // the inode can be written again
		wantBytes(t, "rewrite after delete", mustRead(t, s, 3, 0, 0, 10), []byte("again"))
	})
}

// TestLargeUnalignedWrites overwrites ranges that start and end inside CRC
// blocks, so every edge block goes through read-modify-write.
func TestLargeUnalignedWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		r := rand.New(rand.NewPCG(3, 4))
		model := make([]byte, 0)
		apply := func(off int64, data []byte) {
			mustWrite(t, s, 5, 1, off, data)
			if end := off + int64(len(data)); end > int64(len(model)) {
				model = append(model, make([]byte, end-int64(len(model)))...)
			}
			copy(model[off:], data)
		}
		apply(12345, randBytes(r, 1<<20+333))
		apply(70001, randBytes(r, 200000))
		apply(DefaultBlockSize-1, randBytes(r, 2))
		apply(int64(len(model))-10, randBytes(r, DefaultBlockSize)) // overlapping the end
		wantBytes(t, "whole chunk", mustRead(t, s, 5, 1, 0, 4<<20), model)
		for range 20 {
			off := r.Int64N(int64(len(model)))
			n := r.Int64N(3 * DefaultBlockSize)
			end := min(off+n, int64(len(model)))
			wantBytes(t, fmt.Sprintf("read [%d,+%d)", off, n), mustRead(t, s, 5, 1, off, n), model[off:end])
		}
	})
}

func TestConcurrentWriters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		const writers, rounds = 8, 20
		var wg sync.WaitGroup
		errc := make(chan error, writers)
		for w := range writers {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 9))
				ino, idx := uint64(100+w%2), uint64(w) // two inodes, a chunk per writer
				model := make([]byte, 0)
				for range rounds {
					off := r.Int64N(3 * DefaultBlockSize)
					data := randBytes(r, 1+r.IntN(DefaultBlockSize+100))
					if _, err := s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(ino, idx), Offset: off, Data: data}); err != nil {
						errc <- err
						return
					}
					if end := off + int64(len(data)); end > int64(len(model)) {
						model = append(model, make([]byte, end-int64(len(model)))...)
					}
					copy(model[off:], data)
					got, err := read(s, ino, idx, 0, 1<<20)
					if err != nil || !bytes.Equal(got, model) {
						errc <- fmt.Errorf("writer %d: read back %d bytes (err %v), want %d", w, len(got), err, len(model))
						return
					}
				}
			})
		}
		// Same-chunk writers are serialized: concurrent overlapping writes to
		// one chunk must leave one of the writes whole in every block.
		for w := range 4 {
			wg.Go(func() {
				data := bytes.Repeat([]byte{byte('a' + w)}, 2*DefaultBlockSize)
				for range 10 {
					if _, err := s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(200, 0), Data: data}); err != nil {
						errc <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		got := mustRead(t, s, 200, 0, 0, 1<<20)
		if len(got) != 2*DefaultBlockSize || !bytes.Equal(got, bytes.Repeat(got[:1], len(got))) {
			t.Fatalf("same-chunk writers interleaved: %d bytes, first %q", len(got), got[:1])
		}
	})
}

func TestInvalidRequests(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		ctx := context.Background()
		big := int64(DefaultMaxChunkSize)
		for name, call := range map[string]func() error{
			"nil write":      func() error { _, err := s.WriteChunk(ctx, nil); return err },
			"write no chunk": func() error { _, err := s.WriteChunk(ctx, &weftpb.WriteChunkRequest{Data: []byte("x")}); return err },
			"write negative off": func() error {
				_, err := s.WriteChunk(ctx, &weftpb.WriteChunkRequest{Chunk: cid(1, 0), Offset: -1})
				return err
			},
			"write past max": func() error {
				_, err := s.WriteChunk(ctx, &weftpb.WriteChunkRequest{Chunk: cid(1, 0), Offset: big, Data: []byte("x")})
				return err
			},
			"write huge off": func() error {
				_, err := s.WriteChunk(ctx, &weftpb.WriteChunkRequest{Chunk: cid(1, 0), Offset: 1<<63 - 1, Data: []byte("x")})
				return err
			},
			"nil read": func() error { _, err := s.ReadChunk(ctx, nil); return err },
			"read negative off": func() error {
				_, err := s.ReadChunk(ctx, &weftpb.ReadChunkRequest{Chunk: cid(1, 0), Offset: -5})
				return err
			},
			"read negative len": func() error {
				_, err := s.ReadChunk(ctx, &weftpb.ReadChunkRequest{Chunk: cid(1, 0), Length: -1})
				return err
			},
			"read huge off": func() error {
				_, err := s.ReadChunk(ctx, &weftpb.ReadChunkRequest{Chunk: cid(1, 0), Offset: 1<<63 - 1, Length: 10})
				return err
			},
			"nil truncate": func() error { _, err := s.TruncateChunk(ctx, nil); return err },
			"truncate negative": func() error {
				_, err := s.TruncateChunk(ctx, &weftpb.TruncateChunkRequest{Chunk: cid(1, 0), Size: -1})
				return err
			},
			"truncate beyond max": func() error {
				_, err := s.TruncateChunk(ctx, &weftpb.TruncateChunkRequest{Chunk: cid(1, 0), Size: big + 1})
				return err
			},
		} {
			wantKind(t, name, call(), errs.Invalid)
		}
		if n := chunkCount(t, s); n != 0 {
			t.Fatalf("invalid requests created %d chunks", n)
		}
		// Requests that are odd but valid.
		mustWrite(t, s, 1, 0, big-1, []byte("z")) // the very last byte
		if got := mustRead(t, s, 1, 0, big-1, 1<<62); string(got) != "z" {
			t.Fatalf("read of the last byte with a huge length = %q", got)
		}
		if _, err := s.DeleteChunks(ctx, nil); err != nil {
			t.Fatalf("nil delete: %v", err)
		}
		if _, err := s.SyncChunks(ctx, nil); err != nil {
			t.Fatalf("nil sync: %v", err)
		}
		if _, err := s.StatFS(ctx, nil); err != nil {
			t.Fatalf("nil statfs: %v", err)
		}
		mustWrite(t, s, 1, 1, 5, nil) // an empty write is a no-op
		if got := mustRead(t, s, 1, 1, 0, 10); len(got) != 0 {
			t.Fatalf("empty write made %d bytes", len(got))
		}
	})
}

func TestSyncAndClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		ctx := context.Background()
		if _, err := s.WriteChunk(ctx, &weftpb.WriteChunkRequest{Chunk: cid(9, 0), Data: []byte("durable"), Sync: true}); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, s, 9, 1, 0, []byte("later"))
		if _, err := s.SyncChunks(ctx, &weftpb.SyncChunksRequest{Ino: 9}); err != nil {
			t.Fatal(err)
		}
		if d, ok := s.backend.(*diskBackend); ok {
			d.mu.Lock()
			left := len(d.mu.dirty)
			d.mu.Unlock()
			if left != 0 {
				t.Fatalf("dirty set not empty after SyncChunks: %d inodes", left)
			}
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := s.ReadChunk(cctx, &weftpb.ReadChunkRequest{Chunk: cid(9, 0), Length: 10})
		wantKind(t, "canceled read", err, errs.Canceled)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = s.ReadChunk(ctx, &weftpb.ReadChunkRequest{Chunk: cid(9, 0), Length: 10})
		wantKind(t, "read after close", err, errs.Unavailable)
	})
}
