package client

import (
	"context"
	"maps"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Flushing an open file: its buffered writes go to the stores, the stores
// make them durable (with durable), and the meta server commits the size,
// mtime and inline content. Only the waits for uploads happen under the
// file's mutex (a condition wait, which releases it); the store sync and the
// commit run without it, so reads, writes and stat of the file go on while a
// store or the meta server is slow.
//
// A failed upload or sync is never committed: the error stays on the file
// (openInode.mu.err) and every later write, flush, sync and close reports
// it, as a local file system reports a writeback error. The file keeps its
// last committed state.

// uploadError is the sticky error of a failed upload: a store that timed
// out or went away is EIO to the writer, a full store stays ENOSPC.
func uploadError(err error) error {
	k := errs.KindOf(err)
	switch k {
	case errs.Timeout, errs.Unavailable, errs.Canceled, errs.Lost, errs.Other:
		k = errs.IO
	}
	return errs.Wrap(k, "write back", "", err)
}

// wakeOnDone wakes the waiters on n.mu.drained when ctx ends, so that a wait
// for uploads honours it; stop undoes it.
func (n *openInode) wakeOnDone(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		n.mu.Lock()
		n.mu.drained.Broadcast()
		n.mu.Unlock()
	})
}

func (n *openInode) uploadAllLocked() {
	for idx, d := range n.mu.dirty {
		n.startUploadLocked(idx, d)
	}
}

// drainLocked uploads every dirty range and waits until no upload is in
// flight or ctx ends; it returns the sticky upload error, if any.
func (n *openInode) drainLocked(ctx context.Context) error {
	n.uploadAllLocked()
	if len(n.mu.inflight) > 0 {
		stop := n.wakeOnDone(ctx)
		defer stop()
	}
	for len(n.mu.inflight) > 0 {
		if ctx.Err() != nil {
			return ctxError("flush", ctx)
		}
		n.mu.drained.Wait()
	}
	return n.mu.err
}

// flush makes this client's writes visible to others: uploads, then (with
// durable) makes the chunks durable on the stores, then commits size, mtime
// and inline content to the meta server.
func (n *openInode) flush(ctx context.Context, durable bool) error {
	return n.flushAs(ctx, durable, nil, false)
}

// flushClose is the flush of a close (or of File.Flush): under write-back
// an inline file's commit may be queued in its directory's write-back
// queue instead of sent (writeback_data.go), durable with the queue.
func (n *openInode) flushClose(ctx context.Context) error {
	return n.flushAs(ctx, n.c.cfg.SyncOnClose, nil, true)
}

// flushAs is flush committing as creds (nil: as the file's first opener);
// queue lets write-back queue the commit (flushClose).
func (n *openInode) flushAs(ctx context.Context, durable bool, as *core.Creds, queue bool) error {
	select {
	case n.flushTurn <- struct{}{}:
	case <-ctx.Done():
		return ctxError("flush", ctx)
	}
	defer func() { <-n.flushTurn }()

	n.mu.Lock()
	if err := n.drainLocked(ctx); err != nil {
		n.mu.Unlock()
		return err
	}
	var sync map[int]bool
	if durable && !n.mu.inline && len(n.mu.written) > 0 {
		sync = maps.Clone(n.mu.written)
		clear(n.mu.written)
	}
	gen := n.mu.gen
	req := n.commitRequestLocked()
	n.mu.Unlock()
	committed := false
	defer func() {
		if req != nil && !committed && (len(req.Extents) > 0 || req.ExtentsOverflow) {
			// Not recorded: the next commit carries these ranges again.
			n.mu.Lock()
			n.mu.uploaded = n.mu.uploaded.Union(req.Extents)
			n.mu.overflow = n.mu.overflow || req.ExtentsOverflow
			n.mu.Unlock()
		}
	}()
	if req != nil && as != nil {
		req.Creds = credsPB(*as)
	}

	if sync != nil {
		sctx, cancel := context.WithTimeout(ctx, n.c.cfg.StoreTimeout)
		err := n.c.syncStores(sctx, n.ino, sync)
		cancel()
		if err != nil {
			n.mu.Lock()
			if ctx.Err() != nil {
				// The caller gave up: the next flush syncs again.
				maps.Copy(n.mu.written, sync)
				n.mu.Unlock()
				return ctxError("flush", ctx)
			}
			if n.mu.err == nil {
				n.mu.err = uploadError(err)
			}
			err = n.mu.err
			n.mu.Unlock()
			return err
		}
	}
	if req == nil {
		return nil
	}
	if queue && as == nil && n.c.wbCommit(ctx, n, req, gen) {
		committed = true
		return nil
	}
	var r pb.CommitReply
	if err := n.c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodCommit, req, &r, false); err != nil {
		return err
	}
	committed = true
	n.mu.Lock()
	if n.mu.gen == gen {
		n.mu.modified = false
	}
	if r.Attr != nil {
		n.mu.mode = r.Attr.GetMode()
	}
	n.mu.Unlock()
	return nil
}

// killsPrivileges reports whether a write by c to a file of mode clears its
// setuid bit, and its setgid bit where group-exec makes it one (Linux's
// should_remove_suid; root stands for CAP_FSETID, as on the meta server).
func killsPrivileges(mode uint32, c core.Creds) bool {
	if c.UID == 0 {
		return false
	}
	return mode&core.ModeSetuid != 0 || mode&core.ModeSetgid != 0 && mode&0o010 != 0
}

// dropPrivileges clears setuid and setgid at a write by a caller (ctx's
// identity) who must not keep them: it commits the file as that caller,
// and the meta server clears the bits in the same commit, so stat shows
// them gone at once. It costs a commit only while the bits are set.
func (n *openInode) dropPrivileges(ctx context.Context) error {
	c := n.c.creds(ctx)
	n.mu.Lock()
	kill := killsPrivileges(n.mu.mode, c)
	n.mu.Unlock()
	if !kill {
		return nil
	}
	return n.flushAs(ctx, false, &c, false)
}

// commitRequestLocked is the commit of the file's size, mtime and inline
// content as they are now, or nil if there is nothing to commit.
func (n *openInode) commitRequestLocked() *pb.CommitRequest {
	if !n.mu.modified || n.mu.freed {
		return nil
	}
	req := &pb.CommitRequest{
		Creds: credsPB(n.mu.creds), Node: n.mu.ref.pb(), Size: n.mu.size,
		MtimeNs: n.mu.mtime.UnixNano(), Inline: n.mu.inline,
	}
	if n.mu.inline {
		// A copy: writes go on into n.mu.data while the commit is sent.
		data := make([]byte, n.mu.size)
		copy(data, n.mu.data)
		req.InlineData = data
	} else {
		// Taken: uploads after this go into the next commit, and a failed
		// commit gives these back (flushAs).
		req.Extents, n.mu.uploaded = n.mu.uploaded, nil
		req.ExtentsOverflow, n.mu.overflow = n.mu.overflow, false
	}
	return req
}

// uninline moves an inline file's content to the stores and commits it as
// chunked.
func (n *openInode) uninline(ctx context.Context) error {
	n.mu.Lock()
	if !n.mu.inline {
		n.mu.Unlock()
		return nil
	}
	n.uninlineLocked()
	n.mu.Unlock()
	return n.flush(ctx, n.c.cfg.SyncOnClose)
}
