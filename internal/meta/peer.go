package meta

import (
	"context"
	"errors"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// Handlers of the calls meta servers make to each other (dist.go, split.go).
// They trust their caller only as far as the wire allows: keys and records
// are checked for shape, never assumed.

// PeerLock takes stripes (and the directory-move lock) for a coordinator.
func (s *Server) PeerLock(ctx context.Context, req *weftpb.PeerLockRequest) (*weftpb.Empty, error) {
	const op = "peer lock"
	if f := s.failed.Load(); f != nil {
		// It could not apply the writes: fail the coordinator at once.
		return nil, s.refusal(op, f)
	}
	if err := s.enter(op); err != nil {
		return nil, err
	}
	defer s.closeMu.RUnlock()
	if req.RenameMu && s.cfg.ID != 0 {
		return nil, errs.New(errs.Invalid, op, "the directory-move lock is server 0's")
	}
	stripes := make([]int, 0, len(req.Stripes))
	for i, st := range req.Stripes {
		if st >= lockStripes || (i > 0 && st <= req.Stripes[i-1]) {
			return nil, errs.New(errs.Invalid, op, "stripes must ascend below %d", lockStripes)
		}
		stripes = append(stripes, int(st))
	}
	if err := s.lockFor(ctx, req.Txid, stripes, req.RenameMu); err != nil {
		return nil, err
	}
	return &weftpb.Empty{}, nil
}

// PeerUnlock releases a coordinator's locks.
func (s *Server) PeerUnlock(ctx context.Context, req *weftpb.PeerUnlockRequest) (*weftpb.Empty, error) {
	if s.releaseHeld(req.Txid) {
		s.dropFence(req.Txid)
	}
	return &weftpb.Empty{}, nil
}

// PeerRelease releases every lock held for a previous life of a coordinator
// that restarted (and has replayed its intents), fencing them (fence.go).
// Its new life's txns, at or above BelowTxid, keep theirs.
func (s *Server) PeerRelease(ctx context.Context, req *weftpb.PeerReleaseRequest) (*weftpb.Empty, error) {
	g := &s.giga
	lost := map[uint64]*heldLocks{}
	g.mu.Lock()
	for txid, h := range g.mu.held {
		if uint32(txid>>48) == req.Coordinator && h.state == lockHeld && (req.BelowTxid == 0 || txid < req.BelowTxid) {
			h.state = lockExpiring
			lost[txid] = h
		}
	}
	g.mu.Unlock()
	s.loseLocks("peer release", lost)
	// The coordinator restarted, perhaps after a crash that lost locks it
	// held here as a participant: what this server owes it goes first
	// (recovery.go).
	if pending, err := s.replayOnce(int(req.Coordinator)); err != nil || pending {
		return nil, errs.Wrap(errs.Unavailable, "peer release", "", cmp(err, errs.New(errs.Unavailable, "peer release", "writes for server %d still unfinished", req.Coordinator)))
	}
	return &weftpb.Empty{}, nil
}

// PeerGet reads one record for a coordinator, which holds its lock (or reads
// without one, as a view).
func (s *Server) PeerGet(ctx context.Context, req *weftpb.PeerGetRequest) (*weftpb.PeerGetReply, error) {
	const op = "peer get"
	if err := s.enter(op); err != nil {
		return nil, err
	}
	defer s.closeMu.RUnlock()
	ino := core.Ino(req.Ino)
	switch req.Kind {
	case weftpb.PeerGetRequest_INODE, weftpb.PeerGetRequest_PART:
		v, found, err := getValue(s.db, inodeKey(ino))
		if err != nil || !found {
			return &weftpb.PeerGetReply{}, err
		}
		return &weftpb.PeerGetReply{Found: true, Record: v}, nil
	case weftpb.PeerGetRequest_ENTRY:
		if err := validName(op, req.Name); err != nil {
			return nil, err
		}
		d := &weftpb.InodeRecord{}
		found, err := getRecord(s.db, inodeKey(ino), d)
		if err != nil {
			return nil, err
		}
		if !found || !core.IsDir(d.Mode) {
			return nil, errs.New(errs.Stale, op, "no partition of directory %d here", ino)
		}
		if !holds(d, core.NameHash(req.Name)) {
			return nil, wrongServer(d.Bitmap)
		}
		if s.giga.moving.moving(ino, d.Partition, core.NameHash(req.Name)) != nil {
			// The caller may hold this stripe, which the split needs
			// to commit: it waits without its locks (splitmove.go).
			return nil, errMoving
		}
		key := entryKeyIn(ino, d, req.Name)
		v, found, err := getValue(s.db, key)
		if err != nil || !found {
			return &weftpb.PeerGetReply{}, err
		}
		return &weftpb.PeerGetReply{Found: true, Record: v, Key: key}, nil
	case weftpb.PeerGetRequest_XATTRS:
		pairs, err := s.xattrPairs(ino)
		if err != nil {
			return nil, err
		}
		return &weftpb.PeerGetReply{Found: len(pairs) > 0, Pairs: pairs}, nil
	}
	return nil, errs.New(errs.Invalid, op, "kind %d", req.Kind)
}

// xattrPairs returns the extended attributes of ino kept on this server.
func (s *Server) xattrPairs(ino core.Ino) ([]*weftpb.KeyOp, error) {
	p := xattrPrefix(ino)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, errs.Wrap(errs.IO, "xattrs", "", err)
	}
	var out []*weftpb.KeyOp
	for it.First(); it.Valid(); it.Next() {
		out = append(out, &weftpb.KeyOp{Key: slices.Clone(it.Key()), Value: slices.Clone(it.Value())})
	}
	return out, errs.Wrap(errs.IO, "xattrs", "", errors.Join(it.Error(), it.Close()))
}

// applyKeyOp adds one remote write to b. Only inode, entry and xattr keys may
// be written by another server.
func (s *Server) applyKeyOp(b *pebble.Batch, o *weftpb.KeyOp) error {
	const op = "peer apply"
	if o.DeleteXattrsOf != 0 {
		p := xattrPrefix(core.Ino(o.DeleteXattrsOf))
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
		if err != nil {
			return errs.Wrap(errs.IO, op, "", err)
		}
		for it.First(); it.Valid(); it.Next() {
			b.Delete(slices.Clone(it.Key()), nil)
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return errs.Wrap(errs.IO, op, "", err)
		}
	}
	if o.InodeDelta != 0 {
		b.Merge(keyInodes, counterDelta(o.InodeDelta), nil)
	}
	if o.DirDelta != 0 {
		b.Merge(keyDirs, counterDelta(o.DirDelta), nil)
	}
	if len(o.Key) == 0 {
		return nil
	}
	switch {
	case o.Key[0] == tagInode && len(o.Key) == 9:
		if !o.Delete {
			if err := proto.Unmarshal(o.Value, &weftpb.InodeRecord{}); err != nil {
				return errs.Wrap(errs.Protocol, op, "inode record", err)
			}
		}
	case o.Key[0] == tagEntry && len(o.Key) >= 9+4+8+1:
		if !o.Delete {
			if err := proto.Unmarshal(o.Value, &weftpb.EntryRecord{}); err != nil {
				return errs.Wrap(errs.Protocol, op, "entry record", err)
			}
		}
	case o.Key[0] == tagXattr && len(o.Key) > 9:
	case o.Key[0] == tagReclaim && len(o.Key) == 17:
		// weft gc --release-held rewrites a held reclaim record.
		if !o.Delete {
			if err := proto.Unmarshal(o.Value, &weftpb.ReclaimRecord{}); err != nil {
				return errs.Wrap(errs.Protocol, op, "reclaim record", err)
			}
		}
	default:
		return errs.New(errs.Invalid, op, "key %q is not one another server may write", o.Key)
	}
	if o.Delete {
		b.Delete(o.Key, nil)
	} else {
		b.Set(o.Key, o.Value, nil)
	}
	return nil
}

// PeerInstallPartition creates a partition split off by another server.
func (s *Server) PeerInstallPartition(ctx context.Context, req *weftpb.PeerInstallPartitionRequest) (*weftpb.Empty, error) {
	const op = "install partition"
	if f := s.failed.Load(); f != nil {
		return nil, s.refusal(op, f)
	}
	if err := s.enter(op); err != nil {
		return nil, err
	}
	defer s.closeMu.RUnlock()
	dir := core.Ino(req.Dir)
	st := req.Stub
	if st == nil || !st.Stub || !core.IsDir(st.Mode) || st.Partition == 0 {
		return nil, errs.New(errs.Invalid, op, "not a partition stub")
	}
	if s.n == 1 || core.PartitionServer(dir, st.Partition, s.n) != s.cfg.ID {
		return nil, errs.New(errs.Invalid, op, "partition %d of directory %d is not this server's", st.Partition, dir)
	}
	if err := s.failpoint(FailInstallReceived); err != nil {
		return nil, err
	}
	b := s.db.NewBatch()
	defer s.release(b)
	// Replace whatever an interrupted earlier attempt left.
	p := partPrefix(dir, st.Partition)
	b.DeleteRange(p, prefixEnd(p), nil)
	b.Set(inodeKey(dir), mustMarshal(st), nil)
	for _, o := range req.Ops {
		if len(o.Key) == 0 || o.Delete || (o.Key[0] != tagEntry && o.Key[0] != tagXattr) {
			return nil, errs.New(errs.Invalid, op, "bad entry or xattr write")
		}
		if err := s.applyKeyOp(b, o); err != nil {
			return nil, err
		}
	}
	if err := s.commit(op, b, true); err != nil {
		return nil, err
	}
	return &weftpb.Empty{}, nil
}

// PeerSetPerm copies a directory's new mode and owner into this server's
// stub of it.
func (s *Server) PeerSetPerm(ctx context.Context, req *weftpb.PeerSetPermRequest) (*weftpb.Empty, error) {
	const op = "peer setperm"
	dir := core.Ino(req.Dir)
	err := s.update(ctx, op, []core.Ino{dir}, func(t *txn) error {
		r := &weftpb.InodeRecord{}
		found, err := getRecord(s.db, inodeKey(dir), r)
		if err != nil || !found || !r.Stub {
			return err
		}
		r.Mode = core.ModeDir | req.Mode&^core.ModeType
		r.Uid, r.Gid = req.Uid, req.Gid
		t.b.Set(inodeKey(dir), mustMarshal(r), nil)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &weftpb.Empty{}, nil
}
