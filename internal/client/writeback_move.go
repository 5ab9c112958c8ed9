package client

import (
	"context"
	"strconv"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Renames between two directories under write-back (writeback.go). A
// rename of a file from S to D, both directories this client holds write
// leases on, unsplit, with partition 0 on one meta server, is queued in
// S's queue as a BatchRename with dst_dir D: the server applies it in the
// batch's one txn (one Pebble batch), so after a crash the file is in S
// or in D, never in neither or in both. If the file's create is still in
// S's open batch, the rename is folded into it instead (the create is
// made in D, BatchCreate.dir): a maildir delivery's create, write and
// rename into cur/ are one entry write, and a thousand of them one batch.
//
// The rule that keeps each directory's changes a prefix on the servers:
//   - D's own queue is sent before the rename is queued (so is a queue
//     holding a rename into D from a third directory, and the mkdir of D
//     if not yet applied): every change of D made before the rename is
//     applied before it. When D's queue is empty and the only pending
//     renames into D are S's, nothing is sent: a maildir's renames from
//     tmp/ into cur/ cost no request.
//   - D's later changes go after S's batch with the rename: D's flush
//     sends S's queue first (wbDir.after), with S's token taken before
//     D's, and stops before a batch of its own if a new rename into D was
//     queued meanwhile.
// So the links follow the order the changes were made in, and cannot
// form a cycle: a link to S is added to D only while D's queue is empty,
// and a link to D exists only while D's queue holds the rename it waits
// for. A flush follows links only before it takes its own token, and a
// directory is removed (rmdir, whose batch's flush sends the removed
// directory's queue with the parent's token held) only once its link is
// gone; nor is a rename queued into a directory whose mkdir is not
// applied. So no flush that holds a token waits for a link back to it.
//
// The client's view changes at once in both directories: the name is
// absent in S and present in D (with the file's attributes and content)
// until the servers applied the batch. A recall of D's lease sends S's
// queue first (D's flush); a recall of S's sends it. Between directories
// on two meta servers the rename keeps the synchronous path.

// wbMove is a queued rename of a file into directory to (name): done once
// its batch was applied or dropped (under the source directory's lock).
type wbMove struct {
	to   *wbDir
	name string
	done bool
}

// moveKey is the key of name in directory dir among the names a batch of
// another directory uses (wbDir.mu.used): never a name, which has no '/'.
func moveKey(dir core.Ino, name string) string {
	return strconv.FormatUint(uint64(dir), 10) + "/" + name
}

// wbRenameCross renames file src in from to dst in to under write-back, if
// it can (handled); otherwise the caller sends it to the servers.
func (c *Client) wbRenameCross(ctx context.Context, from core.Ino, src string, to core.Ino, dst string, flags uint32) (bool, error) {
	if from == to || !c.wbEveryChange() || flags&^RenameNoReplace != 0 || core.ValidateName("rename", src) != nil ||
		core.ValidateName("rename", dst) != nil || !c.unsplit(from) || !c.unsplit(to) ||
		len(c.metas) > 1 && core.PartitionServer(from, 0, len(c.metas)) != core.PartitionServer(to, 0, len(c.metas)) {
		return false, nil
	}
	ws := c.wbAcquire(ctx, from)
	if ws == nil {
		return false, nil
	}
	wd := c.wbAcquire(ctx, to)
	if wd == nil {
		return false, nil
	}
	// Both directories' operations wait, as the kernel's rename locks
	// both; in number order, so two crossing renames cannot deadlock.
	first, second := ws, wd
	if to < from {
		first, second = wd, ws
	}
	first.ops.Lock()
	defer first.ops.Unlock()
	second.ops.Lock()
	defer second.ops.Unlock()
	if !wd.readyFor(ws) {
		// D's own changes, its mkdir, or renames into it from a third
		// directory go first.
		if wd.flush(ctx) != nil || !wd.readyFor(ws) {
			return false, nil
		}
	}
	a, ok, err := c.wbRenameResolve(ctx, ws, src, wd, dst, flags)
	if err != nil || !ok {
		return err != nil, err
	}
	// D's token: a flush of D (a recall) that starts now sends S's queue
	// with the rename, not D's changes or its lease before it.
	select {
	case wd.sending <- struct{}{}:
	case <-ctx.Done():
		return true, ctxError("rename", ctx)
	}
	ok = c.queueMove(ctx, ws, src, wd, dst, a)
	<-wd.sending
	if !ok {
		return false, nil
	}
	// An open file follows its name: its next commit goes to D's queue,
	// which sends S's first.
	c.renameOpen(from, src, to, dst, false, 0)
	return true, nil
}

// readyFor reports whether a rename from s may be queued into w: w has no
// queued changes of its own, its mkdir is applied, and no rename into it
// is pending in another directory's queue than s's.
func (w *wbDir) readyFor(s *wbDir) bool {
	w.mu.Lock()
	own := len(w.mu.open) > 0 || len(w.mu.sealed) > 0 || w.mu.born != nil
	after, m := w.mu.after, w.mu.afterMove
	w.mu.Unlock()
	if own {
		return false
	}
	return after == nil || after == s || !after.pending(m)
}

// queueMove queues the rename of file a from src in ws to dst in wd, with
// wd's token held and both directories' operations locked. The name
// appears in wd before it leaves ws (a reader here sees it in one or both,
// never in neither); the servers get both in one op.
func (c *Client) queueMove(ctx context.Context, ws *wbDir, src string, wd *wbDir, dst string, a core.Attr) bool {
	creds := c.creds(ctx)
	now := time.Now()
	a.Ctime = now
	ws.mu.Lock()
	var data []byte
	var dataOK, fresh bool
	if n := ws.mu.names[src]; n != nil && n.pending > 0 {
		data, dataOK, fresh = n.data, n.dataOK, n.fresh
	}
	ws.mu.Unlock()

	wd.mu.Lock()
	if !wd.usableLocked(now) || !dirAllows(creds, wd.mu.dattr) {
		wd.mu.Unlock()
		return false
	}
	d := wd.nameLocked(dst)
	if d.absent {
		d.absent = false
		wd.mu.absent--
	}
	d.pending++
	d.attr, d.data, d.dataOK, d.fresh = a, data, dataOK, fresh
	wd.mu.Unlock()

	ws.mu.Lock()
	if !ws.usableLocked(now) || !dirAllows(creds, ws.mu.dattr) {
		ws.mu.Unlock()
		settleMoves([]*wbMove{{to: wd, name: dst}}, false)
		return false
	}
	m := &wbMove{to: wd, name: dst}
	key := moveKey(wd.dir, dst)
	op := ws.mu.creates[src]
	if op != nil && op.Create.Ino == uint64(a.Ino) && !ws.mu.used[key] {
		// The create is in the open batch: it is made in wd instead,
		// in the same atomic batch as before.
		op.Create.Name, op.Create.Dir, op.Create.MovedNs = dst, uint64(wd.dir), now.UnixNano()
		delete(ws.mu.creates, src)
		ws.mu.used[key] = true
		ws.markGoneLocked(src)
		ws.settledLocked(src) // no op in the batch names src any more
	} else {
		op = &pb.BatchOp{Creds: credsPB(creds), Rename: &pb.BatchRename{Src: src, Dst: dst, Ino: uint64(a.Ino),
			TimeNs: now.UnixNano(), DstDir: uint64(wd.dir)}}
		ws.queueLocked(op, src, key)
		// queueLocked counted key as a name of ws: it is wd's (above).
		delete(ws.mu.names, key)
		ws.markGoneLocked(src)
	}
	if ws.mu.moves == nil {
		ws.mu.moves = make(map[*pb.BatchOp]*wbMove)
	}
	ws.mu.moves[op] = m
	ws.mu.mtime = now
	ws.mu.Unlock()

	wd.mu.Lock()
	wd.mu.after, wd.mu.afterMove = ws, m
	wd.mu.mtime = now
	wd.mu.Unlock()
	return true
}

// markGoneLocked records that name left w (renamed away, queued).
func (w *wbDir) markGoneLocked(name string) {
	n := w.nameLocked(name)
	n.absent, n.attr, n.data, n.dataOK, n.fresh = true, core.Attr{}, nil, false, false
}

// pending reports whether m is still queued in w.
func (w *wbDir) pending(m *wbMove) bool {
	if m == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return !m.done
}

// linked reports whether w still records a rename into it queued
// elsewhere (flushAfter forgets it once applied).
func (w *wbDir) linked() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.after != nil
}

// afterPending reports whether a rename into w is still queued elsewhere.
func (w *wbDir) afterPending() bool {
	w.mu.Lock()
	after, m := w.mu.after, w.mu.afterMove
	w.mu.Unlock()
	return after != nil && after.pending(m)
}

// flushAfter sends the queue holding the latest rename into w, and
// forgets the link once it is applied.
func (w *wbDir) flushAfter(ctx context.Context) error {
	w.mu.Lock()
	after, m := w.mu.after, w.mu.afterMove
	w.mu.Unlock()
	if after == nil {
		return nil
	}
	if after.pending(m) {
		if err := after.flush(ctx); err != nil {
			return err
		}
		if after.pending(m) {
			// Not sent (the batch is busy on the server): tried again.
			return errs.New(errs.Busy, "write-back", "a rename into directory %d is still queued", w.dir)
		}
	}
	w.mu.Lock()
	if w.mu.after == after && w.mu.afterMove == m {
		w.mu.after, w.mu.afterMove = nil, nil
	}
	w.mu.Unlock()
	return nil
}

// settleMoves updates the destinations of renames whose batch was applied
// (the servers now hold the name) or dropped (they never will: the name
// is forgotten, and the servers' answer is the truth again).
func settleMoves(moved []*wbMove, applied bool) {
	for _, m := range moved {
		w := m.to
		w.mu.Lock()
		if applied {
			w.settledLocked(m.name)
		} else if n := w.mu.names[m.name]; n != nil {
			if n.pending--; n.pending <= 0 {
				delete(w.mu.names, m.name)
			}
		}
		w.mu.Unlock()
	}
}
