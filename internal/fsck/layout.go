package fsck

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/proto/weftpb"
)

// part is one partition record of a directory (the owner's record for
// partition 0, a stub for the others) as fsck read it, and what the entry
// scan counted for it.
type part struct {
	srv       int
	partition uint32
	radix     uint32
	stub      bool
	entries   uint64 // as recorded
	nlink     uint32 // as recorded
	bitmap    []byte // as recorded

	// Entries on srv whose key names this partition, and how many of them
	// are directories. Only the scan of srv writes them.
	counted uint64
	subdirs uint32
}

func newPart(srv int, r *weftpb.InodeRecord) *part {
	return &part{srv: srv, partition: r.Partition, radix: r.Radix, stub: r.Stub, entries: r.Entries, nlink: r.Nlink, bitmap: r.Bitmap}
}

// dirLayout is every partition record of one directory, on every server.
type dirLayout struct {
	dir   core.Ino
	owner bool // the owner's record (partition 0, with the attributes) exists
	parts []*part
	// bad is problem's answer, kept by judge: the entry scan asks for
	// every entry.
	bad string
}

// judge sorts the partitions by server and keeps what problem says.
func (l *dirLayout) judge(n int) {
	slices.SortFunc(l.parts, func(a, b *part) int { return a.srv - b.srv })
	l.bad = l.problem(n)
}

// on returns the partition record held by server srv, or nil.
func (l *dirLayout) on(srv int) *part {
	for _, p := range l.parts {
		if p.srv == srv {
			return p
		}
	}
	return nil
}

// place returns the partition record that holds names with hash h, or nil
// if none does (a layout with a problem may have none or several: the
// first is returned).
func (l *dirLayout) place(h uint64) *part {
	for _, p := range l.parts {
		if core.PartitionHolds(p.partition, p.radix, h) {
			return p
		}
	}
	return nil
}

// problem says why the partition records of the directory do not place
// every name in exactly one partition on the server GIGA+ puts it on, or
// why a request cannot find them all, or "" if all is well.
func (l *dirLayout) problem(n int) string {
	if p := l.structure(n); p != "" {
		return p
	}
	if m := l.missingBits(); len(m) > 0 {
		return fmt.Sprintf("directory %d: the bitmap of partition %d (meta %d) lacks partition %d, which split from it", l.dir, m[0].parent.partition, m[0].parent.srv, m[0].child)
	}
	return ""
}

// structure is problem without the bitmaps.
func (l *dirLayout) structure(n int) string {
	if !l.owner {
		srvs := make([]int, 0, len(l.parts))
		for _, p := range l.parts {
			srvs = append(srvs, p.srv)
		}
		slices.Sort(srvs)
		return fmt.Sprintf("directory %d has partition stubs on meta servers %s but no directory record on its owner", l.dir, idList(srvs))
	}
	for _, p := range l.parts {
		switch {
		case p.radix > 31 || uint64(p.partition) >= 1<<p.radix:
			return fmt.Sprintf("directory %d: partition %d on meta %d has radix %d, which cannot hold it", l.dir, p.partition, p.srv, p.radix)
		case p.stub && p.partition == 0:
			return fmt.Sprintf("directory %d: meta %d holds a stub of partition 0, which is the owner's", l.dir, p.srv)
		case !p.stub && p.partition != 0:
			return fmt.Sprintf("directory %d: the owner's record says partition %d, not 0", l.dir, p.partition)
		case p.stub && partitionServer(l.dir, p.partition, n) != p.srv:
			return fmt.Sprintf("directory %d: partition %d is on meta %d, GIGA+ places it on meta %d", l.dir, p.partition, p.srv, partitionServer(l.dir, p.partition, n))
		}
	}
	// Partition p at radix r holds the hashes h with h mod 2^r = p: the
	// records must split the hash space without overlap or gap.
	var maxRadix uint32
	for i, a := range l.parts {
		maxRadix = max(maxRadix, a.radix)
		for _, b := range l.parts[i+1:] {
			lo, hi := a, b
			if lo.radix > hi.radix {
				lo, hi = hi, lo
			}
			if core.PartitionHolds(lo.partition, lo.radix, uint64(hi.partition)) {
				return fmt.Sprintf("directory %d: partitions %d (meta %d, radix %d) and %d (meta %d, radix %d) overlap",
					l.dir, lo.partition, lo.srv, lo.radix, hi.partition, hi.srv, hi.radix)
			}
		}
	}
	var covered uint64
	for _, p := range l.parts {
		covered += 1 << (maxRadix - p.radix)
	}
	if covered != 1<<maxRadix {
		return fmt.Sprintf("directory %d: its partitions hold only %d/%d of the names (partitions missing)", l.dir, covered, uint64(1)<<maxRadix)
	}
	return ""
}

// missingBit is a partition that the bitmap of the partition it split from
// does not name: a request routed by that bitmap would never reach it.
type missingBit struct {
	parent *part
	child  uint32
}

// missingBits lists the partitions whose parent's bitmap lacks them.
// Partition q split from q without its highest bit (GIGA+).
func (l *dirLayout) missingBits() []missingBit {
	var out []missingBit
	for _, q := range l.parts {
		if q.partition == 0 {
			continue
		}
		from := q.partition &^ (1 << (bits.Len32(q.partition) - 1))
		for _, p := range l.parts {
			if p.partition == from && !core.BitmapHas(p.bitmap, q.partition) {
				out = append(out, missingBit{parent: p, child: q.partition})
			}
		}
	}
	return out
}
