package store

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// keepWrite is a keep_old write of chunk 1/2; it returns the reply and
// the attachment's bytes (return_old's answer, when the store kept none).
func keepWrite(t *testing.T, s *Server, id uint64, off int64, data string) (*weftpb.WriteChunkReply, []byte) {
	t.Helper()
	r, att, err := s.WriteChunkData(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(1, 2), Offset: off, KeepOld: id}, []byte(data))
	if err != nil {
		t.Fatalf("keep_old write %q at %d: %v", data, off, err)
	}
	if att.Release != nil {
		defer att.Release()
	}
	return r, bytes.Clone(att.Data)
}

func undo(s *Server, id uint64) ([]byte, error) {
	_, att, err := s.UndoWrite(context.Background(), &weftpb.UndoWriteRequest{Chunk: cid(1, 2), UndoId: id}, nil)
	if err != nil {
		return nil, err
	}
	if att.Release != nil {
		defer att.Release()
	}
	return bytes.Clone(att.Data), nil
}

// TestKeepOldUndo: a keep_old write carries nothing back, and UndoWrite
// puts back exactly the range it replaced (zeros past the old end) and
// returns those bytes, once; a released or superseded entry, or one whose
// chunk changed since, is not put back (NotExist) and the chunk keeps the
// later bytes.
func TestKeepOldUndo(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		r, att := keepWrite(t, s, 7, 0, "hello")
		if !r.GetOldKept() || r.GetOldFound() || len(att) != 0 {
			t.Fatalf("a new chunk: reply %v, attachment %q; want kept, not found, nothing attached", r, att)
		}
		r, att = keepWrite(t, s, 8, 3, "p me!")
		if !r.GetOldKept() || !r.GetOldFound() || len(att) != 0 {
			t.Fatalf("over the end: reply %v, attachment %q; want kept, found, nothing attached", r, att)
		}
		if _, err := undo(s, 7); !errs.Is(err, errs.NotExist) {
			t.Fatalf("undo of a superseded write: err %v; want NotExist", err)
		}
		old, err := undo(s, 8)
		if err != nil || string(old) != "lo" {
			t.Fatalf("undo: old %q, err %v; want \"lo\"", old, err)
		}
		wantBytes(t, "chunk after the undo", mustRead(t, s, 1, 2, 0, 100), []byte("hello\x00\x00\x00"))
		if _, err := undo(s, 8); !errs.Is(err, errs.NotExist) {
			t.Fatalf("a second undo: err %v; want NotExist", err)
		}

		keepWrite(t, s, 9, 0, "HE")
		mustWrite(t, s, 1, 2, 4, []byte("O")) // another write since
		if _, err := undo(s, 9); !errs.Is(err, errs.NotExist) {
			t.Fatalf("undo after a later write: err %v; want NotExist", err)
		}
		wantBytes(t, "chunk after the refused undo", mustRead(t, s, 1, 2, 0, 100), []byte("HEllO\x00\x00\x00"))

		keepWrite(t, s, 10, 0, "J")
		mustTruncate(t, s, 1, 2, 3)
		if _, err := undo(s, 10); !errs.Is(err, errs.NotExist) {
			t.Fatalf("undo after a truncate: err %v; want NotExist", err)
		}

		keepWrite(t, s, 11, 0, "K")
		s.ReleaseUndo(context.Background(), &weftpb.ReleaseUndo{Chunk: cid(1, 2), UndoId: 12}) // not its id
		s.ReleaseUndo(context.Background(), &weftpb.ReleaseUndo{Chunk: cid(1, 2), UndoId: 11})
		if n, b := s.undo.held(); n != 0 || b != 0 {
			t.Fatalf("after the release: %d entries, %d bytes held; want none", n, b)
		}
		if _, err := undo(s, 11); !errs.Is(err, errs.NotExist) {
			t.Fatalf("undo after the release: err %v; want NotExist", err)
		}
		wantBytes(t, "chunk after the release", mustRead(t, s, 1, 2, 0, 100), []byte("KEl"))
	})
}

// TestKeepOldFull: past its byte limit a store answers a keep_old write
// as return_old does (the old bytes attached), and an incomplete store
// refuses it without writing.
func TestKeepOldFull(t *testing.T) {
	s := openStore(t, Config{Backend: "mem", MemLimit: 4 << 20})
	s.undo = newUndoTable(time.Now, 0)
	mustWrite(t, s, 1, 2, 0, []byte("abcdef"))
	r, att := keepWrite(t, s, 5, 1, "XY")
	if r.GetOldKept() || !r.GetOldFound() || string(att) != "bc" {
		t.Fatalf("a full table: reply %v, attachment %q; want not kept, found, \"bc\" attached", r, att)
	}
	if _, err := undo(s, 5); !errs.Is(err, errs.NotExist) {
		t.Fatalf("undo of a write not kept: err %v; want NotExist", err)
	}
	s.incomplete.Store(true)
	_, _, err := s.WriteChunkData(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(1, 2), KeepOld: 6}, []byte("zz"))
	wantKind(t, "keep_old on an incomplete store", err, errs.Lost)
	s.incomplete.Store(false)
	wantBytes(t, "chunk after the refused write", mustRead(t, s, 1, 2, 0, 100), []byte("aXYdef"))
}

// TestUndoTableExpires: entries older than undoTTL are dropped (a writer
// that died never releases), and the bytes they held are free again.
func TestUndoTableExpires(t *testing.T) {
	now := time.Unix(1000, 0)
	tab := newUndoTable(func() time.Time { return now }, 1<<20)
	for i, k := range []ChunkKey{{1, 1}, {1, 2}} {
		if !tab.keep(&undoEntry{k: k, id: uint64(i + 1), buf: make([]byte, 4096)}) {
			t.Fatalf("entry %d not kept", i)
		}
		now = now.Add(undoTTL / 2)
	}
	if e := tab.take(ChunkKey{1, 1}, 1); e != nil {
		t.Fatalf("an entry older than undoTTL was still there")
	}
	if e := tab.take(ChunkKey{1, 2}, 2); e == nil {
		t.Fatalf("an entry younger than undoTTL was gone")
	}
	if n, b := tab.held(); n != 0 || b != 0 {
		t.Fatalf("%d entries, %d bytes held; want none", n, b)
	}
}
