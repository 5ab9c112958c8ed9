package store

import (
	"context"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// The store methods. Each validates its request in full before touching the
// backend: no request content may make the server panic.

// WriteChunk writes req.Data at req.Offset, growing the chunk; with
// req.Sync it replies once the bytes are durable, with req.WriteBehind it
// starts writing them to the device.
func (s *Server) WriteChunk(ctx context.Context, req *weftpb.WriteChunkRequest) (*weftpb.WriteChunkReply, error) {
	return s.writeChunk(ctx, req, req.GetData())
}

// WriteChunkData is WriteChunk with the bytes in the request's attachment,
// as the wire carries them (the proto's data field is then empty).
func (s *Server) WriteChunkData(ctx context.Context, req *weftpb.WriteChunkRequest, data []byte) (*weftpb.WriteChunkReply, rpc.Attachment, error) {
	if len(req.GetData()) > 0 {
		if len(data) > 0 {
			return nil, rpc.Attachment{}, errs.New(errs.Invalid, "write chunk", "data both in the message and in the attachment")
		}
		data = req.GetData()
	}
	switch {
	case req.GetReplace():
	case req.GetKeepOld() != 0:
		return s.keepChunk(ctx, req, data)
	case req.GetReturnOld():
		return s.swapChunk(ctx, req, data)
	}
	r, err := s.writeChunk(ctx, req, data)
	return r, rpc.Attachment{}, err
}

func (s *Server) writeChunk(ctx context.Context, req *weftpb.WriteChunkRequest, data []byte) (*weftpb.WriteChunkReply, error) {
	return s.writeChunkThen(ctx, req, data, writeHooks{})
}

// swapChunk is a write with return_old: the range's bytes before the write
// come back as the attachment.
func (s *Server) swapChunk(ctx context.Context, req *weftpb.WriteChunkRequest, data []byte) (*weftpb.WriteChunkReply, rpc.Attachment, error) {
	const op = "write chunk"
	var buf, old []byte
	var found bool
	release := func() { rpc.PutBuffer(buf) }
	r, err := s.writeChunkThen(ctx, req, data, writeHooks{before: func(k ChunkKey) error {
		if err := s.lostIfIncomplete(op, k); err != nil {
			return err // its old bytes may be gone: nothing is written
		}
		var err error
		old, _, found, err = s.backend.Read(k, req.GetOffset(), int64(len(data)), func(n int) []byte {
			buf = rpc.GetBuffer(n)
			return buf
		})
		if err != nil {
			return s.failed(op, k, err)
		}
		return nil
	}})
	if err != nil {
		release()
		return nil, rpc.Attachment{}, err
	}
	r.OldFound = found
	s.m.bytesRead.Add(float64(len(old)))
	return r, rpc.Attachment{Data: old, Release: release}, nil
}

// writeHooks change what writeChunkThen does under the chunk's lock; each
// may be nil.
type writeHooks struct {
	before func(ChunkKey) error // just before the write; its error stops it
	// write writes the bytes instead of the backend's Write.
	write func(k ChunkKey, off int64, data []byte, mode WriteMode) error
	after func(ChunkKey) // once the bytes are written
}

// writeChunkThen is writeChunk, with hooks.
func (s *Server) writeChunkThen(ctx context.Context, req *weftpb.WriteChunkRequest, data []byte, hooks writeHooks) (*weftpb.WriteChunkReply, error) {
	const op = "write chunk"
	k, err := chunkKey(op, req.GetChunk())
	if err != nil {
		return nil, err
	}
	if err := s.checkChunkCap(req.GetCapability(), k, auth.Write); err != nil {
		return nil, err
	}
	off := req.GetOffset()
	if off < 0 || off > s.cfg.MaxChunkSize-int64(len(data)) {
		return nil, errs.New(errs.Invalid, op, "chunk %v: %d bytes at offset %d: beyond the maximum chunk size %d", k, len(data), off, s.cfg.MaxChunkSize)
	}
	done, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer done()
	unlock := s.locks.lockChunk(k, true)
	defer unlock()
	if req.GetReplace() {
		return s.replaceChunkLocked(k, req, data)
	}
	if hooks.before != nil {
		if err := hooks.before(k); err != nil {
			return nil, err
		}
	}
	mode := WriteBack
	switch {
	case req.GetSync():
		mode = WriteThrough
	case req.GetWriteBehind():
		mode = WriteBehind
	}
	write := s.backend.Write
	if hooks.write != nil {
		write = hooks.write
	}
	if err := write(k, off, data, mode); err != nil {
		return nil, s.failed(op, k, err)
	}
	s.m.bytesWritten.Add(float64(len(data)))
	if hooks.after != nil {
		hooks.after(k)
	}
	return &weftpb.WriteChunkReply{}, nil
}

// replaceChunkLocked makes data the whole content of chunk k at version
// req.SetVersion, if the chunk's version is req.ExpectVersion (0: absent,
// or a copy the store cannot vouch for): the copy a repair pass writes.
// Steps: remove, write, set the version. A crash in between leaves the chunk
// absent or at a lower version, which the next pass copies again.
func (s *Server) replaceChunkLocked(k ChunkKey, req *weftpb.WriteChunkRequest, data []byte) (*weftpb.WriteChunkReply, error) {
	const op = "replace chunk"
	switch {
	case req.GetOffset() != 0:
		return nil, errs.New(errs.Invalid, op, "chunk %v: a replace starts at offset 0, not %d", k, req.GetOffset())
	case req.GetSetVersion() == 0:
		return nil, errs.New(errs.Invalid, op, "chunk %v: a replace needs a version", k)
	}
	info, ok, err := s.backend.Stat(k)
	if err != nil {
		return nil, s.failed(op, k, err)
	}
	var cur uint64
	if ok {
		cur = info.Version
	}
	if cur != req.GetExpectVersion() {
		return nil, errs.New(errs.Stale, op, "chunk %v is at version %d, not %d: it changed since it was listed", k, cur, req.GetExpectVersion())
	}
	if err := s.backend.Truncate(k, 0); err != nil {
		return nil, s.failed(op, k, err)
	}
	if len(data) == 0 {
		return &weftpb.WriteChunkReply{}, nil
	}
	if err := s.backend.Write(k, 0, data, WriteThrough); err != nil {
		return nil, s.failed(op, k, err)
	}
	if err := s.backend.SetVersion(k, req.GetSetVersion()); err != nil {
		return nil, s.failed(op, k, err)
	}
	s.m.bytesWritten.Add(float64(len(data)))
	return &weftpb.WriteChunkReply{}, nil
}

// ReadChunk reads up to req.Length (at most MaxReadLength) bytes at
// req.Offset. The reply says whether the store holds the chunk and gives its
// recorded size and version: a short reply means the chunk ends, and a
// missing chunk is a hole (found false) on a complete store. A chunk that
// lost bytes is errs.Lost, so the client tries another replica.
func (s *Server) ReadChunk(ctx context.Context, req *weftpb.ReadChunkRequest) (*weftpb.ReadChunkReply, error) {
	data, reply, err := s.readChunk(ctx, req, func(n int) []byte { return make([]byte, n) })
	if err != nil {
		return nil, err
	}
	reply.Data = data
	return reply, nil
}

// ReadChunkData is ReadChunk with the bytes in the reply's attachment, as
// the wire carries them: read from the backend into a pooled buffer that
// goes back to the pool once the reply is written.
func (s *Server) ReadChunkData(ctx context.Context, req *weftpb.ReadChunkRequest, _ []byte) (*weftpb.ReadChunkReply, rpc.Attachment, error) {
	var buf []byte
	data, reply, err := s.readChunk(ctx, req, func(n int) []byte {
		buf = rpc.GetBuffer(n)
		return buf
	})
	release := func() { rpc.PutBuffer(buf) }
	if err != nil {
		release()
		return nil, rpc.Attachment{}, err
	}
	return reply, rpc.Attachment{Data: data, Release: release}, nil
}

// readChunk reads the bytes and returns them with a reply describing the
// chunk (its data left to the caller).
func (s *Server) readChunk(ctx context.Context, req *weftpb.ReadChunkRequest, alloc func(int) []byte) ([]byte, *weftpb.ReadChunkReply, error) {
	const op = "read chunk"
	k, err := chunkKey(op, req.GetChunk())
	if err != nil {
		return nil, nil, err
	}
	if err := s.checkChunkCap(req.GetCapability(), k, auth.Read); err != nil {
		return nil, nil, err
	}
	off, n := req.GetOffset(), req.GetLength()
	if off < 0 || n < 0 || off > s.cfg.MaxChunkSize {
		return nil, nil, errs.New(errs.Invalid, op, "chunk %v: %d bytes at offset %d", k, n, off)
	}
	n = min(n, MaxReadLength, s.cfg.MaxChunkSize-off)
	done, err := s.begin(ctx, op)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	if err := s.lostIfIncomplete(op, k); err != nil {
		return nil, nil, err
	}
	unlock := s.locks.lockChunk(k, false)
	defer unlock()
	data, info, found, err := s.backend.Read(k, off, n, alloc)
	if err != nil {
		return nil, nil, s.failed(op, k, err)
	}
	s.m.bytesRead.Add(float64(len(data)))
	return data, &weftpb.ReadChunkReply{Found: found, ChunkSize: info.Size, Version: info.Version}, nil
}

// TruncateChunk sets the chunk's size, dropping bytes or extending it with
// zeros; size 0 removes the chunk.
func (s *Server) TruncateChunk(ctx context.Context, req *weftpb.TruncateChunkRequest) (*weftpb.TruncateChunkReply, error) {
	const op = "truncate chunk"
	k, err := chunkKey(op, req.GetChunk())
	if err != nil {
		return nil, err
	}
	if err := s.checkChunkCap(req.GetCapability(), k, auth.Write|auth.Delete); err != nil {
		return nil, err
	}
	size := req.GetSize()
	if size < 0 || size > s.cfg.MaxChunkSize {
		return nil, errs.New(errs.Invalid, op, "chunk %v: size %d not in 0..%d", k, size, s.cfg.MaxChunkSize)
	}
	done, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer done()
	unlock := s.locks.lockChunk(k, true)
	defer unlock()
	info, ok, err := s.backend.Stat(k)
	switch {
	case err != nil:
		return nil, s.failed(op, k, err)
	case !ok:
		// Nothing to cut. A zero-filled chunk made here would answer a
		// lost chunk's reads with zeros (core.Extents).
		return &weftpb.TruncateChunkReply{}, nil
	case req.GetChangedBeforeNs() != 0 && info.Mtime.UnixNano() >= req.GetChangedBeforeNs():
		return &weftpb.TruncateChunkReply{}, nil // written since: not this truncate's to cut
	}
	if err := s.backend.Truncate(k, size); err != nil {
		return nil, s.failed(op, k, err)
	}
	return &weftpb.TruncateChunkReply{}, nil
}

// DeleteChunks removes every chunk of req.Ino with index >= req.From.
func (s *Server) DeleteChunks(ctx context.Context, req *weftpb.DeleteChunksRequest) (*weftpb.DeleteChunksReply, error) {
	const op = "delete chunks"
	ino := req.GetIno()
	if _, err := s.checkCap(req.GetCapability(), ino, req.GetFrom(), allChunks, auth.Write|auth.Delete); err != nil {
		return nil, err
	}
	done, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer done()
	unlock := s.locks.lockIno(ino, true)
	defer unlock()
	if keepsParity(req.GetFrom()) {
		return s.deleteData(ino, req.GetFrom(), req.GetChangedBeforeNs())
	}
	if before := req.GetChangedBeforeNs(); before != 0 {
		return s.deleteChangedBefore(ino, req.GetFrom(), before)
	}
	n, err := s.backend.Delete(ino, req.GetFrom())
	if err != nil {
		return nil, s.failed(op, ChunkKey{Ino: ino, Index: req.GetFrom()}, err)
	}
	return &weftpb.DeleteChunksReply{Deleted: n}, nil
}

// deleteChangedBefore removes ino's chunks from index from on that were
// last changed before the time before (Unix ns): a truncate's late drop,
// which must leave the chunks written after the truncate. The caller holds
// the inode's stripe exclusively.
func (s *Server) deleteChangedBefore(ino, from uint64, before int64) (*weftpb.DeleteChunksReply, error) {
	const op = "delete chunks"
	var n uint64
	q := ListQuery{Ino: ino, Limit: MaxListLimit}
	if from > 0 {
		q.After = &ChunkKey{Ino: ino, Index: from - 1} // the listing starts after it
	}
	for {
		keys, more, err := s.backend.Keys(q)
		if err != nil {
			return nil, s.failed(op, ChunkKey{Ino: ino, Index: from}, err)
		}
		for _, k := range keys {
			info, ok, err := s.backend.Stat(k)
			if err != nil {
				return nil, s.failed(op, k, err)
			}
			if !ok || info.Mtime.UnixNano() >= before {
				continue
			}
			if err := s.backend.Truncate(k, 0); err != nil {
				return nil, s.failed(op, k, err)
			}
			n++
		}
		if !more || len(keys) == 0 {
			return &weftpb.DeleteChunksReply{Deleted: n}, nil
		}
		q.After = &keys[len(keys)-1]
	}
}

// SyncChunks makes every chunk of req.Ino durable.
func (s *Server) SyncChunks(ctx context.Context, req *weftpb.SyncChunksRequest) (*weftpb.SyncChunksReply, error) {
	const op = "sync chunks"
	ino := req.GetIno()
	if _, err := s.checkCap(req.GetCapability(), ino, 0, allChunks, auth.Write); err != nil {
		return nil, err
	}
	done, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer done()
	// Shared: writes to the inode's chunks may go on; what was written
	// before this call is in the dirty set and gets flushed.
	unlock := s.locks.lockIno(ino, false)
	defer unlock()
	if err := s.backend.Sync(ino); err != nil {
		return nil, s.failed(op, ChunkKey{Ino: ino}, err)
	}
	return &weftpb.SyncChunksReply{}, nil
}

// SyncStore makes every chunk written so far durable.
func (s *Server) SyncStore(ctx context.Context, _ *weftpb.SyncStoreRequest) (*weftpb.Empty, error) {
	const op = "sync store"
	done, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.backend.SyncAll(); err != nil {
		return nil, s.failed(op, ChunkKey{}, err)
	}
	return &weftpb.Empty{}, nil
}

// StatFS reports the backend's capacity, use and chunk count, the store's
// identity and whether it is incomplete, and with want_stored the bytes its
// chunks take.
func (s *Server) StatFS(ctx context.Context, req *weftpb.StoreStatFSRequest) (*weftpb.StoreStatFSReply, error) {
	const op = "statfs"
	done, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer done()
	u, err := s.backend.Usage()
	if err != nil {
		return nil, err
	}
	id, incomplete := s.backend.Identity()
	reply := &weftpb.StoreStatFSReply{Capacity: u.Capacity, Used: u.Used, Chunks: u.Chunks, Id: id, Incomplete: incomplete}
	if req.GetWantStored() {
		reply.Stored = u.Used // a backend that holds nothing else (mem)
		if r, ok := s.backend.(storedBytesReporter); ok {
			if reply.Stored, err = r.StoredBytes(ctx); err != nil {
				return nil, err
			}
		}
	}
	return reply, nil
}
