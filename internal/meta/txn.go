package meta

import (
	"context"
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
	srv      int // the meta server whose stripe of ino is needed
	renameMu bool
}

func (e *relockError) Error() string { return "meta: relock" }

// txn is one operation's view of the store: reads go to the database (the
// state committed by operations that held the same locks before), writes
// collect in a batch, and modified inode records are cached so an operation
// that touches the same directory twice (rename within a directory) sees its
// own changes.
type txn struct {
	s *Server
	// ctx is the caller's: it bounds what the txn waits for on other
	// servers before its commit (a caller that gave up stops the txn).
	ctx      context.Context
	op       string
	readOnly bool
	held     []int // stripes held, ascending
	renameMu bool
	b        *pebble.Batch
	now      int64

	inodes map[core.Ino]*weftpb.InodeRecord // owners' records, by ino
	parts  map[loc]*weftpb.InodeRecord      // partition stubs, by server and dir
	dirty  map[loc]bool                     // records to write at commit
	// counter deltas applied to the in-memory gauges after a commit: of
	// this server's inodes, and of other servers' (counters.go)
	inodeDelta, dirDelta int64
	ownerDeltas          map[int]ownerDelta

	// A txn that needs records of other meta servers runs distributed
	// (dist.go): remote holds the stripes it holds on each other server and
	// the writes it will send there.
	dist   *distState
	remote map[int]*remoteTx
	// grown lists directories whose partition here went over the split
	// threshold in this txn.
	grown []core.Ino
	// truncated lists inodes whose truncate this txn recorded for reclaim.
	truncated []core.Ino
	// revoked lists the capability revocations this txn's batch makes, for
	// the stores once it commits (capability.go).
	revoked []*weftpb.Revocation
	// routeDir and routeName are the name the client routed the request by:
	// if this server's partition does not hold it, the answer is
	// WrongServer rather than a cross-server operation.
	routeDir  core.Ino
	routeName string
	// writersChecked: commit without waiting for write-back holders
	// first (ops_batch.go); their recall at commit still holds.
	writersChecked bool
}

// loc names a record by the server that holds it and its ino.
type loc struct {
	srv int
	ino core.Ino
}

// needOwner fails with a relockError unless the txn may touch ino's
// standalone record, on its owner.
func (t *txn) needOwner(ino core.Ino) error {
	return t.needOn(t.s.ownerOf(ino), ino)
}

// needOn fails with a relockError unless the txn may touch records guarded by
// ino's stripe on meta server srv.
func (t *txn) needOn(srv int, ino core.Ino) error {
	if t.readOnly {
		return nil
	}
	held := t.held
	if srv != t.s.cfg.ID {
		rt := t.remote[srv]
		if rt == nil {
			return &relockError{ino: ino, srv: srv}
		}
		held = rt.held
	}
	if _, ok := slices.BinarySearch(held, stripeOf(ino)); ok {
		return nil
	}
	return &relockError{ino: ino, srv: srv}
}

// needRenameMu fails with a relockError unless the txn holds renameMu.
func (t *txn) needRenameMu() error {
	if t.readOnly || t.renameMu || t.dist != nil && t.dist.renameMu {
		return nil
	}
	return &relockError{renameMu: true}
}

// inode reads ino's standalone record. A missing record is errs.Stale: every
// caller reaches a standalone record through a handle or an entry that said it
// exists.
func (t *txn) inode(ino core.Ino) (*weftpb.InodeRecord, error) {
	srv, err := t.s.owner(t.op, ino)
	if err != nil {
		return nil, err
	}
	if err := t.needOn(srv, ino); err != nil {
		return nil, err
	}
	if r, ok := t.inodes[ino]; ok {
		if r == nil {
			return nil, errs.New(errs.Stale, t.op, "inode %d is gone", ino)
		}
		return r, nil
	}
	r := &weftpb.InodeRecord{}
	var found bool
	if srv == t.s.cfg.ID {
		found, err = getRecord(t.s.db, inodeKey(ino), r)
		if err == nil && found && r.Stub {
			return nil, errs.New(errs.Corrupt, t.op, "inode %d: this server owns it but holds a partition stub", ino)
		}
	} else {
		found, err = t.s.peerGet(t.ctx, t.op, srv, weftpb.PeerGetRequest_INODE, ino, "", r)
	}
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

// dir reads a directory's record for work on its entries: this server's
// partition of it (the owner's record or a stub) if it has one, else the
// owner's record. Stale if it is gone, NotDir if ino is not a directory.
func (t *txn) dir(ino core.Ino) (*weftpb.InodeRecord, error) {
	srv, err := t.s.owner(t.op, ino)
	if err != nil {
		return nil, err
	}
	var r *weftpb.InodeRecord
	if srv != t.s.cfg.ID {
		r, err = t.part(t.s.cfg.ID, ino)
		if errs.Is(err, errs.Stale) {
			r, err = nil, nil // no partition here
		}
		if err != nil {
			return nil, err
		}
	}
	if r == nil {
		if r, err = t.inode(ino); err != nil {
			return nil, err
		}
	}
	if !core.IsDir(r.Mode) {
		return nil, errs.New(errs.NotDir, t.op, "inode %d is not a directory", ino)
	}
	return r, nil
}

// dirFor reads the partition record of directory dir that holds name,
// wherever it is: this server's, or another's found through the bitmaps.
func (t *txn) dirFor(dir core.Ino, name string) (*weftpb.InodeRecord, error) {
	d, err := t.dir(dir)
	if err != nil || t.s.n == 1 {
		return d, err
	}
	h := core.NameHash(name)
	if t.dist == nil && dir == t.routeDir && name == t.routeName && !holds(d, h) {
		if d.Stub || t.s.ownerOf(dir) == t.s.cfg.ID {
			t.s.giga.redirects.Add(1)
			return nil, wrongServer(d.Bitmap)
		}
		return nil, errs.New(errs.Stale, t.op, "no partition of directory %d on this server", dir)
	}
	bitmap := slices.Clone(d.Bitmap)
	for range 2 * core.MaxServers {
		if holds(d, h) {
			return d, nil
		}
		bitmap = core.BitmapOr(bitmap, d.Bitmap)
		srv := core.PartitionServer(dir, core.PartitionOf(h, bitmap), t.s.n)
		if d, err = t.part(srv, dir); err != nil {
			return nil, err
		}
		if !core.IsDir(d.Mode) {
			return nil, errs.New(errs.NotDir, t.op, "inode %d is not a directory", dir)
		}
		if !holds(d, h) && !core.BitmapGrows(bitmap, d.Bitmap) {
			return nil, errs.New(errs.Corrupt, t.op, "no partition of directory %d holds %q", dir, name)
		}
	}
	return nil, errs.New(errs.Corrupt, t.op, "partition maps of directory %d do not converge", dir)
}

// route records the name the client routed the request by.
func (t *txn) route(dir core.Ino, name string) { t.routeDir, t.routeName = dir, name }

// part reads the partition record of dir on server srv: the owner's record
// there, a stub elsewhere. Stale if srv holds no partition of dir.
func (t *txn) part(srv int, dir core.Ino) (*weftpb.InodeRecord, error) {
	owner, err := t.s.owner(t.op, dir)
	if err != nil {
		return nil, err
	}
	if srv == owner {
		return t.inode(dir)
	}
	if err := t.needOn(srv, dir); err != nil {
		return nil, err
	}
	l := loc{srv, dir}
	if r, ok := t.parts[l]; ok {
		if r == nil {
			return nil, errs.New(errs.Stale, t.op, "no partition of directory %d on server %d", dir, srv)
		}
		return r, nil
	}
	r := &weftpb.InodeRecord{}
	var found bool
	if srv == t.s.cfg.ID {
		found, err = getRecord(t.s.db, inodeKey(dir), r)
	} else {
		found, err = t.s.peerGet(t.ctx, t.op, srv, weftpb.PeerGetRequest_PART, dir, "", r)
	}
	if err != nil {
		return nil, err
	}
	if !found || !r.Stub {
		return nil, errs.New(errs.Stale, t.op, "no partition of directory %d on server %d", dir, srv)
	}
	if t.parts == nil {
		t.parts = map[loc]*weftpb.InodeRecord{}
	}
	t.parts[l] = r
	return r, nil
}

// holds reports whether partition record d holds names with hash h.
func holds(d *weftpb.InodeRecord, h uint64) bool {
	return core.PartitionHolds(d.Partition, d.Radix, h)
}

// partServer is the meta server of partition record d of dir.
func (t *txn) partServer(dir core.Ino, d *weftpb.InodeRecord) int {
	if t.s.n == 1 {
		return t.s.cfg.ID
	}
	return core.PartitionServer(dir, d.Partition, t.s.n)
}

// putInode stores r as ino's standalone record (or, for a stub, as the
// partition record on its server) when the txn commits.
func (t *txn) putInode(ino core.Ino, r *weftpb.InodeRecord) {
	if t.dirty == nil {
		t.dirty = map[loc]bool{}
	}
	if r.Stub {
		l := loc{t.partServer(ino, r), ino}
		if t.parts == nil {
			t.parts = map[loc]*weftpb.InodeRecord{}
		}
		t.parts[l] = r
		t.dirty[l] = true
		return
	}
	if t.inodes == nil {
		t.inodes = map[core.Ino]*weftpb.InodeRecord{}
	}
	t.inodes[ino] = r
	t.dirty[loc{t.s.ownerOf(ino), ino}] = true
}

// deleteInode removes ino's standalone record and its extended attributes.
func (t *txn) deleteInode(ino core.Ino) {
	if t.inodes == nil {
		t.inodes = map[core.Ino]*weftpb.InodeRecord{}
	}
	t.inodes[ino] = nil
	srv := t.s.ownerOf(ino)
	delete(t.dirty, loc{srv, ino})
	if srv != t.s.cfg.ID {
		t.remoteOp(srv, &weftpb.KeyOp{Key: inodeKey(ino), Delete: true})
		t.remoteOp(srv, &weftpb.KeyOp{DeleteXattrsOf: uint64(ino)})
		return
	}
	t.b.Delete(inodeKey(ino), nil)
	t.deleteXattrs(ino)
}

// deletePart removes the stub of dir on server srv.
func (t *txn) deletePart(srv int, dir core.Ino) {
	l := loc{srv, dir}
	if t.parts == nil {
		t.parts = map[loc]*weftpb.InodeRecord{}
	}
	t.parts[l] = nil
	delete(t.dirty, l)
	if srv != t.s.cfg.ID {
		t.remoteOp(srv, &weftpb.KeyOp{Key: inodeKey(dir), Delete: true})
		return
	}
	t.b.Delete(inodeKey(dir), nil)
}

// deleteXattrsAt deletes ino's extended attributes on server srv.
func (t *txn) deleteXattrsAt(srv int, ino core.Ino) {
	if srv != t.s.cfg.ID {
		t.remoteOp(srv, &weftpb.KeyOp{DeleteXattrsOf: uint64(ino)})
		return
	}
	t.deleteXattrs(ino)
}

// moveXattrs moves ino's extended attributes from server from to server to,
// following its attributes (an entry that moves between servers, attributes
// that leave an entry for the owner's record). The txn holds the locks that
// guard them on both.
func (t *txn) moveXattrs(from, to int, ino core.Ino) error {
	if from == to {
		return nil
	}
	var pairs []*weftpb.KeyOp
	var err error
	if from == t.s.cfg.ID {
		pairs, err = t.s.xattrPairs(ino)
	} else {
		var r weftpb.PeerGetReply
		err = t.s.peerCall(t.ctx, t.op, from, weftpb.MethodPeerGet, &weftpb.PeerGetRequest{Kind: weftpb.PeerGetRequest_XATTRS, Ino: uint64(ino)}, &r)
		pairs = r.Pairs
	}
	if err != nil || len(pairs) == 0 {
		return err
	}
	for _, p := range pairs {
		if len(p.Key) <= 9 || p.Key[0] != tagXattr {
			return errs.New(errs.Protocol, t.op, "bad xattr key from server %d", from)
		}
		if to == t.s.cfg.ID {
			t.b.Set(p.Key, p.Value, nil)
		} else {
			t.remoteOp(to, &weftpb.KeyOp{Key: p.Key, Value: p.Value})
		}
	}
	t.deleteXattrsAt(from, ino)
	return nil
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
// The partition record d must be the one that holds name (dirFor), else the
// result is WrongServer with d's bitmap: the client's map was stale.
func (t *txn) entry(dir core.Ino, d *weftpb.InodeRecord, name string) (e *weftpb.EntryRecord, found bool, err error) {
	if !holds(d, core.NameHash(name)) {
		return nil, false, wrongServer(d.Bitmap)
	}
	srv := t.partServer(dir, d)
	if err := t.needOn(srv, dir); err != nil {
		return nil, false, err
	}
	if srv == t.s.cfg.ID && !t.readOnly {
		// A write of a name a split is copying away waits for the split
		// (splitmove.go); a read sees the entry the split copies.
		if done := t.s.giga.moving.moving(dir, d.Partition, core.NameHash(name)); done != nil {
			return nil, false, &movingError{done: done}
		}
	}
	e = &weftpb.EntryRecord{}
	if srv != t.s.cfg.ID {
		found, err = t.s.peerGet(t.ctx, t.op, srv, weftpb.PeerGetRequest_ENTRY, dir, name, e)
		return e, found, err
	}
	key := entryKeyIn(dir, d, name)
	v, found, err := getValue(t.s.db, key)
	if err != nil {
		return e, false, err
	}
	if found {
		if err := decodeRecord(key, v, e); err != nil {
			return e, false, err
		}
	}
	if !t.readOnly {
		t.s.hints.add(t.b, key, v, found)
	}
	if err == nil && !found && t.readOnly && t.s.n > 1 {
		// A view holds no lock: a split may have moved the name since d
		// was read. If the partition changed, send the client on.
		now := &weftpb.InodeRecord{}
		if ok, err := getRecord(t.s.db, inodeKey(dir), now); err == nil && ok && now.Radix != d.Radix && !holds(now, core.NameHash(name)) {
			return nil, false, wrongServer(now.Bitmap)
		}
	}
	return e, found, err
}

func (t *txn) putEntry(dir core.Ino, d *weftpb.InodeRecord, name string, e *weftpb.EntryRecord) {
	if srv := t.partServer(dir, d); srv != t.s.cfg.ID {
		t.remoteOp(srv, &weftpb.KeyOp{Key: entryKeyIn(dir, d, name), Value: mustMarshal(e)})
		return
	}
	t.b.Set(entryKeyIn(dir, d, name), mustMarshal(e), nil)
}

func (t *txn) deleteEntry(dir core.Ino, d *weftpb.InodeRecord, name string) {
	if srv := t.partServer(dir, d); srv != t.s.cfg.ID {
		t.remoteOp(srv, &weftpb.KeyOp{Key: entryKeyIn(dir, d, name), Delete: true})
		return
	}
	t.b.Delete(entryKeyIn(dir, d, name), nil)
}

// entryKeyIn is the key of name in partition record d of directory dir.
func entryKeyIn(dir core.Ino, d *weftpb.InodeRecord, name string) []byte {
	return entryKey(dir, d.Partition, name)
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
func (s *Server) view(ctx context.Context, op string, fn func(t *txn) error) error {
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.closeMu.RUnlock()
	err := fn(&txn{s: s, ctx: ctx, op: op, readOnly: true, now: s.nowNs()})
	for n := 0; isMoving(err); n++ {
		// Another server is splitting a partition this view reads.
		if err := s.awaitMove(ctx, op, err, n); err != nil {
			return err
		}
		err = fn(&txn{s: s, ctx: ctx, op: op, readOnly: true, now: s.nowNs()})
	}
	if errs.Is(err, errs.Stale) {
		err = fn(&txn{s: s, ctx: ctx, op: op, readOnly: true, now: s.nowNs()})
	}
	return err
}

// update runs a read-check-write operation under the locks it turns out to
// need, then commits its batch. In sync mode the commit is acknowledged only
// after the WAL fsync, but the locks are released before waiting for it, so
// concurrent operations (even in the same directory) share one fsync.
func (s *Server) update(ctx context.Context, op string, lock []core.Ino, fn func(t *txn) error) error {
	if f := s.failed.Load(); f != nil {
		return s.refusal(op, f)
	}
	if err := ctx.Err(); err != nil {
		return ctxError(op, err)
	}
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.closeMu.RUnlock()
	if err := s.awaitRecovery(ctx, op); err != nil {
		return err
	}
	if err := s.recallWriters(ctx, lock); err != nil {
		return err
	}
	var held []int
	for _, ino := range lock {
		held = addStripe(held, stripeOf(ino))
	}
	renameMu := false
	writerWaits := 0 // write-back holders waited for (ops_batch.go)
	for attempt, waits := 0, 0; ; attempt++ {
		if attempt-waits > 64 {
			return errs.New(errs.Busy, op, "could not settle the locks it needs")
		}
		t := &txn{s: s, ctx: ctx, op: op, held: held, renameMu: renameMu, b: s.db.NewBatch(), now: s.nowNs()}
		t.writersChecked = writerWaits >= maxWriterWaits
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
		if isMoving(err) {
			s.release(t.b)
			if err := s.awaitMove(ctx, op, err, waits); err != nil {
				return err
			}
			waits++
			continue
		}
		if recalled, werr := s.awaitWriters(ctx, err); recalled {
			s.release(t.b)
			if werr != nil {
				return werr
			}
			waits++
			writerWaits++
			continue
		}
		var rl *relockError
		if errors.As(err, &rl) {
			s.release(t.b)
			switch {
			case rl.renameMu && s.n > 1 && s.cfg.ID != 0,
				!rl.renameMu && rl.srv != s.cfg.ID:
				// The cluster's directory-move lock is server 0's, and
				// records of other servers need their locks.
				locks := lockSet{s.cfg.ID: held}
				if !rl.renameMu {
					locks.add(rl.srv, stripeOf(rl.ino))
				}
				return s.distUpdate(ctx, op, locks, renameMu || rl.renameMu, fn)
			case rl.renameMu:
				renameMu = true
			default:
				held = addStripe(held, stripeOf(rl.ino))
			}
			continue
		}
		if err != nil {
			s.release(t.b)
			return err
		}
		for _, dir := range t.grown {
			s.queueSplit(dir)
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
	for l := range t.dirty {
		r := t.inodes[l.ino]
		if pr, ok := t.parts[l]; ok {
			r = pr
		}
		if l.srv != t.s.cfg.ID {
			t.remoteOp(l.srv, &weftpb.KeyOp{Key: inodeKey(l.ino), Value: mustMarshal(r)})
			continue
		}
		t.b.Set(inodeKey(l.ino), mustMarshal(r), nil)
	}
	t.flushCounts()
}

// commitLocked applies the batch while the locks are held, so that the next
// holder reads this operation's result. In sync mode it does not wait for the
// fsync (finishCommit does, after the locks are released).
func (s *Server) commitLocked(t *txn) error {
	if err := s.checkWriters(t); err != nil {
		return err
	}
	end, err := s.changeLeases(t.ctx, t.b)
	if err != nil {
		return err
	}
	err = s.apply(t.op, t.b, s.sync)
	end()
	if err != nil {
		return err
	}
	s.addCounts(t)
	return nil
}

// finishCommit waits for the WAL fsync of a committed txn in sync mode. If
// it fails, the server stops serving the applied batch (health.go).
func (s *Server) finishCommit(t *txn) error {
	defer s.release(t.b)
	return s.syncWait(t.op, t.b, s.sync)
}

// ctxError is the error of an operation whose caller gave up (Canceled) or
// ran out of time (Timeout) before it started.
func ctxError(op string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errs.Wrap(errs.Timeout, op, "", err)
	}
	return errs.Wrap(errs.Canceled, op, "", err)
}
