package store

import (
	"bytes"
	"context"
	"testing"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestWriteReturnsOld: a write with return_old answers the bytes the range
// held (short where the chunk ended, none for a new chunk), and a store
// that lost chunks refuses it without writing.
func TestWriteReturnsOld(t *testing.T) {
	s := openStore(t, Config{Backend: "mem", MemLimit: 4 << 20})
	ctx := context.Background()
	swap := func(off int64, data string) (*weftpb.WriteChunkReply, []byte, error) {
		r, att, err := s.WriteChunkData(ctx, &weftpb.WriteChunkRequest{Chunk: cid(1, 2), Offset: off, ReturnOld: true}, []byte(data))
		if err != nil {
			return nil, nil, err
		}
		return r, bytes.Clone(att.Data), nil
	}
	r, old, err := swap(0, "hello")
	if err != nil || r.GetOldFound() || len(old) != 0 {
		t.Fatalf("a new chunk: reply %v, old %q, err %v; want not found, nothing", r, old, err)
	}
	r, old, err = swap(3, "p me!")
	if err != nil || !r.GetOldFound() || string(old) != "lo" {
		t.Fatalf("over the end: reply %v, old %q, err %v; want found, \"lo\"", r, old, err)
	}
	s.incomplete.Store(true)
	if _, _, err := swap(0, "XXXXX"); !errs.Is(err, errs.Lost) {
		t.Fatalf("an incomplete store: err %v; want Lost", err)
	}
	s.incomplete.Store(false)
	data, _, _, err := s.backend.Read(ChunkKey{Ino: 1, Index: 2}, 0, 100, func(n int) []byte { return make([]byte, n) })
	if err != nil || string(data) != "help me!" {
		t.Fatalf("chunk holds %q (err %v); want \"help me!\" (the refused write changed nothing)", data, err)
	}
}
