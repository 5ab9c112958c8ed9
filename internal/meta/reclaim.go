package meta

import (
	"context"
	"slices"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Chunk reclaim. The client writes a file's bytes to the stores and the meta
// server only records sizes, so bytes that an unlink, a rename over a file, a
// truncate or an O_TRUNC frees are still on the stores when the operation
// commits. Whatever must happen to them after a crash is written down in the
// same batch as its cause: a ReclaimRecord under "r" ino seq on the server
// that ran the operation (for a cross-server operation the coordinator: its
// batch is in the intent). The reclaimer (reclaimer.go) drops the bytes on
// every store, retrying until all of them confirm, and only then deletes the
// record.
//
// Open-unlinked files: a client keeps a file it has open usable after its
// last name goes (orphan.go in the client). Its unlink or rename lists the
// inodes it holds open; when the freed inode is among them the record is
// written held, and the reclaimer leaves it alone until that client's last
// close sends ReleaseReclaim. A client that dies first leaves the record
// held: weft fsck reports it and weft gc --release-held lets it go.
//
// Truncates: a truncate's record covers every byte at and past the new size
// (the tail of the chunk holding the new end and every chunk after it). The
// meta server drops them itself before it answers the truncate, then deletes
// the record, both before the reply: a write the client sends after the
// reply can never be hit by a late drop. When a store does not answer in
// time the record stays and the truncate still succeeds (its size change is
// committed); until the reclaimer finishes, commits and truncates that would
// grow the file past the record's size are refused (Unavailable), so the old
// bytes past it never reappear. What this leaves open: after such a
// truncate (one that answered with its drop pending), a client that writes
// past the new size, has its bytes dropped by the late drop and commits only
// after the drop finished loses those bytes. Closing it needs a version on
// the chunks (the stores') or the writer's view of the record in its commit.
//
// A record is worked by one goroutine at a time and re-read after it is
// claimed; its deletion is synced before anything is acknowledged that
// depends on it, so a drop never runs again once its record is gone.

// reclaimFreed records the chunks of n, whose last link this txn removed, for
// the reclaimer. open lists the inodes the caller holds open.
func (t *txn) reclaimFreed(n *node, freed bool, open []uint64) {
	if n.attr.Nlink != 0 || !core.IsRegular(n.attr.Mode) {
		return
	}
	held := slices.Contains(open, uint64(n.ino))
	if !freed && !held {
		return // an inline file has no chunks (unless its holder writes some)
	}
	t.putReclaim(n.ino, &weftpb.ReclaimRecord{Held: held, CapGeneration: n.attr.CapGeneration})
}

// reclaimTruncated records the bytes of a chunked file at and past size that
// a truncate freed. Chunk size and replication are the writer's layout.
func (t *txn) reclaimTruncated(ino core.Ino, wasChunked bool, oldSize, size uint64, chunkSize int64, repl uint32) {
	if !wasChunked || size >= oldSize {
		return
	}
	if chunkSize <= 0 {
		chunkSize = t.s.cfg.ChunkSize
	}
	if repl == 0 {
		repl = uint32(t.s.cfg.Replication)
	}
	t.putReclaim(ino, &weftpb.ReclaimRecord{Size: size, Truncate: true, ChunkSize: chunkSize, Replication: repl})
	t.truncated = append(t.truncated, ino)
}

func (t *txn) putReclaim(ino core.Ino, r *weftpb.ReclaimRecord) {
	r.CreatedNs = t.now
	if r.ChunkSize == 0 {
		r.ChunkSize = t.s.cfg.ChunkSize
	}
	if r.Replication == 0 {
		r.Replication = uint32(t.s.cfg.Replication)
	}
	t.b.Set(reclaimKey(ino, t.s.reclaim.nextSeq()), mustMarshal(r), nil)
	t.s.reclaim.recorded.Add(1)
}

// checkGrowth refuses to let ino grow past the size of a truncate whose
// drop is still pending: the old bytes there are still on some store.
func (s *Server) checkGrowth(op string, ino core.Ino, size uint64) error {
	floor, ok := s.reclaim.truncateFloor(ino)
	if ok && size > floor {
		return errs.New(errs.Unavailable, op,
			"inode %d: bytes past %d freed by a truncate are still being dropped from the stores; retry", ino, floor)
	}
	return nil
}

// afterTruncate runs after a truncate to size committed reclaim records for
// inos: it raises the fence against growth, then drops the bytes on the
// stores before the truncate answers, within ReclaimTimeout per call. A
// failed drop is logged and left to the reclaimer's retries: the truncate
// itself is committed and its record guarantees the drop.
func (s *Server) afterTruncate(ctx context.Context, inos []core.Ino, size uint64) {
	for _, ino := range inos {
		s.reclaim.noteTruncated(ino, size)
		if len(s.reclaim.stores) == 0 {
			continue
		}
		if err := s.reclaim.dropTruncated(ctx, ino); err != nil {
			s.log.Warn("meta: truncate could not drop its bytes yet; the reclaimer retries and growth waits",
				"ino", ino, "size", size, "err", err)
			s.reclaim.poke()
		}
	}
}
