package meta

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// GIGA+ splitting. A partition p with radix r that holds more than the split
// threshold is split by its server alone. A binary split makes p and
// q = p + 2^r, on server (owner + q) mod N: the entries whose name hash has
// bit r set move. One split does up to SplitBits such levels at once (as
// CephFS splits a directory fragment 2^mds_bal_split_bits ways): p and every
// partition a level makes split again in the next, so a 3-bit split of p
// makes up to 8 partitions of radix r + 3, exactly what three rounds of
// binary splits would make, without waiting for each to fill up. A
// partition splits only while its q < N, so each server holds at most one
// partition of a directory and splitting stops when the directory spans all
// servers.
//
// Crash safety: the splitting server writes a SplitIntent, installs each new
// partition on its server (one synced batch there, replacing anything an
// earlier attempt left), then deletes the moved entries, raises its radix and
// deletes the intent in one synced batch. Until that last batch the moved
// entries stay here, while no client can know of the new partitions. A
// restart finds the intent and does the same split again. Either way every
// entry ends up in exactly one partition.
//
// No lock is held across the installs: the split takes the directory's
// stripe to read what moves and mark it moving (splitmove.go), and again to
// commit. Meanwhile the names that stay are served as usual and writes of
// the moving ones wait, so the final batch applies the moves to the
// partition record as it is then (entry count, nlink, times, bitmap), not
// to the copy read before the installs. A failed install removes what it
// did install (as far as those servers answer), clears the mark and leaves
// the intent; the replay tries again a replay interval later.

// grew notes that partition record d of dir gained entries; update queues a
// split after the commit if d is over the threshold.
func (t *txn) grew(dir core.Ino, d *weftpb.InodeRecord) {
	if t.s.n == 1 || t.partServer(dir, d) != t.s.cfg.ID || !t.s.needsSplit(dir, d) {
		return
	}
	t.grown = append(t.grown, dir)
}

func (s *Server) needsSplit(dir core.Ino, d *weftpb.InodeRecord) bool {
	if d.Radix >= 31 {
		return false
	}
	q := uint64(d.Partition) + 1<<d.Radix
	return d.Entries > uint64(s.cfg.SplitThreshold) && q < uint64(s.n) && core.IsDir(d.Mode)
}

// queueSplit splits dir's partition here in the background unless a split of
// it is already queued.
func (s *Server) queueSplit(dir core.Ino) {
	g := &s.giga
	g.mu.Lock()
	if g.mu.splitting[dir] || g.ctx.Err() != nil {
		g.mu.Unlock()
		return
	}
	g.mu.splitting[dir] = true
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		err := s.awaitRecovery(g.ctx, "split")
		if err == nil {
			err = s.split(dir)
		}
		if err != nil && g.ctx.Err() == nil {
			s.log.Warn("meta: split failed; retried later", "dir", dir, "err", err)
			// Not at once: each attempt makes the writes of the moving
			// names wait, and a target that is down fails it again.
			t := time.NewTimer(replayInterval)
			select {
			case <-t.C:
			case <-g.ctx.Done():
				t.Stop()
			}
		}
		g.mu.Lock()
		delete(g.mu.splitting, dir)
		g.mu.Unlock()
		if err != nil && g.ctx.Err() == nil {
			s.kickReplay()
		}
	}()
}

// split splits this server's partition of dir while it is over the
// threshold (an interrupted split is finished first).
func (s *Server) split(dir core.Ino) error {
	for {
		done, err := s.splitOnce(dir)
		if err != nil || done {
			return err
		}
	}
}

// splitOnce does one split step; done says there is nothing more to split.
func (s *Server) splitOnce(dir core.Ino) (done bool, err error) {
	const op = "split"
	if err := s.enter(op); err != nil {
		return true, nil
	}
	defer s.closeMu.RUnlock()
	start := time.Now()
	pl, err := s.planMove(dir)
	if err != nil || pl == nil {
		return true, err
	}
	defer s.giga.moving.end(dir, pl.mark)
	collected := time.Now()
	if err := s.installMove(dir, pl); err != nil {
		s.uninstallMove(dir, pl)
		return true, err
	}
	if err := s.failpoint(FailSplitInstalled); err != nil {
		return true, err
	}
	installed := time.Now()
	moved, d, err := s.commitMove(dir, pl)
	if err != nil {
		return true, err
	}
	if d.Mode != pl.d.Mode || d.Uid != pl.d.Uid || d.Gid != pl.d.Gid {
		// A chmod or chown during the installs missed the new
		// partitions' stubs, which check permissions for their names.
		s.copyPerm(dir, d, pl.parts[1:])
	}
	s.giga.splits.Add(1)
	s.log.Debug("meta: split", "dir", dir, "partition", pl.intent.Partition, "partitions", len(pl.parts),
		"moved", moved, "took", time.Since(start), "prepare", collected.Sub(start),
		"install", installed.Sub(collected), "commit", time.Since(installed))
	return false, nil
}

// splitPlan is one split step: the partition record when it began, what
// moves where, and the mark that makes writes of the moving names wait.
type splitPlan struct {
	d      *weftpb.InodeRecord
	intent *weftpb.SplitIntent
	parts  []splitPart
	moves  map[uint32]*splitMove
	bitmap []byte // d's bitmap with the new partitions
	mark   *movingPart
}

// lockStripe takes dir's stripe for a split step and returns its unlock. A
// plain Lock, not lockCtx: polling would starve behind a busy directory's
// operations, which queue on the mutex.
func (s *Server) lockStripe(dir core.Ino) (unlock func()) {
	mu := &s.locks[stripeOf(dir)]
	mu.Lock()
	return mu.Unlock
}

// planMove reads what a split of this server's partition of dir moves,
// writes the intent and marks the moving names, under dir's stripe. nil
// means there is nothing to split.
func (s *Server) planMove(dir core.Ino) (*splitPlan, error) {
	const op = "split"
	defer s.lockStripe(dir)()
	d := &weftpb.InodeRecord{}
	found, err := getRecord(s.db, inodeKey(dir), d)
	if err != nil || !found || !core.IsDir(d.Mode) {
		return nil, err
	}
	intent := &weftpb.SplitIntent{}
	resumed, err := getRecord(s.db, splitKey(dir), intent)
	if err != nil {
		return nil, err
	}
	if resumed {
		if intent.Partition != d.Partition || intent.Radix != d.Radix {
			// The split finished but the intent outlived it: impossible
			// with one batch, so the store is not what we wrote.
			return nil, errs.New(errs.Corrupt, op, "split intent of directory %d does not match its partition", dir)
		}
	} else {
		if !s.needsSplit(dir, d) {
			return nil, nil
		}
		intent = &weftpb.SplitIntent{Partition: d.Partition, Radix: d.Radix, Bits: uint32(s.cfg.SplitBits)}
	}
	pl := &splitPlan{d: d, intent: intent, parts: planSplit(d.Partition, d.Radix, int(max(intent.Bits, 1)), s.n)}
	if pl.moves, err = s.collectSplit(dir, d.Partition, d.Radix, pl.parts); err != nil {
		return nil, err
	}
	if !resumed {
		if err := s.setSync(op, splitKey(dir), mustMarshal(intent)); err != nil {
			return nil, err
		}
	}
	if err := s.failpoint(FailSplitIntentWritten); err != nil {
		return nil, err
	}
	pl.bitmap = slices.Clone(d.Bitmap)
	for _, pt := range pl.parts {
		pl.bitmap = core.BitmapSet(pl.bitmap, pt.p)
	}
	pl.mark = s.giga.moving.begin(dir, d.Partition, d.Radix, pl.parts[0].radix)
	return pl, nil
}

// installMove installs the new partitions on their servers, holding no
// lock. They go out together: the split takes as long as the slowest, not
// their sum.
func (s *Server) installMove(dir core.Ino, pl *splitPlan) error {
	const op = "split"
	d := pl.d
	errc := make(chan error, len(pl.parts))
	for _, pt := range pl.parts[1:] {
		m := pl.moves[pt.p]
		stub := &weftpb.InodeRecord{
			Mode: d.Mode, Uid: d.Uid, Gid: d.Gid, Nlink: 2 + m.subdirs, Size: dirSize,
			AtimeNs: d.AtimeNs, MtimeNs: d.MtimeNs, CtimeNs: d.CtimeNs,
			Parent: d.Parent, Entries: m.entries, Radix: pt.radix, Partition: pt.p, Stub: true,
			Bitmap: pl.bitmap,
		}
		go func() {
			errc <- s.peerCall(s.giga.ctx, op, core.PartitionServer(dir, pt.p, s.n), weftpb.MethodPeerInstallPartition,
				&weftpb.PeerInstallPartitionRequest{Dir: uint64(dir), Stub: stub, Ops: m.ops}, &weftpb.Empty{})
		}()
	}
	var errList []error
	for range pl.parts[1:] {
		errList = append(errList, <-errc)
	}
	return errors.Join(errList...)
}

// uninstallMove removes, as far as their servers answer, the partitions a
// failed split step installed: a stub nobody routes to must not take the
// writes its own server's cross-server operations would send it until the
// split is tried again (which replaces it).
func (s *Server) uninstallMove(dir core.Ino, pl *splitPlan) {
	var wg sync.WaitGroup
	for _, pt := range pl.parts[1:] {
		ops := []*weftpb.KeyOp{{Key: inodeKey(dir), Delete: true}}
		for _, o := range pl.moves[pt.p].ops {
			ops = append(ops, &weftpb.KeyOp{Key: o.Key, Delete: true})
		}
		srv := core.PartitionServer(dir, pt.p, s.n)
		wg.Go(func() {
			if err := s.peerCall(s.giga.ctx, "split", srv, weftpb.MethodPeerApply, &weftpb.PeerApplyRequest{Ops: ops}, &weftpb.Empty{}); err != nil {
				s.log.Debug("meta: removing the partition of a failed split", "dir", dir, "server", srv, "err", err)
			}
		})
	}
	wg.Wait()
}

// commitMove deletes the moved entries here, raises the partition's radix
// and deletes the intent, in one synced batch under dir's stripe, and ends
// the mark. The partition record is read again: operations on the names
// that stay changed it during the installs. It returns how many entries
// moved and the record written.
func (s *Server) commitMove(dir core.Ino, pl *splitPlan) (uint64, *weftpb.InodeRecord, error) {
	const op = "split"
	defer s.lockStripe(dir)()
	d := &weftpb.InodeRecord{}
	found, err := getRecord(s.db, inodeKey(dir), d)
	if err != nil {
		return 0, nil, err
	}
	if !found || d.Partition != pl.d.Partition || d.Radix != pl.d.Radix {
		// Only this split changes the radix, and a directory with
		// entries is not removed.
		return 0, nil, errs.New(errs.Corrupt, op, "partition %d of directory %d changed during its split", pl.d.Partition, dir)
	}
	b := s.db.NewBatch()
	defer s.release(b)
	var moved uint64
	var subdirs uint32
	for _, pt := range pl.parts[1:] {
		m := pl.moves[pt.p]
		for _, k := range m.dels {
			b.Delete(k, nil)
		}
		moved += m.entries
		subdirs += m.subdirs
	}
	d.Radix = pl.parts[0].radix
	d.Bitmap = core.BitmapOr(d.Bitmap, pl.bitmap)
	d.Entries -= min(d.Entries, moved)
	d.Nlink -= min(d.Nlink-min(d.Nlink, 2), subdirs)
	b.Set(inodeKey(dir), mustMarshal(d), nil)
	b.Delete(splitKey(dir), nil)
	if err := s.commit(op, b, true); err != nil {
		return 0, nil, err
	}
	s.giga.moving.end(dir, pl.mark)
	return moved, d, nil
}

// copyPerm copies directory record d's mode and owner to the stubs of the
// given partitions, as spreadPerm does for a chmod.
func (s *Server) copyPerm(dir core.Ino, d *weftpb.InodeRecord, parts []splitPart) {
	req := &weftpb.PeerSetPermRequest{Dir: uint64(dir), Mode: d.Mode, Uid: d.Uid, Gid: d.Gid}
	for _, pt := range parts {
		srv := core.PartitionServer(dir, pt.p, s.n)
		if err := s.peerCall(s.giga.ctx, "split", srv, weftpb.MethodPeerSetPerm, req, &weftpb.Empty{}); err != nil {
			s.log.Warn("meta: could not copy directory permissions to a new partition", "dir", dir, "server", srv, "err", err)
		}
	}
}

// splitPart is a partition and its radix.
type splitPart struct{ p, radix uint32 }

// planSplit returns the partitions that splitting partition p of radix r
// bits levels deep makes among n servers: p itself first (with its new
// radix), then the new ones. At each level every partition splits into
// itself and q = p + 2^radix, while q < n.
func planSplit(p, r uint32, bits, n int) []splitPart {
	parts := []splitPart{{p, r}}
	for range bits {
		var next []splitPart
		for _, x := range parts {
			if x.radix >= 31 || uint64(x.p)+1<<x.radix >= uint64(n) {
				next = append(next, x)
				continue
			}
			next = append(next, splitPart{x.p, x.radix + 1}, splitPart{x.p + 1<<x.radix, x.radix + 1})
		}
		parts = next
	}
	slices.SortFunc(parts[1:], func(a, b splitPart) int { return int(a.p) - int(b.p) })
	return parts
}

// splitMove is what goes to one new partition.
type splitMove struct {
	entries uint64
	subdirs uint32
	ops     []*weftpb.KeyOp // writes that install its entries (and xattrs) there
	dels    [][]byte        // the keys to delete here
}

// collectSplit reads the entries of partition p (radix r) of dir that
// belong to another partition of parts, grouped by that partition, with
// the extended attributes of files whose attributes live in the entry.
func (s *Server) collectSplit(dir core.Ino, p, r uint32, parts []splitPart) (map[uint32]*splitMove, error) {
	const op = "split"
	moves := make(map[uint32]*splitMove, len(parts))
	for _, pt := range parts[1:] {
		moves[pt.p] = &splitMove{}
	}
	dest := func(h uint64) uint32 {
		for _, pt := range parts {
			if uint32(h&(1<<pt.radix-1)) == pt.p {
				return pt.p
			}
		}
		return p // unreachable: the parts cover partition p
	}
	pre := partPrefix(dir, p)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: prefixEnd(pre)})
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, "", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		_, h, name, ok := entrySuffix(it.Key())
		if !ok {
			return nil, errs.New(errs.Corrupt, op, "bad entry key %q", it.Key())
		}
		q := dest(h)
		if q == p {
			continue
		}
		m := moves[q]
		e := &weftpb.EntryRecord{}
		if err := proto.Unmarshal(it.Value(), e); err != nil {
			return nil, errs.Wrap(errs.Corrupt, op, name, err)
		}
		m.entries++
		if core.IsDir(e.Mode) {
			m.subdirs++
		}
		m.dels = append(m.dels, slices.Clone(it.Key()))
		m.ops = append(m.ops, &weftpb.KeyOp{Key: entryKey(dir, q, name), Value: slices.Clone(it.Value())})
		if e.Attr == nil {
			continue // the record, and its xattrs, stay with the ino's owner
		}
		xp := xattrPrefix(core.Ino(e.Ino))
		xit, err := s.db.NewIter(&pebble.IterOptions{LowerBound: xp, UpperBound: prefixEnd(xp)})
		if err != nil {
			return nil, errs.Wrap(errs.IO, op, "", err)
		}
		for xit.First(); xit.Valid(); xit.Next() {
			m.dels = append(m.dels, slices.Clone(xit.Key()))
			m.ops = append(m.ops, &weftpb.KeyOp{Key: slices.Clone(xit.Key()), Value: slices.Clone(xit.Value())})
		}
		if err := errors.Join(xit.Error(), xit.Close()); err != nil {
			return nil, errs.Wrap(errs.IO, op, "", err)
		}
	}
	return moves, errs.Wrap(errs.IO, op, "", it.Error())
}
