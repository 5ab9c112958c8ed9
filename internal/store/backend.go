package store

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/weftfs/weft/internal/errs"
)

// ChunkKey names chunk Index of file Ino.
type ChunkKey struct{ Ino, Index uint64 }

func (k ChunkKey) String() string { return fmt.Sprintf("%x/%d", k.Ino, k.Index) }

// WriteMode says how far a write's bytes must go before Write returns.
type WriteMode uint8

const (
	// WriteBack holds the bytes (in the page cache, for disk); SyncChunks
	// makes them durable later.
	WriteBack WriteMode = iota
	// WriteBehind is WriteBack, and the device starts writing the bytes
	// now without Write waiting for them, so that the sync which follows
	// soon has less to wait for.
	WriteBehind
	// WriteThrough makes the bytes durable before Write returns.
	WriteThrough
)

// Usage is what StatFS reports.
type Usage struct {
	Capacity uint64 // bytes the backend may hold
	Used     uint64 // bytes in use
	Chunks   uint64 // chunks stored
}

// Backend holds chunk bytes. The Server has validated every argument (offsets
// within the layout's maximum chunk size) and holds the locks described in
// the package doc, so a Backend never sees two concurrent changes of one
// chunk, nor a DeleteChunks concurrent with anything else on that inode.
//
// Errors carry a kind: errs.Corrupt for a checksum mismatch, errs.Lost for
// a chunk shorter than its recorded size, errs.NoSpace when the backend is
// full, errs.IO for a failing device.
type Backend interface {
	// Write writes data at off, growing the chunk (a gap reads as zeros);
	// mode says how durable the bytes are when it returns.
	Write(k ChunkKey, off int64, data []byte, mode WriteMode) error
	// Read returns up to n bytes at off, fewer if the chunk ends, and the
	// chunk's size and version; false if it does not exist. The bytes live
	// in one buffer the backend gets from alloc (at most once, of at most n
	// plus two blocks), possibly at an offset within it; every byte of the
	// result has been written. A chunk that lost bytes below its recorded
	// size is errs.Lost.
	Read(k ChunkKey, off, n int64, alloc func(int) []byte) ([]byte, ChunkInfo, bool, error)
	// Truncate sets the chunk's size; size 0 removes it.
	Truncate(k ChunkKey, size int64) error
	// SetVersion gives an existing chunk version v, durably; v is not below
	// its version (repair: a copy takes its source's version).
	SetVersion(k ChunkKey, v uint64) error
	// Delete removes every chunk of ino with index >= from and returns how
	// many there were.
	Delete(ino, from uint64) (uint64, error)
	// Sync makes every chunk of ino written since its last sync durable.
	Sync(ino uint64) error
	// SyncAll makes every chunk written since its last sync durable.
	SyncAll() error
	// Usage reports capacity, use and chunk count.
	Usage() (Usage, error)
	// Keys returns the keys of the chunks q selects, in (ino, index) order,
	// at most q.Limit of them, and whether more follow. It takes no chunk
	// locks: a chunk it names may be gone by the time it is looked at.
	Keys(q ListQuery) ([]ChunkKey, bool, error)
	// Stat describes chunk k; false if it does not exist.
	Stat(k ChunkKey) (ChunkInfo, bool, error)
	// Identity returns the id of this formatting of the store and whether
	// the store is incomplete: it may lack chunks it should hold.
	Identity() (id string, incomplete bool)
	// MarkComplete records, durably for disk, that the store is complete.
	MarkComplete() error
	// ChunkCount is the number of chunks, cheaply (for a gauge).
	ChunkCount() int64
	Close() error
}

// corruptErr reports a checksum mismatch in block b of chunk k.
func corruptErr(op string, k ChunkKey, b int64) error {
	return errs.New(errs.Corrupt, op, "chunk %v (ino %d index %d): block %d fails its checksum", k, k.Ino, k.Index, b)
}

// ioErr wraps a failed system call on subject with the kind its errno
// means: a full disk is errs.NoSpace (ENOSPC at the client's mount), a file
// too large errs.TooBig, anything else errs.IO.
func ioErr(op, subject string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errs.Wrap(errs.NoSpace, op, subject, err)
	case errors.Is(err, syscall.EFBIG):
		return errs.Wrap(errs.TooBig, op, subject, err)
	}
	return errs.Wrap(errs.IO, op, subject, err)
}
