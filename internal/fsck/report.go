package fsck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/weftfs/weft/internal/core"
)

// Kind classifies a finding.
type Kind string

// The kinds of damage fsck finds (docs/cli.md lists them for users).
const (
	// KindBadRecord is a key or value fsck cannot decode.
	KindBadRecord Kind = "bad-record"
	// KindMisplaced is an entry that is not where its name's hash places
	// it: another server, another partition, or a stored hash that is not
	// the name's.
	KindMisplaced Kind = "misplaced"
	// KindDuplicate is one name of a directory stored in two places.
	KindDuplicate Kind = "duplicate"
	// KindDangling is an entry whose standalone inode record is missing.
	KindDangling Kind = "dangling"
	// KindOrphan is a standalone inode record that no entry points to.
	KindOrphan Kind = "orphan"
	// KindPartition is a directory whose partitions are wrong: stubs of a
	// directory that does not exist, partitions that overlap or leave
	// names without a home, a stub on the wrong server, entries of a
	// directory that does not exist.
	KindPartition Kind = "partition"
	// KindCount is a partition record whose entry or link count does not
	// match its entries.
	KindCount Kind = "count"
	// KindLinks is a link count or parent pointer that does not match the
	// entries: a hard-linked file's nlink and link list, a directory's
	// parent, a directory with two names.
	KindLinks Kind = "links"
	// KindInode is an inode whose attributes are in two places (two
	// entries, or an entry and a standalone record), or a standalone
	// record on a server that does not own it.
	KindInode Kind = "inode"
	// KindXattr is extended attributes of an inode that has none on that
	// server.
	KindXattr Kind = "xattr"
	// KindIndex is a meta server's search index that disagrees with its
	// records.
	KindIndex Kind = "index"
)

// Kinds lists every kind, in the order reports show them.
var Kinds = []Kind{KindBadRecord, KindMisplaced, KindDuplicate, KindDangling, KindOrphan,
	KindPartition, KindCount, KindLinks, KindInode, KindXattr, KindIndex}

// Finding is one problem fsck found, and checked again under the locks of
// the records involved.
type Finding struct {
	Kind   Kind
	Server int      // the meta server that holds the damaged record; -1 for several
	Dir    core.Ino // the directory concerned, 0 if none
	Name   string   // the entry concerned, "" if none
	Ino    core.Ino // the inode concerned, 0 if none
	Detail string   // what is wrong
	// Fixable says that --repair can fix it, Repaired that it did;
	// Repair says how, or why it cannot.
	Fixable  bool
	Repaired bool
	Repair   string
}

func (f Finding) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ", f.Kind)
	if f.Server >= 0 {
		fmt.Fprintf(&b, "meta %d: ", f.Server)
	}
	b.WriteString(f.Detail)
	switch {
	case f.Repaired:
		fmt.Fprintf(&b, "; fix: %s (done)", f.Repair)
	case f.Fixable:
		fmt.Fprintf(&b, "; fix: %s (with --repair)", f.Repair)
	case f.Repair != "":
		fmt.Fprintf(&b, "; no automatic fix: %s", f.Repair)
	}
	return b.String()
}

// Pending is work in progress: a cross-server operation or a split that a
// meta server has not finished. It is not damage; records it changes are
// not judged until it is done.
type Pending struct {
	Server int
	What   string
}

func (p Pending) String() string { return fmt.Sprintf("meta %d: %s", p.Server, p.What) }

// Report is what a check found.
type Report struct {
	Servers int  // meta servers
	Running bool // the cluster ran (else fsck read the stopped stores)
	Rounds  int  // check passes (--repair checks again after repairing)

	// What the last pass read.
	Directories uint64 // directories (their owners' records)
	Partitions  uint64 // directory partition records (owners' records and stubs)
	Entries     uint64 // directory entries
	Inodes      uint64 // inodes: standalone records and entries with embedded attributes
	Xattrs      uint64 // extended attribute keys
	// Suspicions counts what the scan found odd and checked again under
	// locks (on a running cluster, most are operations that ran during
	// the scan).
	Suspicions int

	Findings []Finding
	// Omitted counts findings of each kind left out of Findings beyond
	// the report's cap (still counted as unrepaired).
	Omitted map[Kind]int
	Pending []Pending
	// Notes are things an operator should know that are not damage in
	// the namespace (chunks left on store servers, checks skipped).
	Notes []string
}

// Unrepaired counts findings left as they were.
func (r *Report) Unrepaired() int {
	n := 0
	for _, f := range r.Findings {
		if !f.Repaired {
			n++
		}
	}
	for _, k := range r.Omitted {
		n += k
	}
	return n
}

// Clean reports whether the check found nothing left to fix and no work in
// progress.
func (r *Report) Clean() bool { return r.Unrepaired() == 0 && len(r.Pending) == 0 }

// ByKind counts findings (found, repaired) by kind, omitted ones included.
func (r *Report) ByKind() map[Kind][2]int {
	m := map[Kind][2]int{}
	for _, f := range r.Findings {
		c := m[f.Kind]
		c[0]++
		if f.Repaired {
			c[1]++
		}
		m[f.Kind] = c
	}
	for k, n := range r.Omitted {
		c := m[k]
		c[0] += n
		m[k] = c
	}
	return m
}

// sortFindings orders findings by kind (as Kinds lists them), then server,
// directory, name and inode, so reports are stable.
func sortFindings(fs []Finding) {
	rank := map[Kind]int{}
	for i, k := range Kinds {
		rank[k] = i
	}
	slices.SortStableFunc(fs, func(a, b Finding) int {
		switch {
		case rank[a.Kind] != rank[b.Kind]:
			return rank[a.Kind] - rank[b.Kind]
		case a.Server != b.Server:
			return a.Server - b.Server
		case a.Dir != b.Dir:
			return cmpIno(a.Dir, b.Dir)
		case a.Name != b.Name:
			return strings.Compare(a.Name, b.Name)
		}
		return cmpIno(a.Ino, b.Ino)
	})
}

func cmpIno(a, b core.Ino) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
