package store

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// backendCase opens a fresh store of one backend kind for a test.
type backendCase struct {
	name string
	cfg  func(t testing.TB) Config
}

var backendCases = []backendCase{
	{"mem", func(t testing.TB) Config { return Config{Backend: "mem", MemLimit: 512 << 20} }},
	{"disk", func(t testing.TB) Config { return Config{Backend: "disk", Dir: t.TempDir()} }},
}

func forEachBackend(t *testing.T, f func(t *testing.T, s *Server)) {
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			f(t, openStore(t, bc.cfg(t)))
		})
	}
}

func openStore(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func cid(ino, index uint64) *weftpb.ChunkID { return &weftpb.ChunkID{Ino: ino, Index: index} }

func mustWrite(t testing.TB, s *Server, ino, idx uint64, off int64, data []byte) {
	t.Helper()
	if _, err := s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(ino, idx), Offset: off, Data: data}); err != nil {
		t.Fatalf("write %d/%d at %d (%d bytes): %v", ino, idx, off, len(data), err)
	}
}

// read reads as the wire does, into a pooled buffer (which it copies out
// of and releases, so that later reads reuse it and a stale byte would
// show).
func read(s *Server, ino, idx uint64, off, n int64) ([]byte, error) {
	_, att, err := s.ReadChunkData(context.Background(), &weftpb.ReadChunkRequest{Chunk: cid(ino, idx), Offset: off, Length: n}, nil)
	if err != nil {
		return nil, err
	}
	var out []byte
	if att.Data != nil {
		out = bytes.Clone(att.Data)
	}
	att.Release()
	return out, nil
}

func mustRead(t testing.TB, s *Server, ino, idx uint64, off, n int64) []byte {
	t.Helper()
	b, err := read(s, ino, idx, off, n)
	if err != nil {
		t.Fatalf("read %d/%d at %d (%d bytes): %v", ino, idx, off, n, err)
	}
	return b
}

func mustTruncate(t testing.TB, s *Server, ino, idx uint64, size int64) {
	t.Helper()
	if _, err := s.TruncateChunk(context.Background(), &weftpb.TruncateChunkRequest{Chunk: cid(ino, idx), Size: size}); err != nil {
		t.Fatalf("truncate %d/%d to %d: %v", ino, idx, size, err)
	}
}

func chunkCount(t testing.TB, s *Server) uint64 {
	t.Helper()
	r, err := s.StatFS(context.Background(), &weftpb.StoreStatFSRequest{})
	if err != nil {
		t.Fatalf("statfs: %v", err)
	}
	return r.Chunks
}

// wantBytes compares without printing megabytes.
func wantBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	t.Fatalf("%s: got %d bytes, want %d; first difference at byte %d", what, len(got), len(want), i)
}

func wantKind(t testing.TB, what string, err error, k errs.Kind) {
	t.Helper()
	if !errs.Is(err, k) {
		t.Fatalf("%s: got error %v (kind %v), want kind %v", what, err, errs.KindOf(err), k)
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// metricValue returns the value of the single series named name in reg.
func metricValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}
