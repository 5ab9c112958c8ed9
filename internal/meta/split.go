package meta

import (
	"errors"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// GIGA+ splitting. A partition p with radix r that holds more than the split
// threshold is split by its server alone into p and q = p + 2^r, on server
// (owner + q) mod N: the entries whose name hash has bit r set move. A
// partition splits only while q < N, so each server holds at most one
// partition of a directory and splitting stops when the directory spans all
// servers.
//
// Crash safety: the splitting server writes a SplitIntent, installs the new
// partition on its server (one synced batch there, replacing anything an
// earlier attempt left), then deletes the moved entries, raises its radix and
// deletes the intent in one synced batch. Until that last batch the moved
// entries stay here, and this server's ops on the directory wait for the
// split (it holds the directory's stripe), while no client can know of q.
// A restart finds the intent and does the split again. Either way every
// entry ends up in exactly one partition.

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
		err := s.split(dir)
		g.mu.Lock()
		delete(g.mu.splitting, dir)
		g.mu.Unlock()
		if err != nil && g.ctx.Err() == nil {
			s.log.Warn("meta: split failed; retried later", "dir", dir, "err", err)
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
	mu := &s.locks[stripeOf(dir)]
	mu.Lock()
	defer mu.Unlock()

	d := &weftpb.InodeRecord{}
	found, err := getRecord(s.db, inodeKey(dir), d)
	if err != nil || !found || !core.IsDir(d.Mode) {
		return true, err
	}
	intent := &weftpb.SplitIntent{}
	resumed, err := getRecord(s.db, splitKey(dir), intent)
	if err != nil {
		return true, err
	}
	if resumed {
		if intent.Partition != d.Partition || intent.Radix != d.Radix {
			// The split finished but the intent outlived it: impossible
			// with one batch, so the store is not what we wrote.
			return true, errs.New(errs.Corrupt, op, "split intent of directory %d does not match its partition", dir)
		}
	} else if !s.needsSplit(dir, d) {
		return true, nil
	}
	p, r := d.Partition, d.Radix
	q := p + 1<<r
	target := core.PartitionServer(dir, q, s.n)

	moved, subdirs, ops, dels, err := s.collectSplit(dir, p, r, q)
	if err != nil {
		return true, err
	}
	if !resumed {
		if err := s.db.Set(splitKey(dir), mustMarshal(&weftpb.SplitIntent{Partition: p, Radix: r}), pebble.Sync); err != nil {
			return true, errs.Wrap(errs.IO, op, "", err)
		}
	}
	stub := &weftpb.InodeRecord{
		Mode: d.Mode, Uid: d.Uid, Gid: d.Gid, Nlink: 2 + subdirs, Size: dirSize,
		AtimeNs: d.AtimeNs, MtimeNs: d.MtimeNs, CtimeNs: d.CtimeNs,
		Parent: d.Parent, Entries: moved, Radix: r + 1, Partition: q, Stub: true,
		Bitmap: core.BitmapSet(core.BitmapSet(slices.Clone(d.Bitmap), p), q),
	}
	if err := s.peerCall(op, target, weftpb.MethodPeerInstallPartition,
		&weftpb.PeerInstallPartitionRequest{Dir: uint64(dir), Stub: stub, Ops: ops}, &weftpb.Empty{}); err != nil {
		return true, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, k := range dels {
		b.Delete(k, nil)
	}
	d.Radix = r + 1
	d.Bitmap = core.BitmapSet(d.Bitmap, q)
	d.Entries -= min(d.Entries, moved)
	d.Nlink -= min(d.Nlink-2, subdirs)
	b.Set(inodeKey(dir), mustMarshal(d), nil)
	b.Delete(splitKey(dir), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return true, errs.Wrap(errs.IO, op, "", err)
	}
	s.giga.splits.Add(1)
	s.log.Debug("meta: split", "dir", dir, "partition", p, "new", q, "server", target, "moved", moved)
	return false, nil
}

// collectSplit reads the entries of partition p of dir whose hash has bit r
// set: the writes that install them as partition q elsewhere (with the
// extended attributes of files whose attributes live in the entry), and the
// keys to delete here.
func (s *Server) collectSplit(dir core.Ino, p, r, q uint32) (moved uint64, subdirs uint32, ops []*weftpb.KeyOp, dels [][]byte, err error) {
	const op = "split"
	pre := partPrefix(dir, p)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: prefixEnd(pre)})
	if err != nil {
		return 0, 0, nil, nil, errs.Wrap(errs.IO, op, "", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		_, h, name, ok := entrySuffix(it.Key())
		if !ok {
			return 0, 0, nil, nil, errs.New(errs.Corrupt, op, "bad entry key %q", it.Key())
		}
		if h&(1<<r) == 0 {
			continue
		}
		e := &weftpb.EntryRecord{}
		if err := proto.Unmarshal(it.Value(), e); err != nil {
			return 0, 0, nil, nil, errs.Wrap(errs.Corrupt, op, name, err)
		}
		moved++
		if core.IsDir(e.Mode) {
			subdirs++
		}
		dels = append(dels, slices.Clone(it.Key()))
		ops = append(ops, &weftpb.KeyOp{Key: entryKey(dir, q, name), Value: slices.Clone(it.Value())})
		if e.Attr == nil {
			continue // the record, and its xattrs, stay with the ino's owner
		}
		xp := xattrPrefix(core.Ino(e.Ino))
		xit, err := s.db.NewIter(&pebble.IterOptions{LowerBound: xp, UpperBound: prefixEnd(xp)})
		if err != nil {
			return 0, 0, nil, nil, errs.Wrap(errs.IO, op, "", err)
		}
		for xit.First(); xit.Valid(); xit.Next() {
			dels = append(dels, slices.Clone(xit.Key()))
			ops = append(ops, &weftpb.KeyOp{Key: slices.Clone(xit.Key()), Value: slices.Clone(xit.Value())})
		}
		if err := errors.Join(xit.Error(), xit.Close()); err != nil {
			return 0, 0, nil, nil, errs.Wrap(errs.IO, op, "", err)
		}
	}
	return moved, subdirs, ops, dels, errs.Wrap(errs.IO, op, "", it.Error())
}
