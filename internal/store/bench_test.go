package store

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/weftfs/weft/proto/weftpb"
)

const benchIO = 1 << 20

func benchStore(b *testing.B, backend string) *Server {
	cfg := Config{Backend: backend, MemLimit: 2 * DefaultMaxChunkSize}
	if backend == "disk" {
		cfg.Dir = b.TempDir()
	}
	return openStore(b, cfg)
}

// BenchmarkWrite1MiB writes 1 MiB sequentially through a 64 MiB chunk,
// wrapping around (so after the first pass it overwrites).
func BenchmarkWrite1MiB(b *testing.B) {
	for _, bc := range []struct {
		backend string
		sync    bool
	}{{"mem", false}, {"disk", false}, {"disk", true}} {
		name := bc.backend
		if bc.sync {
			name += "-sync"
		}
		b.Run(name, func(b *testing.B) {
			s := benchStore(b, bc.backend)
			data := randBytes(rand.New(rand.NewPCG(1, 1)), benchIO)
			ctx := context.Background()
			b.SetBytes(benchIO)
			var off int64
			for b.Loop() {
				req := &weftpb.WriteChunkRequest{Chunk: cid(1, 0), Offset: off, Data: data, Sync: bc.sync}
				if _, err := s.WriteChunk(ctx, req); err != nil {
					b.Fatal(err)
				}
				off = (off + benchIO) % DefaultMaxChunkSize
			}
		})
	}
}

// BenchmarkRead1MiB reads 1 MiB sequentially from a full 64 MiB chunk.
func BenchmarkRead1MiB(b *testing.B) {
	for _, backend := range []string{"mem", "disk"} {
		b.Run(backend, func(b *testing.B) {
			s := benchStore(b, backend)
			data := randBytes(rand.New(rand.NewPCG(1, 1)), benchIO)
			for off := int64(0); off < DefaultMaxChunkSize; off += benchIO {
				mustWrite(b, s, 1, 0, off, data)
			}
			ctx := context.Background()
			b.SetBytes(benchIO)
			var off int64
			for b.Loop() {
				r, err := s.ReadChunk(ctx, &weftpb.ReadChunkRequest{Chunk: cid(1, 0), Offset: off, Length: benchIO})
				if err != nil || len(r.Data) != benchIO {
					b.Fatalf("read: %d bytes, %v", len(r.GetData()), err)
				}
				off = (off + benchIO) % DefaultMaxChunkSize
			}
		})
	}
}

// BenchmarkReadChunk4MiB reads whole 4 MiB chunks as the wire does (into a
// pooled buffer, released after use), over 64 chunks so that the data
// does not stay in the CPU's caches.
func BenchmarkReadChunk4MiB(b *testing.B) {
	const chunk, chunks = 4 << 20, 64
	s := benchStore(b, "disk")
	data := randBytes(rand.New(rand.NewPCG(1, 1)), chunk)
	for i := range uint64(chunks) {
		mustWrite(b, s, 1, i, 0, data)
	}
	ctx := context.Background()
	b.SetBytes(chunk)
	var i uint64
	for b.Loop() {
		_, att, err := s.ReadChunkData(ctx, &weftpb.ReadChunkRequest{Chunk: cid(1, i%chunks), Length: chunk}, nil)
		if err != nil || len(att.Data) != chunk {
			b.Fatalf("read: %d bytes, %v", len(att.Data), err)
		}
		att.Release()
		i++
	}
}
