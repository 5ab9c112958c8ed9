package store

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

const (
	// DefaultListLimit is the page of a ListChunks request that names none.
	DefaultListLimit = 1000
	// MaxListLimit caps one ListChunks page; a larger limit lists this many.
	MaxListLimit = 10000
)

// ChunkInfo describes one stored chunk for ListChunks.
type ChunkInfo struct {
	Key     ChunkKey
	Size    int64     // the chunk's recorded size
	Version uint64    // raised by every change; 0: the store cannot vouch for the chunk (bad header, lost tail)
	Mtime   time.Time // the chunk's last change
}

// ListQuery selects a page of chunks in (ino, index) order.
type ListQuery struct {
	After *ChunkKey // list the chunks after this one; nil: from the start
	Ino   uint64    // non-zero: only this file's chunks
	Limit int       // at most this many (> 0)
}

// includes reports whether k belongs to the query's range.
func (q ListQuery) includes(k ChunkKey) bool {
	if q.Ino != 0 && k.Ino != q.Ino {
		return false
	}
	return q.After == nil || keyLess(*q.After, k)
}

func keyLess(a, b ChunkKey) bool {
	return a.Ino < b.Ino || a.Ino == b.Ino && a.Index < b.Index
}

func compareKeys(a, b ChunkKey) int {
	switch {
	case keyLess(a, b):
		return -1
	case keyLess(b, a):
		return 1
	}
	return 0
}

// ListChunks lists the chunks the store holds in (ino, index) order after
// req.After, at most req.Limit of them (default DefaultListLimit, at most
// MaxListLimit), only req.Ino's when it is set. Each chunk is described under
// its lock, so its size and version belong together; a chunk deleted between
// the listing and its description is left out. A chunk the store cannot
// vouch for (a bad header, a file shorter than its recorded size) is listed
// with version 0, which no intact chunk has: repair treats it as stale.
func (s *Server) ListChunks(ctx context.Context, req *weftpb.ListChunksRequest) (*weftpb.ListChunksReply, error) {
	const op = "list chunks"
	q := ListQuery{Ino: req.GetIno(), Limit: int(req.GetLimit())}
	if a := req.GetAfter(); a != nil {
		q.After = &ChunkKey{Ino: a.GetIno(), Index: a.GetIndex()}
	}
	switch {
	case q.Limit == 0:
		q.Limit = DefaultListLimit
	case q.Limit > MaxListLimit:
		q.Limit = MaxListLimit
	}
	done, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer done()
	keys, more, err := s.backend.Keys(q)
	if err != nil {
		return nil, s.failed(op, ChunkKey{Ino: q.Ino}, err)
	}
	reply := &weftpb.ListChunksReply{More: more, Chunks: make([]*weftpb.ChunkInfo, 0, len(keys))}
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return nil, errs.Wrap(errs.Canceled, op, "", err)
		}
		info, ok, err := s.statChunk(k)
		if err != nil {
			return nil, s.failed(op, k, err)
		}
		if !ok {
			continue
		}
		reply.Chunks = append(reply.Chunks, &weftpb.ChunkInfo{
			Chunk:         chunkID(k),
			Size:          info.Size,
			Version:       info.Version,
			MtimeUnixNano: info.Mtime.UnixNano(),
		})
	}
	return reply, nil
}

func (s *Server) statChunk(k ChunkKey) (ChunkInfo, bool, error) {
	unlock := s.locks.lockChunk(k, false)
	defer unlock()
	return s.backend.Stat(k)
}

func chunkID(k ChunkKey) *weftpb.ChunkID { return &weftpb.ChunkID{Ino: k.Ino, Index: k.Index} }
