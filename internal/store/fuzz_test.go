package store

import (
	"context"
	"testing"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// FuzzRequests feeds arbitrary numbers to every chunk method of both
// backends: none may panic, and every refusal must carry the kind it should.
// The seed corpus runs with plain go test.
func FuzzRequests(f *testing.F) {
	f.Add(int64(0), int64(10), int64(5), uint64(0), []byte("abc"))
	f.Add(int64(-1), int64(-1), int64(-1), uint64(1<<63), []byte{})
	f.Add(int64(1<<63-1), int64(1<<63-1), int64(1<<62), uint64(1<<64-1), []byte("x"))
	f.Add(int64(DefaultMaxChunkSize-1), int64(2), int64(DefaultMaxChunkSize), uint64(3), []byte("yz"))
	f.Add(int64(DefaultBlockSize-1), int64(DefaultBlockSize+2), int64(DefaultBlockSize+1), uint64(2), make([]byte, 300))
	stores := map[string]*Server{}
	for _, bc := range backendCases {
		stores[bc.name] = openStore(f, bc.cfg(f))
	}
	f.Fuzz(func(t *testing.T, off, n, size int64, index uint64, data []byte) {
		ctx := context.Background()
		allowed := func(what string, err error, kinds ...errs.Kind) {
			if err == nil {
				return
			}
			for _, k := range kinds {
				if errs.Is(err, k) {
					return
				}
			}
			t.Fatalf("%s: unexpected error %v", what, err)
		}
		for name, s := range stores {
			ch := cid(index%4, index)
			_, err := s.WriteChunk(ctx, &weftpb.WriteChunkRequest{Chunk: ch, Offset: off, Data: data})
			allowed(name+" write", err, errs.Invalid, errs.NoSpace)
			r, err := s.ReadChunk(ctx, &weftpb.ReadChunkRequest{Chunk: ch, Offset: off, Length: n})
			allowed(name+" read", err, errs.Invalid)
			if int64(len(r.GetData())) > max(n, 0) {
				t.Fatalf("%s: read of %d bytes returned %d", name, n, len(r.GetData()))
			}
			_, err = s.TruncateChunk(ctx, &weftpb.TruncateChunkRequest{Chunk: ch, Size: size})
			allowed(name+" truncate", err, errs.Invalid, errs.NoSpace)
			lr, err := s.ListChunks(ctx, &weftpb.ListChunksRequest{After: cid(uint64(off), uint64(n)), Limit: uint32(size), Ino: index % 3})
			allowed(name+" list", err)
			if len(lr.GetChunks()) > MaxListLimit {
				t.Fatalf("%s: list returned %d chunks", name, len(lr.GetChunks()))
			}
			_, err = s.DeleteChunks(ctx, &weftpb.DeleteChunksRequest{Ino: index % 4, From: index})
			allowed(name+" delete", err)
		}
	})
}
