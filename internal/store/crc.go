package store

import (
	"hash/crc32"
	"math"
)

// DefaultBlockSize is the span of one CRC: a ranged read verifies only the
// blocks it touches, and a partial write rereads at most its two edge blocks.
const DefaultBlockSize = 64 << 10

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// change is one update of a chunk: its size goes from oldSize to newSize and
// data (possibly none) is written at off. Writes and truncates are both
// changes, so which blocks need new checksums and which need their old bytes
// is worked out once, for both backends.
type change struct {
	bs      int64 // block size
	oldSize int64
	newSize int64
	off     int64
	data    []byte
}

func writeChange(bs, oldSize, off int64, data []byte) change {
	newSize := oldSize
	if len(data) > 0 {
		newSize = max(oldSize, off+int64(len(data)))
	}
	return change{bs: bs, oldSize: oldSize, newSize: newSize, off: off, data: data}
}

func truncateChange(bs, oldSize, size int64) change {
	return change{bs: bs, oldSize: oldSize, newSize: size}
}

// blocks returns the blocks [lo, hi) whose bytes or length change: those the
// data covers, those the growth adds (including the old partial last block,
// whose CRC now covers more zeros), and after a shrink the new partial last
// block. The union is always contiguous.
func (c change) blocks() (lo, hi int64) {
	lo, hi = math.MaxInt64, 0
	if n := int64(len(c.data)); n > 0 {
		lo, hi = c.off/c.bs, (c.off+n-1)/c.bs+1
	}
	switch {
	case c.newSize > c.oldSize:
		lo, hi = min(lo, c.oldSize/c.bs), max(hi, (c.newSize-1)/c.bs+1)
	case c.newSize < c.oldSize && c.newSize%c.bs != 0:
		b := c.newSize / c.bs
		lo, hi = min(lo, b), max(hi, b+1)
	}
	if lo >= hi {
		return 0, 0
	}
	return lo, hi
}

// blockCount returns how many blocks a chunk of size bytes has.
func blockCount(bs, size int64) int64 { return (size + bs - 1) / bs }

// blockLen returns the length of block b in a chunk of size bytes.
func blockLen(bs, size, b int64) int64 { return max(0, min(bs, size-b*bs)) }

// hasOld reports whether block b held bytes before the change.
func (c change) hasOld(b int64) bool { return b*c.bs < c.oldSize }

// keepsOld reports whether block b's new content includes some of its old
// bytes, which must then be read and verified first.
func (c change) keepsOld(b int64) bool {
	start := b * c.bs
	end := min(start+c.bs, c.oldSize, c.newSize) // old bytes that survive
	if end <= start {
		return false
	}
	if len(c.data) == 0 {
		return true
	}
	return start < c.off || end > c.off+int64(len(c.data))
}

// coversBlock reports whether the data covers block b's new content whole.
func (c change) coversBlock(b int64) bool {
	start := b * c.bs
	return start >= c.off && start+blockLen(c.bs, c.newSize, b) <= c.off+int64(len(c.data))
}

// build returns block b's new content, given its old bytes (needed only when
// keepsOld). When the data covers the whole block it returns a slice of the
// data; otherwise it assembles the block in buf, which must hold a block.
func (c change) build(b int64, old, buf []byte) []byte {
	start := b * c.bs
	n := blockLen(c.bs, c.newSize, b)
	if c.coversBlock(b) {
		return c.data[start-c.off : start+n-c.off]
	}
	wEnd := c.off + int64(len(c.data))
	out := buf[:n]
	k := copy(out, old)
	clear(out[k:])
	if lo, hi := max(start, c.off), min(start+n, wEnd); lo < hi {
		copy(out[lo-start:hi-start], c.data[lo-c.off:hi-c.off])
	}
	return out
}
