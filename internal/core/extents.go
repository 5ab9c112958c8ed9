package core

import (
	"fmt"
	"slices"
)

// Extents is the set of byte ranges of a file that some write reached, as
// the wire and the meta record carry it (Attr.extents): sorted, disjoint,
// non-adjacent [start, end) pairs, flattened into one slice.
//
// It is what tells a hole from a loss. A chunk that overlaps the extents was
// written, so every replica answering "not found" means the chunk was lost
// (a store that came back empty, a mem store that restarted): the read fails
// with EIO. Only a chunk outside them reads as zeros when no store holds it.
// Writers round their ranges out to whole chunks, so a sequential file is
// one range, and a sparse one a range per run of written chunks.
type Extents []uint64

// MaxExtents is how many ranges a file's record keeps. A file written in
// more separate runs than this is "untracked": its chunks that no store
// holds read as holes again, as before extents existed (docs/design.md,
// "Holes and losses").
const MaxExtents = 64

// MaxExtentsPerCommit bounds the ranges one commit may carry (bad input).
const MaxExtentsPerCommit = 4096

// Len is the number of ranges.
func (e Extents) Len() int { return len(e) / 2 }

// Check reports whether e is well formed: pairs, each non-empty, sorted and
// apart from the next.
func (e Extents) Check() error {
	if len(e)%2 != 0 {
		return fmt.Errorf("extents: %d numbers, not pairs", len(e))
	}
	for i := 0; i < len(e); i += 2 {
		if e[i] >= e[i+1] {
			return fmt.Errorf("extents: empty or inverted range [%d, %d)", e[i], e[i+1])
		}
		if i > 0 && e[i] <= e[i-1] {
			return fmt.Errorf("extents: range at %d not after the one ending at %d", e[i], e[i-1])
		}
	}
	return nil
}

// Add returns e with [start, end) added, merged with the ranges it touches.
// It may reuse e's storage.
func (e Extents) Add(start, end uint64) Extents {
	if start >= end {
		return e
	}
	// First range ending at or after start, and first starting after end:
	// everything between merges with [start, end).
	i := 0
	for i < len(e) && e[i+1] < start {
		i += 2
	}
	j := i
	for j < len(e) && e[j] <= end {
		j += 2
	}
	if i < j {
		start = min(start, e[i])
		end = max(end, e[j-1])
	}
	return slices.Replace(e, i, j, start, end)
}

// Union returns e with every range of o added.
func (e Extents) Union(o Extents) Extents {
	for i := 0; i+1 < len(o); i += 2 {
		e = e.Add(o[i], o[i+1])
	}
	return e
}

// Overlaps reports whether some byte of [start, end) is in e.
func (e Extents) Overlaps(start, end uint64) bool {
	if start >= end {
		return false
	}
	for i := 0; i+1 < len(e); i += 2 {
		if e[i] >= end {
			return false
		}
		if e[i+1] > start {
			return true
		}
	}
	return false
}

// Trim returns e without the bytes at and past size (a truncate, or a commit
// of a smaller size). It may reuse e's storage.
func (e Extents) Trim(size uint64) Extents {
	for i := 0; i < len(e); i += 2 {
		if e[i] >= size {
			return e[:i]
		}
		if e[i+1] > size {
			e[i+1] = size
			return e[:i+2]
		}
	}
	return e
}

// ChunkExtent is the range of chunk index in a layout of chunkSize bytes:
// what a writer adds for each chunk it uploaded.
func ChunkExtent(index uint64, chunkSize int64) (start, end uint64) {
	cs := uint64(chunkSize)
	return index * cs, (index + 1) * cs
}
