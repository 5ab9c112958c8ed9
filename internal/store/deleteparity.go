package store

import (
	"math"

	"github.com/weftfs/weft/internal/erasure"
	"github.com/weftfs/weft/proto/weftpb"
)

// Parity units of erasure-coded files (internal/erasure) have chunk indexes
// from erasure.ParityBase on, above every data index. A deletion "from
// index i" with 0 < i < ParityBase is a truncate's: it drops the data units
// past the new end and leaves the parity units, which the client that
// shrank the file brings in line itself; from 0 (the whole file) or from a
// parity index, everything from there goes, as before.

// keepsParity reports whether a deletion from index from leaves the parity
// units.
func keepsParity(from uint64) bool { return from > 0 && from < erasure.ParityBase }

// deleteData removes ino's chunks with indexes in [from, ParityBase), those
// last changed before the time before (Unix ns) when it is not 0. The
// caller holds the inode's stripe exclusively.
func (s *Server) deleteData(ino, from uint64, before int64) (*weftpb.DeleteChunksReply, error) {
	const op = "delete chunks"
	if before == 0 {
		before = math.MaxInt64
	}
	var n uint64
	q := ListQuery{Ino: ino, Limit: MaxListLimit, After: &ChunkKey{Ino: ino, Index: from - 1}}
	for {
		keys, more, err := s.backend.Keys(q)
		if err != nil {
			return nil, s.failed(op, ChunkKey{Ino: ino, Index: from}, err)
		}
		for _, k := range keys {
			if k.Index >= erasure.ParityBase {
				return &weftpb.DeleteChunksReply{Deleted: n}, nil
			}
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
