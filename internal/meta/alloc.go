package meta

import (
	"encoding/binary"
	"sync"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

const (
	// firstSeq is the first sequence number a server hands out: 0 is never an
	// inode and server 0's 1 is the root.
	firstSeq = 2
	// inoBlock is how many sequence numbers one synced write reserves.
	inoBlock = 4096
	// maxSeq is the last sequence number an Ino can carry.
	maxSeq = 1<<(64-core.ServerBits) - 1
)

// inoAllocator hands out inode numbers without a disk write per create: it
// persists a high-water mark (keyInoHWM) a block ahead of what it hands out,
// with a synced write before the first number of the block is used. After a
// restart allocation resumes at the mark, so a number is never reused even if
// the operations that used it were lost; a crash wastes at most one block.
type inoAllocator struct {
	mu struct {
		sync.Mutex
		next, limit uint64
	}
	next uint64 // value at load, for the open log line only
}

func (a *inoAllocator) init(hwm uint64) {
	a.mu.Lock()
	a.mu.next, a.mu.limit = hwm, hwm
	a.mu.Unlock()
	a.next = hwm
}

func (a *inoAllocator) reserved() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.limit
}

// allocIno returns a new inode number. Holding the allocator's lock during the
// reservation's fsync (once per inoBlock creates) keeps numbers ordered.
func (s *Server) allocIno() (core.Ino, error) {
	a := &s.alloc
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.next >= a.mu.limit {
		limit := a.mu.next + inoBlock
		if limit > maxSeq {
			return 0, errs.New(errs.NoSpace, "meta alloc", "inode numbers of server %d exhausted", s.cfg.ID)
		}
		if err := s.setSync("meta alloc", keyInoHWM, binary.BigEndian.AppendUint64(nil, limit)); err != nil {
			return 0, err
		}
		a.mu.limit = limit
	}
	seq := a.mu.next
	a.mu.next++
	return core.MakeIno(s.cfg.ID, seq), nil
}
