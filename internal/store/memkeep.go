package store

import (
	"sync"
)

// Keeping a write's replaced bytes without copying them (keep_old,
// undo.go). The mem backend holds a chunk as blocks of bs bytes, each with
// its CRC; a keep_old write of a range would otherwise read the range's old
// bytes out (a copy, and a CRC check of every block) before writing over
// them in place. Instead WriteKeep moves the old blocks the write changes
// out of the chunk, as they are, with their CRCs, and gives the chunk new
// blocks: the write copies the new bytes once, as any write does, and the
// old ones are not touched. Profiled on weft bench seqio's 4 MiB rewrite on
// ec:4+1, the read-out was most of the CPU the stripe's write cost beyond a
// mirrored write's (docs/benchmarks.md, issue 16, fourth pass).
//
// The old bytes are checked against their CRCs only when they are needed
// (an undo, or a store answering as return_old does), and a block whose
// CRC no longer matches is an error then, never bytes put back. Released
// blocks go back to a pool the next keeping write takes its blocks from,
// so a stream of rewrites allocates (and zeroes) nothing in the steady
// state; the pool is a sync.Pool, emptied by the garbage collector when
// idle, so it holds no memory the mem limit does not see for long.

// keptRange is what a backend kept of the bytes a write replaced.
type keptRange interface {
	// Bytes returns the range's old bytes (short where the chunk ended,
	// empty past its end), checked against their CRCs, in a buffer from
	// alloc (called at most once).
	Bytes(alloc func(int) []byte) ([]byte, error)
	// Size is the memory it holds, for the undo table's bound.
	Size() int64
	// Release gives its memory back; it is not used afterwards.
	Release()
}

// keepingBackend is a backend that can keep a write's replaced bytes
// cheaper than reading them before the write.
type keepingBackend interface {
	// WriteKeep is Write, and returns the bytes of [off, off+len(data))
	// the write replaced and whether the chunk existed before it.
	WriteKeep(k ChunkKey, off int64, data []byte, mode WriteMode) (keptRange, bool, error)
}

var _ keepingBackend = (*memBackend)(nil)

// memKept is the mem backend's keptRange: the chunk's blocks first,
// first+1, ... as they were before the write (nil where the chunk had no
// block), with their CRCs.
type memKept struct {
	m       *memBackend
	k       ChunkKey
	off, n  int64 // the write's range
	oldSize int64
	first   int64
	blocks  [][]byte
	crcs    []uint32
}

func (m *memBackend) WriteKeep(k ChunkKey, off int64, data []byte, _ WriteMode) (keptRange, bool, error) {
	kept := &memKept{m: m, k: k, off: off, n: int64(len(data))}
	c := m.lookup(k)
	if len(data) == 0 {
		if c != nil {
			kept.oldSize = c.size
		}
		return kept, c != nil, nil
	}
	var size int64
	if c != nil {
		size = c.size
	}
	if err := m.applyKeeping(k, c, writeChange(m.bs, size, off, data), kept); err != nil {
		return nil, false, err
	}
	return kept, c != nil, nil
}

// take moves block b of c (under the chunk's lock, in applyKeeping) into
// kept, and returns a new block of n bytes to hold its new content.
func (kept *memKept) take(c *memChunk, b int64, hadOld bool, n int) []byte {
	if hadOld {
		kept.blocks = append(kept.blocks, c.blocks[b])
		kept.crcs = append(kept.crcs, c.crcs[b])
	} else {
		kept.blocks = append(kept.blocks, nil)
		kept.crcs = append(kept.crcs, 0)
	}
	return kept.m.newBlock(n)
}

func (kept *memKept) Bytes(alloc func(int) []byte) ([]byte, error) {
	bs := kept.m.bs
	end := min(kept.off+kept.n, kept.oldSize)
	if kept.off >= end {
		return nil, nil
	}
	out := alloc(int(end - kept.off))[:0]
	for b := kept.off / bs; b*bs < end; b++ {
		i := b - kept.first
		if i < 0 || i >= int64(len(kept.blocks)) || kept.blocks[i] == nil {
			return nil, corruptErr("undo write", kept.k, b) // cannot happen: the write changed every block of its range
		}
		blk := kept.blocks[i]
		if checksum(blk) != kept.crcs[i] {
			return nil, corruptErr("undo write", kept.k, b)
		}
		start := b * bs
		out = append(out, blk[max(kept.off, start)-start:min(end, start+int64(len(blk)))-start]...)
	}
	return out, nil
}

func (kept *memKept) Size() int64 {
	var n int64
	for _, b := range kept.blocks {
		n += int64(cap(b))
	}
	return n
}

func (kept *memKept) Release() {
	for i, b := range kept.blocks {
		kept.m.spare.put(b, kept.m.bs)
		kept.blocks[i] = nil
	}
}

// blockPool holds whole blocks released by undo entries, for the next
// keeping write's new blocks (see above). Their old content is never
// read: a block taken from it is written whole first.
type blockPool struct{ p sync.Pool }

func (bp *blockPool) put(b []byte, bs int64) {
	if int64(cap(b)) != bs {
		return
	}
	b = b[:bs]
	bp.p.Put(&b)
}

func (bp *blockPool) get() []byte {
	if b, ok := bp.p.Get().(*[]byte); ok {
		return *b
	}
	return nil
}

// newBlock returns a block for n bytes of new content, which the caller
// writes whole.
func (m *memBackend) newBlock(n int) []byte {
	if int64(n) > m.bs/2 && int64(n) <= m.bs {
		if b := m.spare.get(); b != nil {
			return b[:n]
		}
	}
	return make([]byte, n)
}
