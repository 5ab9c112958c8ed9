package store

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

func TestMemLimit(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := openStore(t, Config{Backend: "mem", MemLimit: 1000, Registry: reg})
	ctx := context.Background()
	mustWrite(t, s, 1, 0, 0, make([]byte, 600))
	mustWrite(t, s, 1, 1, 0, []byte(strings.Repeat("b", 300)))

	// 600 + 300 + 101 > 1000: refused, and nothing changes.
	_, err := s.WriteChunk(ctx, &weftpb.WriteChunkRequest{Chunk: cid(1, 1), Offset: 250, Data: []byte(strings.Repeat("c", 151))})
	wantKind(t, "write over the limit", err, errs.NoSpace)
	wantBytes(t, "chunk after refused write", mustRead(t, s, 1, 1, 0, 1000), []byte(strings.Repeat("b", 300)))
	_, err = s.WriteChunk(ctx, &weftpb.WriteChunkRequest{Chunk: cid(2, 0), Data: make([]byte, 101)})
	wantKind(t, "new chunk over the limit", err, errs.NoSpace)
	if got := mustRead(t, s, 2, 0, 0, 10); len(got) != 0 || chunkCount(t, s) != 2 {
		t.Fatalf("refused write created a chunk: %d bytes, %d chunks", len(got), chunkCount(t, s))
	}
	_, err = s.TruncateChunk(ctx, &weftpb.TruncateChunkRequest{Chunk: cid(1, 0), Size: 701})
	wantKind(t, "truncate over the limit", err, errs.NoSpace)
	if used := metricValue(t, reg, "weft_store_mem_used_bytes"); used != 900 {
		t.Fatalf("mem used = %v, want 900", used)
	}

	// Overwriting in place needs no new space; the exact limit is allowed.
	mustWrite(t, s, 1, 1, 0, []byte(strings.Repeat("d", 300)))
	mustWrite(t, s, 1, 1, 300, make([]byte, 100))

	mustTruncate(t, s, 1, 0, 100) // frees 500
	mustWrite(t, s, 2, 0, 0, make([]byte, 500))
	if _, err := s.DeleteChunks(ctx, &weftpb.DeleteChunksRequest{Ino: 2}); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, 3, 0, 0, make([]byte, 500))
	st, err := s.StatFS(ctx, nil)
	if err != nil || st.Capacity != 1000 || st.Used != 1000 || st.Chunks != 3 {
		t.Fatalf("statfs = %v, %v; want capacity 1000 used 1000 chunks 3", st, err)
	}
}

func TestMemCorruption(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := openStore(t, Config{Backend: "mem", MemLimit: 1 << 20, Registry: reg})
	data := make([]byte, 3*DefaultBlockSize)
	mustWrite(t, s, 6, 2, 0, data)
	if !s.backend.(*memBackend).flipByte(ChunkKey{6, 2}, DefaultBlockSize+7) {
		t.Fatal("flipByte found no chunk")
	}
	_, err := read(s, 6, 2, DefaultBlockSize, 10)
	wantKind(t, "read of the flipped block", err, errs.Corrupt)
	if !strings.Contains(err.Error(), "6/2") {
		t.Fatalf("corrupt error %q does not name the chunk", err)
	}
	mustRead(t, s, 6, 2, 0, DefaultBlockSize)   // the block before is fine
	mustRead(t, s, 6, 2, 2*DefaultBlockSize, 5) // and the one after
	_, err = s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(6, 2), Offset: DefaultBlockSize + 1, Data: []byte("x")})
	wantKind(t, "partial write into the corrupt block", err, errs.Corrupt)
	if n := metricValue(t, reg, "weft_store_corrupt_reads_total"); n != 2 {
		t.Fatalf("corrupt counter = %v, want 2", n)
	}
	mustWrite(t, s, 6, 2, DefaultBlockSize, make([]byte, DefaultBlockSize)) // a whole-block write heals
	wantBytes(t, "healed", mustRead(t, s, 6, 2, 0, 1<<20), data)
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []Config{
		{Backend: "tape"},
		{Backend: "mem"},
		{Backend: "mem", MemLimit: -1},
		{Backend: "disk"},
		{Backend: "mem", MemLimit: 1, MaxChunkSize: -1},
		{Backend: "mem", MemLimit: 1, ID: -1},
	} {
		if s, err := Open(cfg); !errs.Is(err, errs.Invalid) {
			if s != nil {
				s.Close()
			}
			t.Errorf("Open(%+v) = %v, want Invalid", cfg, err)
		}
	}
}

// Two stores may share a registry when their ids differ (weft cluster).
func TestSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	openStore(t, Config{ID: 1, Backend: "mem", MemLimit: 10, Registry: reg})
	openStore(t, Config{ID: 2, Backend: "mem", MemLimit: 10, Registry: reg})
	if _, err := Open(Config{ID: 1, Backend: "mem", MemLimit: 10, Registry: reg}); err == nil {
		t.Fatal("a second store with the same id registered its metrics")
	}
}
