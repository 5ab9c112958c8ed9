package client

import (
	"time"

	"context"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Sending write-back batches and reserving inode numbers (writeback.go).

// queueLocked adds op, which names names, to w's open batch. A batch never
// holds two ops on one name (the server reads the state before the batch),
// so a name already in it, or a full batch, seals it first.
func (w *wbDir) queueLocked(op *weftpb.BatchOp, names ...string) {
	full := len(w.mu.open) >= wbMaxBatch
	for _, n := range names {
		full = full || w.mu.used[n]
	}
	if full {
		w.sealLocked()
	}
	if len(w.mu.open) == 0 && len(w.mu.sealed) == 0 {
		w.mu.oldest = time.Now()
	}
	if w.mu.used == nil {
		w.mu.used = make(map[string]bool)
	}
	for _, n := range names {
		w.mu.used[n] = true
		w.nameLocked(n).pending++
	}
	w.mu.open = append(w.mu.open, op)
}

func (w *wbDir) sealLocked() {
	if len(w.mu.open) == 0 {
		return
	}
	w.mu.sealed = append(w.mu.sealed, w.mu.open)
	w.mu.open, w.mu.used, w.mu.creates = nil, nil, nil
}

// nameLocked returns the overlay record of name, made if missing.
func (w *wbDir) nameLocked(name string) *wbName {
	n := w.mu.names[name]
	if n == nil {
		n = &wbName{}
		w.mu.names[name] = n
	}
	return n
}

// flush sends every queued batch, in order, and returns once the servers
// applied them. A batch the servers refuse is recorded (w.mu.err) and
// discarded with everything queued after it; flush returns an error only
// when ctx ended first (what was not sent stays queued).
func (w *wbDir) flush(ctx context.Context) error {
	// A new directory's entries go after its mkdir: the parent's queue
	// first (before this one's token: a parent's flush takes its kids'
	// tokens, never the other way round).
	if p := w.bornIn(); p != nil {
		if err := p.flush(ctx); err != nil {
			return err
		}
	}
	for {
		// Renames into this directory queued in another's queue go
		// before this one's changes (writeback_move.go), that queue's
		// token taken before this one's, as a parent's is.
		if err := w.flushAfter(ctx); err != nil {
			return err
		}
		select {
		case w.sending <- struct{}{}:
		case <-ctx.Done():
			return ctxError("write-back", ctx)
		}
		done, err := w.sendQueued(ctx)
		<-w.sending
		if done || err != nil {
			return err
		}
	}
}

// sendQueued sends w's batches with its token held, until none is left
// (done) or a rename into w queued elsewhere since must go first (not
// done: the caller sends it and comes back).
func (w *wbDir) sendQueued(ctx context.Context) (done bool, err error) {
	w.mu.Lock()
	w.sealLocked()
	w.mu.Unlock()
	for {
		if w.afterPending() {
			return false, nil
		}
		w.mu.Lock()
		if len(w.mu.sealed) == 0 {
			w.mu.Unlock()
			return true, nil
		}
		batch := w.mu.sealed[0]
		w.mu.Unlock()
		// A removed directory's own changes go before its rmdir.
		for _, kid := range w.kidsOf(batch) {
			if err := kid.flush(ctx); err != nil {
				return false, err
			}
		}
		trusted, err := w.c.sendBatch(ctx, w.dir, batch)
		if err != nil && (errs.Is(err, errs.Canceled) || errs.Is(err, errs.Timeout)) && ctx.Err() != nil {
			return false, err
		}
		if errs.Is(err, errs.Busy) {
			// Not applied, and not refused for what it holds: the
			// batch stays queued and goes again (the flusher, the
			// next fsync).
			return false, err
		}
		var moved []*wbMove
		w.mu.Lock()
		if err != nil {
			moved = w.refusedLocked(err)
		} else {
			w.bornLocked(batch, trusted)
			moved = w.appliedLocked(batch)
		}
		w.mu.Unlock()
		settleMoves(moved, err == nil)
	}
}

// appliedLocked forgets what the servers now hold. It returns the renames
// into other directories the batch applied, whose names there the caller
// settles (settleMoves) once w's lock is released.
func (w *wbDir) appliedLocked(batch []*weftpb.BatchOp) []*wbMove {
	w.mu.sealed = w.mu.sealed[1:]
	var moved []*wbMove
	for _, op := range batch {
		if m := w.mu.moves[op]; m != nil {
			m.done = true
			delete(w.mu.moves, op)
			moved = append(moved, m)
		}
		for _, name := range opNames(op) {
			w.settledLocked(name)
		}
	}
	if len(w.mu.sealed) == 0 && len(w.mu.open) == 0 {
		w.mu.oldest = time.Now()
	}
	return moved
}

// settledLocked forgets that an op naming name is queued: once none is
// left, the servers hold the name's state the client shows.
func (w *wbDir) settledLocked(name string) {
	n := w.mu.names[name]
	if n == nil {
		return
	}
	if n.pending--; n.pending > 0 {
		return
	}
	if w.mu.listing != nil {
		// The servers now hold the name's last state.
		delete(w.mu.unknown, name)
		if n.absent {
			delete(w.mu.listing, name)
		} else {
			w.mu.listing[name] = n.attr
		}
		w.setContentLocked(name, n.data, n.dataOK && !n.absent)
		delete(w.mu.names, name)
		return
	}
	if n.absent && w.mu.absent < wbMaxAbsent {
		w.mu.absent++ // still true: nobody else changes the directory
		return
	}
	delete(w.mu.names, name)
}

// refusedLocked drops the refused batch and every later change: they may
// depend on it. The overlay goes too (the servers' state is the truth
// again), and the lease is given up at its end. It returns the renames
// into other directories it dropped (settleMoves).
func (w *wbDir) refusedLocked(err error) []*wbMove {
	w.c.log.Warn("write-back: the servers refused a batch; it and later changes in the directory are lost",
		"dir", w.dir, "err", err)
	if w.mu.err == nil {
		w.mu.err = errs.Wrap(errs.KindOf(err), "write-back", "changes queued in the directory were not applied", err)
	}
	var moved []*wbMove
	for _, b := range w.mu.sealed {
		moved = append(moved, w.dropKidsLocked(b, err)...)
	}
	moved = append(moved, w.dropKidsLocked(w.mu.open, err)...)
	for _, m := range w.mu.moves {
		m.done = true
		moved = append(moved, m)
	}
	w.mu.sealed, w.mu.open, w.mu.used, w.mu.creates, w.mu.moves = nil, nil, nil, nil, nil
	w.mu.names = make(map[string]*wbName)
	w.mu.absent = 0
	w.mu.listing, w.mu.unknown, w.mu.dattrOK = nil, nil, false
	w.mu.lost = true
	return moved
}

// opNames lists the names an op changes in its batch's directory.
func opNames(op *weftpb.BatchOp) []string {
	switch {
	case op.Create != nil && op.Create.Dir != 0:
		return nil // made in another directory (writeback_move.go)
	case op.Create != nil:
		return []string{op.Create.Name}
	case op.Unlink != nil:
		return []string{op.Unlink.Name}
	case op.Setattr != nil:
		return []string{op.Setattr.Name}
	case op.Rename != nil && op.Rename.DstDir != 0:
		return []string{op.Rename.Src} // dst is in another directory
	case op.Rename != nil:
		return []string{op.Rename.Src, op.Rename.Dst}
	case op.Write != nil:
		return []string{op.Write.Name}
	case op.Owner != nil:
		return []string{op.Owner.Name}
	case op.Mkdir != nil:
		return []string{op.Mkdir.Name}
	case op.Rmdir != nil:
		return []string{op.Rmdir.Name}
	}
	return nil
}

// sendBatch sends a batch to the servers of the partitions its names are
// in (one, unless the directory is split), each part one atomic group. It
// returns until when the client may trust the write leases the servers
// granted it on the directories the batch made.
func (c *Client) sendBatch(ctx context.Context, dir core.Ino, batch []*weftpb.BatchOp) (map[core.Ino]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, wbSendWait)
	defer cancel()
	var trusted map[core.Ino]time.Time
	todo := batch
	for range maxRedirects {
		parts := c.splitBatch(dir, todo)
		todo = nil
		for _, p := range parts {
			req := &weftpb.ApplyBatchRequest{Dir: uint64(dir), Ops: p.ops}
			server := 0
			if len(c.metas) > 1 {
				server = core.PartitionServer(dir, p.part, len(c.metas))
			}
			if hasMkdir(p.ops) {
				// The new directories' leases go to the client's session.
				req.Session, _ = c.lockSessionFor(server)
			}
			sent := time.Now()
			var reply weftpb.ApplyBatchReply
			err := call(ctx, c.partPeer(dir, p.part), weftpb.MethodApplyBatch, req, &reply)
			if b, ok := redirectBitmap(err); ok {
				// Not applied: a split moved names. Route the part again.
				c.maps.redirects.Add(1)
				c.maps.learn(dir, b)
				todo = append(todo, p.ops...)
				continue
			}
			if err != nil {
				return nil, err
			}
			term := time.Duration(reply.LeaseTermMs) * time.Millisecond
			for _, ino := range reply.Leased {
				if trusted == nil {
					trusted = make(map[core.Ino]time.Time)
				}
				// The term runs from the grant, after the send.
				trusted[core.Ino(ino)] = sent.Add(term - leaseMargin(term))
			}
		}
		if len(todo) == 0 {
			return trusted, nil
		}
	}
	return nil, errs.New(errs.Protocol, "write-back", "too many redirects for a batch of directory %d", dir)
}

func hasMkdir(ops []*weftpb.BatchOp) bool {
	for _, op := range ops {
		if op.Mkdir != nil {
			return true
		}
	}
	return false
}

type batchPart struct {
	part uint32
	ops  []*weftpb.BatchOp
}

// splitBatch groups ops by the partition of their (first) name.
func (c *Client) splitBatch(dir core.Ino, ops []*weftpb.BatchOp) []batchPart {
	if len(c.metas) == 1 {
		return []batchPart{{ops: ops}}
	}
	bitmap := c.maps.bitmap(dir)
	var parts []batchPart
	idx := map[uint32]int{}
	for _, op := range ops {
		// A change of the directory itself goes with partition 0.
		p := uint32(0)
		if names := opNames(op); len(names) > 0 {
			p = core.PartitionOf(core.NameHash(names[0]), bitmap)
		}
		i, ok := idx[p]
		if !ok {
			i = len(parts)
			idx[p] = i
			parts = append(parts, batchPart{part: p})
		}
		parts[i].ops = append(parts[i].ops, op)
	}
	return parts
}

// newIno hands out an inode number reserved from the meta server that
// holds name's partition of dir: the server a batch with the op goes to
// (splitBatch), which writes a new directory's record in the batch's own
// txn.
func (c *Client) newIno(ctx context.Context, dir core.Ino, name string) (core.Ino, error) {
	server := 0
	if len(c.metas) > 1 {
		server = core.NameServer(dir, name, c.maps.bitmap(dir), len(c.metas))
	}
	c.wb.mu.Lock()
	r := c.wb.mu.inos[server]
	if r.next < r.end {
		r.next++
		c.wb.mu.inos[server] = r
		c.wb.mu.Unlock()
		return core.Ino(r.next - 1), nil
	}
	c.wb.mu.Unlock()
	var reply weftpb.AllocInosReply
	if err := call(ctx, c.metas[server], weftpb.MethodAllocInos, &weftpb.AllocInosRequest{Count: wbInoRange}, &reply); err != nil {
		return 0, err
	}
	c.wb.mu.Lock()
	defer c.wb.mu.Unlock()
	if c.wb.mu.inos == nil {
		c.wb.mu.inos = make(map[int]inoRange)
	}
	// Numbers left from a concurrent reservation are dropped: never
	// reused, they cost nothing.
	c.wb.mu.inos[server] = inoRange{next: reply.First + 1, end: reply.First + uint64(reply.Count)}
	return core.Ino(reply.First), nil
}
