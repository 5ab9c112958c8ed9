package store

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// memBackend keeps chunks in RAM (the Network RamDisk backend), bounded by a
// byte limit on the sum of chunk sizes. Nothing survives Close.
type memBackend struct {
	now   func() time.Time // stamps a chunk's changes
	bs    int64
	limit int64
	used  atomic.Int64 // sum of chunk sizes
	count atomic.Int64
	id    string
	spare blockPool // blocks released by undo entries (memkeep.go)
	mu    struct {
		sync.Mutex
		inos       map[uint64]map[uint64]*memChunk
		incomplete bool
	}
}

// memChunk is guarded by the Server's chunk lock, not by memBackend.mu.
type memChunk struct {
	size    int64
	version uint64    // raised by every change
	mtime   time.Time // of the last change

	blocks [][]byte // len(blocks[b]) == blockLen(size, b)
	crcs   []uint32
}

var _ Backend = (*memBackend)(nil)

// newMemBackend makes an empty RAM store: with replacement, one that
// replaces a store of a cluster that holds data, and so is incomplete.
func newMemBackend(limit, bs int64, replacement bool, now func() time.Time) *memBackend {
	m := &memBackend{bs: bs, limit: limit, now: now, id: newStoreID()}
	m.mu.inos = make(map[uint64]map[uint64]*memChunk)
	m.mu.incomplete = replacement
	return m
}

func (m *memBackend) lookup(k ChunkKey) *memChunk {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.inos[k.Ino][k.Index]
}

func (m *memBackend) insert(k ChunkKey, c *memChunk) {
	m.mu.Lock()
	defer m.mu.Unlock()
	chunks := m.mu.inos[k.Ino]
	if chunks == nil {
		chunks = make(map[uint64]*memChunk)
		m.mu.inos[k.Ino] = chunks
	}
	chunks[k.Index] = c
	m.count.Add(1)
}

func (m *memBackend) remove(k ChunkKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	chunks := m.mu.inos[k.Ino]
	if _, ok := chunks[k.Index]; !ok {
		return
	}
	delete(chunks, k.Index)
	if len(chunks) == 0 {
		delete(m.mu.inos, k.Ino)
	}
	m.count.Add(-1)
}

// reserve admits n more bytes, or reports that they would exceed the limit.
func (m *memBackend) reserve(n int64) bool {
	for {
		u := m.used.Load()
		if u+n > m.limit {
			return false
		}
		if m.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (m *memBackend) Write(k ChunkKey, off int64, data []byte, _ WriteMode) error {
	if len(data) == 0 {
		return nil // no change, no new version
	}
	c := m.lookup(k)
	var size int64
	if c != nil {
		size = c.size
	}
	return m.apply(k, c, writeChange(m.bs, size, off, data))
}

func (m *memBackend) Truncate(k ChunkKey, size int64) error {
	c := m.lookup(k)
	if c == nil {
		if size == 0 {
			return nil
		}
		return m.apply(k, nil, truncateChange(m.bs, 0, size))
	}
	return m.apply(k, c, truncateChange(m.bs, c.size, size))
}

func (m *memBackend) SetVersion(k ChunkKey, v uint64) error {
	c := m.lookup(k)
	switch {
	case c == nil:
		return errs.New(errs.NotExist, "set chunk version", "chunk %v (ino %d index %d) does not exist", k, k.Ino, k.Index)
	case v < c.version:
		return errs.New(errs.Invalid, "set chunk version", "chunk %v: version %d is below its %d", k, v, c.version)
	}
	c.version = v
	return nil
}

// apply checks everything that can fail (space, edge blocks' CRCs) before it
// changes anything, so a refused change leaves the chunk as it was.
func (m *memBackend) apply(k ChunkKey, c *memChunk, ch change) error {
	return m.applyKeeping(k, c, ch, nil)
}

// applyKeeping is apply; with kept, the blocks it changes are moved into
// kept as they were and the chunk gets new ones (memkeep.go).
func (m *memBackend) applyKeeping(k ChunkKey, c *memChunk, ch change, kept *memKept) error {
	lo, hi := ch.blocks()
	for b := lo; b < hi; b++ {
		if ch.keepsOld(b) && checksum(c.blocks[b]) != c.crcs[b] {
			return corruptErr("write chunk", k, b)
		}
	}
	grow := ch.newSize - ch.oldSize
	if grow > 0 && !m.reserve(grow) {
		return errs.New(errs.NoSpace, "write chunk", "chunk %v: memory limit of %d bytes reached", k, m.limit)
	}
	if ch.newSize == 0 {
		if c != nil {
			m.remove(k)
		}
		m.used.Add(-ch.oldSize)
		return nil
	}
	if c == nil {
		c = &memChunk{}
		m.insert(k, c)
	}
	n := blockCount(m.bs, ch.newSize)
	if n < int64(len(c.blocks)) {
		clear(c.blocks[n:]) // let the GC have the dropped blocks
	}
	c.blocks = resize(c.blocks, n)
	c.crcs = resize(c.crcs, n)
	var buf []byte
	if kept != nil {
		kept.oldSize, kept.first = ch.oldSize, lo
	}
	for b := lo; b < hi; b++ {
		if buf == nil && !ch.coversBlock(b) {
			buf = make([]byte, m.bs)
		}
		content := ch.build(b, c.blocks[b], buf)
		blk := c.blocks[b]
		switch {
		case kept != nil:
			blk = kept.take(c, b, ch.hasOld(b), len(content))
		case int64(cap(blk)) < int64(len(content)) || len(content) < cap(blk)/2:
			blk = make([]byte, len(content))
		}
		blk = blk[:len(content)]
		copy(blk, content)
		c.blocks[b] = blk
		c.crcs[b] = checksum(blk)
	}
	c.size = ch.newSize
	c.version++
	c.mtime = m.now()
	if grow < 0 {
		m.used.Add(grow)
	}
	return nil
}

// resize returns s with length n, keeping its first elements.
func resize[T any](s []T, n int64) []T {
	if n <= int64(cap(s)) {
		return s[:n]
	}
	out := make([]T, n)
	copy(out, s)
	return out
}

func (m *memBackend) Read(k ChunkKey, off, n int64, alloc func(int) []byte) ([]byte, ChunkInfo, bool, error) {
	c := m.lookup(k)
	if c == nil {
		return nil, ChunkInfo{}, false, nil
	}
	info := ChunkInfo{Key: k, Size: c.size, Version: c.version, Mtime: c.mtime}
	if off >= c.size || n == 0 {
		return nil, info, true, nil
	}
	end := min(off+n, c.size)
	out := alloc(int(end - off))[:0]
	for b := off / m.bs; b*m.bs < end; b++ {
		blk := c.blocks[b]
		if checksum(blk) != c.crcs[b] {
			return nil, ChunkInfo{}, false, corruptErr("read chunk", k, b)
		}
		start := b * m.bs
		out = append(out, blk[max(off, start)-start:min(end, start+m.bs)-start]...)
	}
	return out, info, true, nil
}

func (m *memBackend) Delete(ino, from uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	chunks := m.mu.inos[ino]
	var n uint64
	for idx, c := range chunks {
		if idx < from {
			continue
		}
		delete(chunks, idx)
		m.used.Add(-c.size)
		m.count.Add(-1)
		n++
	}
	if len(chunks) == 0 {
		delete(m.mu.inos, ino)
	}
	return n, nil
}

func (m *memBackend) Sync(uint64) error { return nil }

func (m *memBackend) SyncAll() error { return nil }

func (m *memBackend) Keys(q ListQuery) ([]ChunkKey, bool, error) {
	m.mu.Lock()
	var keys []ChunkKey
	for ino, chunks := range m.mu.inos {
		if q.Ino != 0 && ino != q.Ino || q.After != nil && ino < q.After.Ino {
			continue
		}
		for idx := range chunks {
			if k := (ChunkKey{ino, idx}); q.includes(k) {
				keys = append(keys, k)
			}
		}
	}
	m.mu.Unlock()
	slices.SortFunc(keys, compareKeys)
	if len(keys) > q.Limit {
		return keys[:q.Limit], true, nil
	}
	return keys, false, nil
}

// Stat runs under k's chunk lock, which guards the memChunk's fields.
func (m *memBackend) Stat(k ChunkKey) (ChunkInfo, bool, error) {
	c := m.lookup(k)
	if c == nil {
		return ChunkInfo{}, false, nil
	}
	return ChunkInfo{Key: k, Size: c.size, Version: c.version, Mtime: c.mtime}, true, nil
}

func (m *memBackend) Usage() (Usage, error) {
	return Usage{Capacity: uint64(m.limit), Used: uint64(m.used.Load()), Chunks: uint64(m.count.Load())}, nil
}

func (m *memBackend) ChunkCount() int64 { return m.count.Load() }

func (m *memBackend) Identity() (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.id, m.mu.incomplete
}

func (m *memBackend) MarkComplete() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.incomplete = false
	return nil
}

func (m *memBackend) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.inos = make(map[uint64]map[uint64]*memChunk)
	m.used.Store(0)
	m.count.Store(0)
	return nil
}

// flipByte corrupts byte off of chunk k behind the CRCs' back (tests only).
// The caller must hold no lock on k and must not race with writers of k.
func (m *memBackend) flipByte(k ChunkKey, off int64) bool {
	c := m.lookup(k)
	if c == nil || off < 0 || off >= c.size {
		return false
	}
	c.blocks[off/m.bs][off%m.bs] ^= 0xff
	return true
}
