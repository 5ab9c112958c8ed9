package meta

// Counts of inodes and directories in use, by the meta server that
// allocated them (an inode number names its server).
//
// A file is created on the server of its parent's partition, with a number
// of that server, but may be removed on another one: after a rename, or a
// split that moved its entry. The remove cannot cheaply reach the
// allocating server (an unlink would become a distributed txn), so each
// server keeps, beside the counters of its own inodes (keyInodes, keyDirs),
// what it added to other servers' counts (keyInodesOf, keyDirsOf, mostly
// negative). A server's count is the sum over all servers of their share
// for it: weft status adds them up (StatusReply.inodes_by_owner), and the
// statfs shares add up to the cluster's total.

import (
	"sync/atomic"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/layout"
)

// ownerDelta is a change to another server's counts.
type ownerDelta struct{ inodes, dirs int64 }

// ownerCounts are this server's shares of another server's counts.
type ownerCounts struct{ inodes, dirs atomic.Int64 }

func keyInodesOf(owner int) []byte { return layout.CounterOfKey(layout.KeyInodesOf, owner) }

func keyDirsOf(owner int) []byte { return layout.CounterOfKey(layout.KeyDirsOf, owner) }

// uncount accounts for the removal of inode ino, a directory if dir: it is
// no longer in use on the server that allocated it.
func (t *txn) uncount(ino core.Ino, dir bool) {
	owner := t.s.ownerOf(ino)
	if owner == t.s.cfg.ID {
		t.inodeDelta--
		if dir {
			t.dirDelta--
		}
		return
	}
	if t.ownerDeltas == nil {
		t.ownerDeltas = map[int]ownerDelta{}
	}
	d := t.ownerDeltas[owner]
	d.inodes--
	if dir {
		d.dirs--
	}
	t.ownerDeltas[owner] = d
}

// flushCounts adds the txn's counter changes to its batch.
func (t *txn) flushCounts() {
	if t.inodeDelta != 0 {
		t.b.Merge(keyInodes, counterDelta(t.inodeDelta), nil)
	}
	if t.dirDelta != 0 {
		t.b.Merge(keyDirs, counterDelta(t.dirDelta), nil)
	}
	for owner, d := range t.ownerDeltas {
		if d.inodes != 0 {
			t.b.Merge(keyInodesOf(owner), counterDelta(d.inodes), nil)
		}
		if d.dirs != 0 {
			t.b.Merge(keyDirsOf(owner), counterDelta(d.dirs), nil)
		}
	}
}

// addCounts applies a committed txn's counter changes to the gauges.
func (s *Server) addCounts(t *txn) {
	s.inodes.Add(t.inodeDelta)
	s.dirs.Add(t.dirDelta)
	for owner, d := range t.ownerDeltas {
		s.others[owner].inodes.Add(d.inodes)
		s.others[owner].dirs.Add(d.dirs)
	}
}

// loadCounts reads the persisted counters.
func (s *Server) loadCounts() error {
	n, err := readCounter(s.db, keyInodes)
	if err != nil {
		return err
	}
	s.inodes.Store(n)
	if n, err = readCounter(s.db, keyDirs); err != nil {
		return err
	}
	s.dirs.Store(n)
	s.others = make([]ownerCounts, s.n)
	for owner := range s.others {
		if owner == s.cfg.ID {
			continue
		}
		for key, c := range map[string]*atomic.Int64{
			string(keyInodesOf(owner)): &s.others[owner].inodes,
			string(keyDirsOf(owner)):   &s.others[owner].dirs,
		} {
			n, err := readCounter(s.db, []byte(key))
			if err != nil {
				return err
			}
			c.Store(n)
		}
	}
	return nil
}

// countsByOwner returns this server's shares of every server's counts, by
// server id.
func (s *Server) countsByOwner() (inodes, dirs []int64) {
	inodes, dirs = make([]int64, s.n), make([]int64, s.n)
	for owner := range s.others {
		if owner == s.cfg.ID {
			inodes[owner], dirs[owner] = s.inodes.Load(), s.dirs.Load()
			continue
		}
		inodes[owner], dirs[owner] = s.others[owner].inodes.Load(), s.others[owner].dirs.Load()
	}
	return inodes, dirs
}

// inodeShare is what this server adds to the cluster's count of inodes in
// use: its own count and its shares of the others'.
func (s *Server) inodeShare() int64 {
	inodes, _ := s.countsByOwner()
	var sum int64
	for _, n := range inodes {
		sum += n
	}
	return sum
}
