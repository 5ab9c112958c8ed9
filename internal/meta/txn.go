package meta

import (
	"errors"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// Locking. Pebble batches are atomic but not transactions, so every
// read-check-write runs under striped locks. A record is guarded by the stripe
// of the inode that owns its key: a directory's entries and its own record by
// the directory's stripe, a standalone inode record by its ino's stripe, and
// attributes embedded in an entry by the parent directory's stripe. An
// operation learns which records it needs while it reads (the inode behind an
// entry, the last remaining link of a hard-linked file), so a txn that touches
// a record whose stripe it does not hold fails with a relockError; update then
// releases everything, adds the stripe and runs the operation again, always
// taking stripes in ascending order. Directory moves across parents also take
// renameMu, first, so that the ancestry check sees a stable tree.
const lockStripes = 1024

type stripes [lockStripes]sync.Mutex

func stripeOf(ino core.Ino) int {
	x := uint64(ino) * 0x9e3779b97f4a7c15
	return int(x >> 54) // top 10 bits
}

// relockError asks update to rerun the operation holding more locks.
type relockError struct {
	ino      core.Ino
	renameMu bool
}

func (e *relockError) Error() string { return "meta: relock" }

// txn is one operation's view of the store: reads go to the database (the
// state committed by operations that held the same locks before), writes
// collect in a batch, and modified inode records are cached so an operation
// that touches the same directory twice (rename within a directory) sees its
// own changes.
type txn struct {
	s        *Server
	op       string
	readOnly bool
	held     []int // stripes held, ascending
	renameMu bool
	b        *pebble.Batch
	now      int64

	inodes map[core.Ino]*weftpb.InodeRecord
	dirty  map[core.Ino]bool
	// counter deltas applied to the in-memory gauges after a commit
	inodeDelta, dirDelta int64
}

// need fails with a relockError unless the txn may touch records guarded by
// ino's stripe.
func (t *txn) need(ino core.Ino) error {
	if t.readOnly {
		return nil
	}
	if _, ok := slices.BinarySearch(t.held, stripeOf(ino)); ok {
		return nil
	}
	return &relockError{ino: ino}
}

// needRenameMu fails with a relockError unless the txn holds renameMu.
func (t *txn) needRenameMu() error {
	if t.readOnly || t.renameMu {
		return nil
	}
	return &relockError{renameMu: true}
}

// inode reads ino's standalone record. A missing record is errs.Stale: every
// caller reaches a standalone record through a handle or an entry that said it
// exists.
func (t *txn) inode(ino core.Ino) (*weftpb.InodeRecord, error) {
	if err := t.need(ino); err != nil {
		return nil, err
	}
	if r, ok := t.inodes[ino]; ok {
		if r == nil {
			return nil, errs.New(errs.Stale, t.op, "inode %d is gone", ino)
		}
		return r, nil
	}
	r := &weftpb.InodeRecord{}
	found, err := getRecord(t.s.db, inodeKey(ino), r)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errs.New(errs.Stale, t.op, "inode %d is gone", ino)
	}
	if t.inodes == nil {
		t.inodes = map[core.Ino]*weftpb.InodeRecord{}
	}
	t.inodes[ino] = r
	return r, nil
}

// dir reads a directory's record: Stale if it is gone, NotDir if ino is not
// a directory.
func (t *txn) dir(ino core.Ino) (*weftpb.InodeRecord, error) {
	r, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	if !core.IsDir(r.Mode) {
		return nil, errs.New(errs.NotDir, t.op, "inode %d is not a directory", ino)
	}
	return r, nil
}

// putInode stores r as ino's standalone record when the txn commits.
func (t *txn) putInode(ino core.Ino, r *weftpb.InodeRecord) {
	if t.inodes == nil {
		t.inodes = map[core.Ino]*weftpb.InodeRecord{}
	}
	if t.dirty == nil {
		t.dirty = map[core.Ino]bool{}
	}
	t.inodes[ino] = r
	t.dirty[ino] = true
}

// deleteInode removes ino's standalone record and its extended attributes.
func (t *txn) deleteInode(ino core.Ino) {
	if t.inodes == nil {
		t.inodes = map[core.Ino]*weftpb.InodeRecord{}
	}
	t.inodes[ino] = nil
	delete(t.dirty, ino)
	t.b.Delete(inodeKey(ino), nil)
	t.deleteXattrs(ino)
}

// deleteXattrs deletes ino's extended attributes one key at a time. Most
// files have none, and a range tombstone per removed file would make every
// later read of the memtable and sstables step over thousands of them (it
// made unlink three times slower than create); the iterator that finds none
// is cheap. If the iterator fails, the range delete is still correct.
func (t *txn) deleteXattrs(ino core.Ino) {
	p := xattrPrefix(ino)
	end := prefixEnd(p)
	it, err := t.s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: end})
	if err == nil {
		for it.First(); it.Valid(); it.Next() {
			t.b.Delete(slices.Clone(it.Key()), nil)
		}
		err = errors.Join(it.Error(), it.Close())
	}
	if err != nil {
		t.b.DeleteRange(p, end, nil)
	}
}

// entry reads name in directory dir (whose record is d). found is false when
// the name does not exist.
func (t *txn) entry(dir core.Ino, d *weftpb.InodeRecord, name string) (e *weftpb.EntryRecord, found bool, err error) {
	if err := t.need(dir); err != nil {
		return nil, false, err
	}
	e = &weftpb.EntryRecord{}
	found, err = getRecord(t.s.db, entryKeyIn(dir, d, name), e)
	return e, found, err
}

func (t *txn) putEntry(dir core.Ino, d *weftpb.InodeRecord, name string, e *weftpb.EntryRecord) {
	t.b.Set(entryKeyIn(dir, d, name), mustMarshal(e), nil)
}

func (t *txn) deleteEntry(dir core.Ino, d *weftpb.InodeRecord, name string) {
	t.b.Delete(entryKeyIn(dir, d, name), nil)
}

// entryKeyIn is the key of name in directory dir with record d: the partition
// comes from d's bitmap.
func entryKeyIn(dir core.Ino, d *weftpb.InodeRecord, name string) []byte {
	return entryKey(dir, partitionOf(nameHash(name), d.Radix, d.Bitmap), name)
}

// touchDir records a change of dir's entries: mtime and ctime.
func (t *txn) touchDir(dir core.Ino, d *weftpb.InodeRecord) {
	d.MtimeNs, d.CtimeNs = t.now, t.now
	t.putInode(dir, d)
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		// Records have no string fields (names and targets are bytes) and no
		// required fields, so marshaling cannot fail.
		panic("meta: marshal record: " + err.Error())
	}
	return b
}

// view runs a read-only operation against the current committed state. Its
// reads are separate Gets, not a snapshot: following an entry to a standalone
// record can race with a link count change that moves the attributes (the
// record is then gone), so a Stale result is retried once before it is
// believed.
func (s *Server) view(op string, fn func(t *txn) error) error {
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.closeMu.RUnlock()
	err := fn(&txn{s: s, op: op, readOnly: true, now: s.nowNs()})
	if errs.Is(err, errs.Stale) {
		err = fn(&txn{s: s, op: op, readOnly: true, now: s.nowNs()})
	}
	return err
}

// update runs a read-check-write operation under the locks it turns out to
// need, then commits its batch. In sync mode the commit is acknowledged only
// after the WAL fsync, but the locks are released before waiting for it, so
// concurrent operations (even in the same directory) share one fsync.
func (s *Server) update(op string, lock []core.Ino, fn func(t *txn) error) error {
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.closeMu.RUnlock()
	var held []int
	for _, ino := range lock {
		held = addStripe(held, stripeOf(ino))
	}
	renameMu := false
	for attempt := 0; ; attempt++ {
		if attempt > 64 {
			return errs.New(errs.Busy, op, "could not settle the locks it needs")
		}
		t := &txn{s: s, op: op, held: held, renameMu: renameMu, b: s.db.NewBatch(), now: s.nowNs()}
		if renameMu {
			s.renameMu.Lock()
		}
		for _, i := range held {
			s.locks[i].Lock()
		}
		err := fn(t)
		if err == nil {
			t.flush()
			err = s.commitLocked(t)
		}
		for j := len(held) - 1; j >= 0; j-- {
			s.locks[held[j]].Unlock()
		}
		if renameMu {
			s.renameMu.Unlock()
		}
		var rl *relockError
		if errors.As(err, &rl) {
			t.b.Close()
			if rl.renameMu {
				renameMu = true
			} else {
				held = addStripe(held, stripeOf(rl.ino))
			}
			continue
		}
		if err != nil {
			t.b.Close()
			return err
		}
		return s.finishCommit(t)
	}
}

func addStripe(held []int, st int) []int {
	i, ok := slices.BinarySearch(held, st)
	if ok {
		return held
	}
	return slices.Insert(held, i, st)
}

// flush writes the txn's modified inode records into its batch.
func (t *txn) flush() {
	for ino := range t.dirty {
		t.b.Set(inodeKey(ino), mustMarshal(t.inodes[ino]), nil)
	}
	if t.inodeDelta != 0 {
		t.b.Merge(keyInodes, counterDelta(t.inodeDelta), nil)
	}
	if t.dirDelta != 0 {
		t.b.Merge(keyDirs, counterDelta(t.dirDelta), nil)
	}
}

// commitLocked applies the batch while the locks are held, so that the next
// holder reads this operation's result. In sync mode it does not wait for the
// fsync (finishCommit does, after the locks are released).
func (s *Server) commitLocked(t *txn) error {
	if t.b.Empty() {
		return nil
	}
	var err error
	if s.sync {
		err = s.db.ApplyNoSyncWait(t.b, pebble.Sync)
	} else {
		err = t.b.Commit(pebble.NoSync)
	}
	if err != nil {
		return errs.Wrap(errs.IO, t.op, "", err)
	}
	s.inodes.Add(t.inodeDelta)
	s.dirs.Add(t.dirDelta)
	return nil
}

// finishCommit waits for the WAL fsync of a committed txn in sync mode.
func (s *Server) finishCommit(t *txn) error {
	defer t.b.Close()
	if !s.sync || t.b.Empty() {
		return nil
	}
	if err := t.b.SyncWait(); err != nil {
		return errs.Wrap(errs.IO, t.op, "", err)
	}
	return nil
}
