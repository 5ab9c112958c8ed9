package store

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestKeepOldModel: keep_old writes at random offsets over 16-byte blocks
// (whole blocks, edges of blocks, past the end), each then released or
// undone, on both backends (the mem backend keeps the replaced blocks
// themselves, the disk backend reads the bytes out first), checked against
// a byte model: an undo returns exactly the bytes the write replaced (short
// where the chunk ended) and puts them back, zeros past the old end; a
// release leaves the new bytes. Writes after a release take the released
// blocks again (the mem backend's pool): no stale byte may show.
func TestKeepOldModel(t *testing.T) {
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			cfg := bc.cfg(t)
			cfg.blockSize, cfg.MaxChunkSize = 16, 1<<10
			s := openStore(t, cfg)
			r := rand.New(rand.NewPCG(1, 2))
			var model []byte
			for step := range 400 {
				off := int64(r.IntN(200))
				data := randBytes(r, 1+r.IntN(70))
				id := uint64(step + 1)
				before := bytes.Clone(model)
				rep, att := keepWrite(t, s, id, off, string(data))
				if !rep.GetOldKept() || len(att) != 0 {
					t.Fatalf("step %d: reply %v, %d bytes attached; want kept, nothing attached", step, rep, len(att))
				}
				if want := len(before) > 0; rep.GetOldFound() != want {
					t.Fatalf("step %d: old_found %v, want %v", step, rep.GetOldFound(), want)
				}
				end := off + int64(len(data))
				if int64(len(model)) < end {
					model = append(model, make([]byte, end-int64(len(model)))...)
				}
				copy(model[off:], data)
				if r.IntN(2) == 0 {
					s.ReleaseUndo(context.Background(), &weftpb.ReleaseUndo{Chunk: cid(1, 2), UndoId: id})
				} else {
					old, err := undo(s, id)
					if err != nil {
						t.Fatalf("step %d: undo: %v", step, err)
					}
					wantOld := []byte{}
					if off < int64(len(before)) {
						wantOld = before[off:min(end, int64(len(before)))]
					}
					wantBytes(t, "bytes the undo returned", old, wantOld)
					back := make([]byte, len(data))
					copy(back, wantOld)
					copy(model[off:], back)
				}
				wantBytes(t, "chunk", mustRead(t, s, 1, 2, 0, 1<<10), model)
			}
			if n, b := s.undo.held(); n != 0 || b != 0 {
				t.Fatalf("%d entries, %d bytes still held; want none", n, b)
			}
		})
	}
}

// TestKeepOldCorruptKept: old bytes the mem backend kept that no longer
// match their CRCs are never put back: the undo fails (Corrupt) and the
// chunk keeps the write's bytes.
func TestKeepOldCorruptKept(t *testing.T) {
	cfg := Config{Backend: "mem", MemLimit: 1 << 20, blockSize: 16}
	s := openStore(t, cfg)
	mustWrite(t, s, 1, 2, 0, bytes.Repeat([]byte("a"), 48))
	keepWrite(t, s, 3, 8, string(bytes.Repeat([]byte("B"), 32)))
	s.undo.mu.Lock()
	kept := s.undo.mu.byKey[ChunkKey{1, 2}].kept.(*memKept)
	kept.blocks[1][3] ^= 0xff
	s.undo.mu.Unlock()
	_, err := undo(s, 3)
	wantKind(t, "undo of corrupt kept bytes", err, errs.Corrupt)
	want := append(append(bytes.Repeat([]byte("a"), 8), bytes.Repeat([]byte("B"), 32)...), bytes.Repeat([]byte("a"), 8)...)
	wantBytes(t, "chunk after the refused undo", mustRead(t, s, 1, 2, 0, 100), want)
}
