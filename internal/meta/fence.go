package meta

import (
	"context"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/proto/weftpb"
)

// Fencing the replay of a cross-server operation.
//
// A participant holds a coordinator's locks (by txid) from PeerLock until
// the coordinator's writes are in and it unlocks, or until the lock lease
// ends. If the coordinator dies after writing its intent and the lease ends
// before it replays, a later operation may change the same keys; the replay
// of writes computed before it would then overwrite it. So a participant
// applies a coordinator's writes only under that txn's locks:
//
//   - When locks go without an unlock from their coordinator (the lease
//     ended, the restarted coordinator released them, the server closes),
//     the participant first records a fence for the txid, durably, saying
//     whether the txn's writes were applied; only then are the locks
//     released.
//   - PeerApply for a txid whose locks are not held consults the fence:
//     applied means the writes are in (the replay is a no-op, and a
//     counter delta is not added twice), not applied means refused with
//     errs.Stale: the keys may have changed since.
//   - A coordinator whose replay is refused by every participant and that
//     has applied nothing of the operation (its own writes are still in the
//     intent) abandons the operation: nothing of it ever happened, and its
//     client was never answered. If some participant did apply, the
//     operation is finished without the refused parts, and the server logs
//     an error naming them: weft fsck reports what is inconsistent.
//   - The coordinator never unlocks a participant whose writes did not
//     arrive, so that the replay finds the locks held; and a restarted
//     coordinator replays its intents before it releases its old locks
//     everywhere.
//
// Every apply fences the txn as applied in its own batch, so a replay that
// comes after this server restarted (or after the coordinator died again)
// is a no-op. The coordinator's unlock drops that fence: its intent no
// longer names this server. A participant that crashes loses its locks
// without a trace; after the restart it admits no write until its peers
// replayed what they owe it (recovery.go), so a replay that finds neither
// locks nor a fence is applied onto the records as the crash left them.
// Fences of lost locks are not deleted: they are rare.

// fenceKey keys a fence (layout.TagFence): one byte, 1 if the txn's writes
// were applied here, 0 if not.
func fenceKey(txid uint64) []byte { return layout.FenceKey(txid) }

// loseLocks records fences for the given txns' locks, then releases them.
// The caller has marked each as expiring (so PeerApply leaves them alone).
func (s *Server) loseLocks(op string, lost map[uint64]*heldLocks) {
	if len(lost) == 0 {
		return
	}
	if err := s.enter(op); err == nil {
		b := s.db.NewBatch()
		for txid, h := range lost {
			v := byte(0)
			if h.applied {
				v = 1
			}
			b.Set(fenceKey(txid), []byte{v}, nil)
		}
		if err := s.commit(op, b, true); err != nil {
			// The store failed: no write will follow the release either.
			s.log.Error("meta: fencing lost locks failed", "err", err)
		}
		s.release(b)
		s.closeMu.RUnlock()
	}
	g := &s.giga
	g.mu.Lock()
	defer g.mu.Unlock()
	for txid, h := range lost {
		if g.mu.held[txid] == h {
			s.releaseHeldLocked(txid, h)
		}
	}
}

// dropFence deletes the applied fence of a txn whose coordinator settled
// it. Not synced: a fence that outlives a crash only takes a few bytes.
func (s *Server) dropFence(txid uint64) {
	if err := s.enter("peer unlock"); err != nil {
		return
	}
	defer s.closeMu.RUnlock()
	b := s.db.NewBatch()
	defer s.release(b)
	b.Delete(fenceKey(txid), nil)
	if err := s.commit("peer unlock", b, false); err != nil {
		s.log.Warn("meta: dropping a settled fence failed", "err", err)
	}
}

// expireLocks ends the lease of txid's locks, unless they were released or
// an apply is using them (which renews the lease).
func (s *Server) expireLocks(txid uint64, h *heldLocks) {
	g := &s.giga
	g.mu.Lock()
	if g.mu.held[txid] != h || h.state != lockHeld {
		g.mu.Unlock()
		return
	}
	h.state = lockExpiring
	g.mu.Unlock()
	s.log.Warn("meta: released locks of a coordinator that went silent", "txid", txid, "applied", h.applied)
	s.loseLocks("lock lease", map[uint64]*heldLocks{txid: h})
}

// beginApply decides what PeerApply does for txid: apply (h is the txn's
// locks, now marked applying, or nil if this server knows nothing of the
// txn), or nothing (done: the writes are already in).
func (s *Server) beginApply(op string, txid uint64) (h *heldLocks, done bool, err error) {
	g := &s.giga
	g.mu.Lock()
	h = g.mu.held[txid]
	if h != nil {
		defer g.mu.Unlock()
		switch {
		case h.state != lockHeld:
			return nil, false, errs.New(errs.Busy, op, "locks of txn %x are being released", txid)
		case h.applied:
			return h, true, nil
		}
		h.state = lockApplying
		return h, false, nil
	}
	g.mu.Unlock()
	v, found, err := getValue(s.db, fenceKey(txid))
	switch {
	case err != nil:
		return nil, false, err
	case !found:
		return nil, false, nil
	case len(v) == 1 && v[0] == 1:
		return nil, true, nil
	}
	return nil, false, errs.New(errs.Stale, op, "txn %x lost its locks here before its writes arrived: later operations may have changed the keys", txid)
}

// endApply settles the locks after PeerApply: applied if it succeeded,
// released unless the coordinator keeps them.
func (s *Server) endApply(txid uint64, h *heldLocks, applied, keep bool) {
	g := &s.giga
	g.mu.Lock()
	defer g.mu.Unlock()
	if h == nil {
		h = g.mu.held[txid]
		if h == nil {
			return
		}
	}
	if g.mu.held[txid] != h {
		return
	}
	if h.state == lockApplying {
		h.state = lockHeld
		h.timer.Reset(s.cfg.lockLease)
	}
	h.applied = h.applied || applied
	if !keep {
		s.releaseHeldLocked(txid, h)
	}
}

// PeerApply applies a coordinator's writes in one synced batch, under the
// txn's locks (see the fencing above), and releases them unless asked to
// keep them.
func (s *Server) PeerApply(ctx context.Context, req *weftpb.PeerApplyRequest) (*weftpb.Empty, error) {
	const op = "peer apply"
	if err := s.enter(op); err != nil {
		return nil, err
	}
	defer s.closeMu.RUnlock()
	if err := s.refuseMoving(req.Ops); err != nil {
		return nil, err
	}
	var h *heldLocks
	if req.Txid != 0 {
		var done bool
		var err error
		if h, done, err = s.beginApply(op, req.Txid); err != nil {
			return nil, err
		}
		if done {
			s.endApply(req.Txid, h, true, req.KeepLocks)
			return &weftpb.Empty{}, nil
		}
	}
	// The same batch fences the txn as applied, so that a replay after
	// this server restarts, or after the coordinator dies again before it
	// settles its intent, is a no-op rather than a second apply (counter
	// deltas would count twice) or a late overwrite. The coordinator's
	// unlock, once its intent no longer names this server, drops it.
	var fence []byte
	if req.Txid != 0 {
		fence = fenceKey(req.Txid)
	}
	err := s.applyOps(op, req.Ops, fence)
	if req.Txid != 0 {
		s.endApply(req.Txid, h, err == nil, req.KeepLocks || err != nil)
	}
	if err != nil {
		return nil, err
	}
	return &weftpb.Empty{}, nil
}

// applyOps writes a coordinator's KeyOps in one synced batch, and an
// applied fence at fence if it is not nil.
func (s *Server) applyOps(op string, ops []*weftpb.KeyOp, fence []byte) error {
	b := s.db.NewBatch()
	defer s.release(b)
	if fence != nil {
		b.Set(fence, []byte{1}, nil)
	}
	var inodes, dirs int64
	for _, o := range ops {
		if err := s.applyKeyOp(b, o); err != nil {
			return err
		}
		inodes += o.InodeDelta
		dirs += o.DirDelta
	}
	if err := s.commit(op, b, true); err != nil {
		return err
	}
	s.inodes.Add(inodes)
	s.dirs.Add(dirs)
	return nil
}
