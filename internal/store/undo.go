package store

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// Undo of erasure-coded writes (WriteChunkRequest.keep_old, UndoWrite,
// ReleaseUndo). A data unit's write must be undoable until the stripe's
// parity writes succeeded: a data range left without its parity would make
// every later rebuild of the stripe's other units wrong. return_old does it
// by carrying the replaced bytes back to the writer on every write, which
// for a partial stripe is a third of the bytes it moves. keep_old keeps
// them here instead, in memory, for the rare write that fails: the writer
// either releases them (one-way, after its stripe's writes succeeded) or
// has them put back.
//
// What may be put back is exactly what the keep_old write replaced, and
// only onto what it wrote: each entry records the chunk's version, size and
// change time right after the write, and UndoWrite refuses (errs.NotExist)
// once any of them moved (another write, a truncate, a delete, a repair).
// One entry per chunk: a later keep_old write of the chunk replaces it.
// Entries live at most undoTTL (a writer that died never releases) and
// take at most undoLimit bytes in all; past that a write gets return_old's
// answer instead. A store restart loses them: its writer's rollback then
// fails and says so, as when return_old's reply was lost.

const (
	undoLimit = 64 << 20
	// undoTTL is well past a writer's upload timeout: the rollback of a
	// write that failed comes within it.
	undoTTL = 5 * time.Minute
)

// undoEntry is what a keep_old write replaced: its bytes read out before
// the write (old, in buf), or kept by the backend (kept, memkeep.go).
type undoEntry struct {
	k     ChunkKey
	id    uint64
	off   int64
	n     int64  // the write's length
	old   []byte // the range's old bytes; short where the chunk ended
	buf   []byte // old's pooled buffer
	kept  keptRange
	found bool // the chunk existed before the write
	after ChunkInfo
	at    time.Time
	el    *list.Element
}

func (e *undoEntry) release() {
	rpc.PutBuffer(e.buf)
	e.buf, e.old = nil, nil
	if e.kept != nil {
		e.kept.Release()
		e.kept = nil
	}
}

// size is the memory e holds, for the table's bound.
func (e *undoEntry) size() int64 {
	if e.kept != nil {
		return e.kept.Size()
	}
	return int64(cap(e.buf))
}

// oldBytes returns the range's old bytes, in e.buf: those the backend
// kept are checked against their CRCs and copied out now.
func (e *undoEntry) oldBytes() ([]byte, error) {
	if e.kept == nil {
		return e.old, nil
	}
	old, err := e.kept.Bytes(func(n int) []byte {
		e.buf = rpc.GetBuffer(n)
		return e.buf
	})
	if err != nil {
		return nil, err
	}
	e.kept.Release()
	e.kept, e.old = nil, old
	return old, nil
}

// undoTable holds the undo entries of a store.
type undoTable struct {
	now   func() time.Time
	limit int64
	mu    struct {
		sync.Mutex
		byKey map[ChunkKey]*undoEntry
		order list.List // of *undoEntry, oldest first
		bytes int64
	}
}

func newUndoTable(now func() time.Time, limit int64) *undoTable {
	t := &undoTable{now: now, limit: limit}
	t.mu.byKey = map[ChunkKey]*undoEntry{}
	return t
}

// keep stores e, replacing the chunk's earlier entry, unless there is no
// room for it.
func (t *undoTable) keep(e *undoEntry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if prev := t.mu.byKey[e.k]; prev != nil {
		t.removeLocked(prev)
	}
	t.expireLocked()
	if t.mu.bytes+e.size() > t.limit {
		return false
	}
	e.at = t.now()
	e.el = t.mu.order.PushBack(e)
	t.mu.byKey[e.k] = e
	t.mu.bytes += e.size()
	return true
}

// take removes and returns chunk k's entry if it is id's.
func (t *undoTable) take(k ChunkKey, id uint64) *undoEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	e := t.mu.byKey[k]
	if e == nil || e.id != id {
		return nil
	}
	t.removeLocked(e)
	return e
}

// drop releases chunk k's entry if it is id's.
func (t *undoTable) drop(k ChunkKey, id uint64) {
	if e := t.take(k, id); e != nil {
		e.release()
	}
}

// held returns the entries and bytes held (tests, metrics).
func (t *undoTable) held() (int, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.mu.byKey), t.mu.bytes
}

func (t *undoTable) removeLocked(e *undoEntry) {
	t.mu.order.Remove(e.el)
	delete(t.mu.byKey, e.k)
	t.mu.bytes -= e.size()
}

func (t *undoTable) expireLocked() {
	cut := t.now().Add(-undoTTL)
	for el := t.mu.order.Front(); el != nil; el = t.mu.order.Front() {
		e := el.Value.(*undoEntry)
		if e.at.After(cut) {
			return
		}
		t.removeLocked(e)
		e.release()
	}
}

// keepChunk is a write with keep_old (see above).
func (s *Server) keepChunk(ctx context.Context, req *weftpb.WriteChunkRequest, data []byte) (*weftpb.WriteChunkReply, rpc.Attachment, error) {
	const op = "write chunk"
	e := &undoEntry{id: req.GetKeepOld(), off: req.GetOffset(), n: int64(len(data))}
	kept := false
	hooks := writeHooks{after: func(k ChunkKey) {
		// Under the chunk's lock still: nothing changed the chunk between
		// the write and this look at it.
		info, ok, err := s.backend.Stat(k)
		if err != nil || !ok {
			return // cannot be recognised later: the bytes go back now
		}
		e.after = info
		kept = s.undo.keep(e)
	}}
	if kb, ok := s.backend.(keepingBackend); ok {
		// The backend keeps the old bytes as the write replaces them
		// (memkeep.go): nothing is read first.
		hooks.before = func(k ChunkKey) error {
			e.k = k
			return s.lostIfIncomplete(op, k) // its old bytes may be gone: nothing is written
		}
		hooks.write = func(k ChunkKey, off int64, data []byte, mode WriteMode) (err error) {
			e.kept, e.found, err = kb.WriteKeep(k, off, data, mode)
			return err
		}
	} else {
		hooks.before = func(k ChunkKey) error {
			if err := s.lostIfIncomplete(op, k); err != nil {
				return err // its old bytes may be gone: nothing is written
			}
			var err error
			e.k = k
			e.old, _, e.found, err = s.backend.Read(k, req.GetOffset(), int64(len(data)), func(n int) []byte {
				e.buf = rpc.GetBuffer(n)
				return e.buf
			})
			if err != nil {
				return s.failed(op, k, err)
			}
			return nil
		}
	}
	r, err := s.writeChunkThen(ctx, req, data, hooks)
	if err != nil {
		e.release()
		return nil, rpc.Attachment{}, err
	}
	r.OldFound = e.found
	if kept {
		r.OldKept = true
		return r, rpc.Attachment{}, nil
	}
	// No room to keep them: the old bytes go back as return_old's do.
	old, err := e.oldBytes()
	if err != nil {
		// The write is done but what it replaced is unreadable (a kept
		// block that failed its CRC): the writer cannot roll it back.
		e.release()
		return nil, rpc.Attachment{}, s.failed(op, e.k, err)
	}
	s.m.bytesRead.Add(float64(len(old)))
	return r, rpc.Attachment{Data: old, Release: e.release}, nil
}

// UndoWrite puts back what a keep_old write replaced (proto/store.proto).
func (s *Server) UndoWrite(ctx context.Context, req *weftpb.UndoWriteRequest, _ []byte) (*weftpb.UndoWriteReply, rpc.Attachment, error) {
	const op = "undo write"
	k, err := chunkKey(op, req.GetChunk())
	if err != nil {
		return nil, rpc.Attachment{}, err
	}
	if err := s.checkChunkCap(req.GetCapability(), k, auth.Write); err != nil {
		return nil, rpc.Attachment{}, err
	}
	done, err := s.begin(ctx, op)
	if err != nil {
		return nil, rpc.Attachment{}, err
	}
	defer done()
	unlock := s.locks.lockChunk(k, true)
	defer unlock()
	e := s.undo.take(k, req.GetUndoId())
	if e == nil {
		return nil, rpc.Attachment{}, errs.New(errs.NotExist, op, "chunk %v: no bytes kept for write %x (released, expired, or the store restarted)", k, req.GetUndoId())
	}
	info, ok, err := s.backend.Stat(k)
	if err != nil || !ok || info.Version != e.after.Version || info.Size != e.after.Size || !info.Mtime.Equal(e.after.Mtime) {
		e.release()
		return nil, rpc.Attachment{}, errs.New(errs.NotExist, op, "chunk %v changed since write %x: its old bytes cannot be put back", k, req.GetUndoId())
	}
	old, err := e.oldBytes()
	if err != nil {
		e.release()
		return nil, rpc.Attachment{}, s.failed(op, k, err)
	}
	// The range as it was: zeros past the old bytes, as a reader saw it.
	back := make([]byte, e.n)
	copy(back, old)
	if err := s.backend.Write(k, e.off, back, WriteThrough); err != nil {
		e.release()
		return nil, rpc.Attachment{}, s.failed(op, k, err)
	}
	return &weftpb.UndoWriteReply{}, rpc.Attachment{Data: old, Release: e.release}, nil
}

// ReleaseUndo drops what a keep_old write kept (one-way).
func (s *Server) ReleaseUndo(_ context.Context, req *weftpb.ReleaseUndo) {
	k, err := chunkKey("release undo", req.GetChunk())
	if err != nil {
		return
	}
	if s.checkChunkCap(req.GetCapability(), k, auth.Write) != nil {
		return // a capability the write itself passed; nothing to log
	}
	s.undo.drop(k, req.GetUndoId())
}
