// Package search is weft find's query: the tests find(1) makes on a file,
// reduced to what a meta server can check on its index (names, types,
// sizes and times as absolute ranges, owners, permission bits, extended
// attribute names) plus what only the client can check (whole paths); the
// parser of find's command-line expression (parse.go), which turns GNU
// find's relative forms (-mtime, -size rounding, -perm) into those ranges;
// and their wire form (proto/meta.proto FindQuery). Meta and the client
// both evaluate a Query with this package, so they agree on every test.
package search

import (
	"github.com/weftfs/weft/internal/core"
)

// Range is an inclusive range of sizes (bytes) or times (ns).
type Range struct{ Lo, Hi int64 }

func (r Range) has(v int64) bool { return r.Lo <= v && v <= r.Hi }

// PermKind is how -perm compares mode bits.
type PermKind int

const (
	PermExact PermKind = iota // -perm MODE: exactly these bits (of 07777)
	PermAll                   // -perm -MODE: at least these bits
	PermAny                   // -perm /MODE: any of these bits (none given: every file)
)

// Perm is one -perm test.
type Perm struct {
	Kind PermKind
	Bits uint32
}

func (p Perm) match(mode uint32) bool {
	m := mode & 0o7777
	switch p.Kind {
	case PermAll:
		return m&p.Bits == p.Bits
	case PermAny:
		return p.Bits == 0 || m&p.Bits != 0
	default:
		return m == p.Bits
	}
}

// TypeBit is the bit of a file type (mode & core.ModeType) in a type set.
func TypeBit(mode uint32) uint32 { return 1 << ((mode & core.ModeType) >> 12) }

// Query is a conjunction of tests; the zero Query matches every file.
type Query struct {
	Names  []Glob   // the base name (-name, -iname)
	Paths  []Glob   // the whole path as printed (-path, -ipath); the client's test
	Types  []uint32 // each a set of TypeBits (-type f,d)
	Sizes  []Range  // bytes
	Mtimes []Range  // ns
	Uids   []uint32
	Gids   []uint32
	Perms  []Perm
	Xattrs []string // names of extended attributes the file has
}

// Attrs is what the tests read of a file.
type Attrs struct {
	Mode, Uid, Gid uint32
	Size           uint64
	MtimeNs        int64
}

// MatchAttrs applies every test of q on attributes: types, sizes, times,
// owners and permissions. noTimes leaves out the time tests (a split
// directory's times are not known where its record is).
func (q *Query) MatchAttrs(a Attrs, noTimes bool) bool {
	for _, t := range q.Types {
		if t&TypeBit(a.Mode) == 0 {
			return false
		}
	}
	for _, r := range q.Sizes {
		if a.Size > 1<<63-1 || !r.has(int64(a.Size)) {
			return false
		}
	}
	if !noTimes {
		for _, r := range q.Mtimes {
			if !r.has(a.MtimeNs) {
				return false
			}
		}
	}
	for _, u := range q.Uids {
		if a.Uid != u {
			return false
		}
	}
	for _, g := range q.Gids {
		if a.Gid != g {
			return false
		}
	}
	for _, p := range q.Perms {
		if !p.match(a.Mode) {
			return false
		}
	}
	return true
}

// MatchName applies the base name tests.
func (q *Query) MatchName(name string) bool {
	for _, g := range q.Names {
		if !g.Match(name) {
			return false
		}
	}
	return true
}

// MatchPath applies the whole-path tests.
func (q *Query) MatchPath(path string) bool {
	for _, g := range q.Paths {
		if !g.Match(path) {
			return false
		}
	}
	return true
}

// HasTimes reports whether q tests times.
func (q *Query) HasTimes() bool { return len(q.Mtimes) > 0 }

// Empty reports whether some test can never pass (an empty range), so
// that no file matches.
func (q *Query) Empty() bool {
	for _, rs := range [][]Range{q.Sizes, q.Mtimes} {
		for _, r := range rs {
			if r.Lo > r.Hi {
				return true
			}
		}
	}
	return false
}
