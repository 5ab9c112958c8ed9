package client

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/core"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Write-back of what a workload does to the files it creates (writeback.go):
// the commit of an inline file's content at close, its owner change (tar's
// fchown) and its setattrs while it is open (tar's futimens and fchmod).
// Each is queued as an op on the file's name; one on a file whose create is
// still in the open batch is folded into that create (BatchCreate.then), so
// that create, write, chown, chmod and utimes of a small file are one entry
// write in one batch, and cost no round trip.
//
// Folding keeps the order the changes were made in (the server applies
// then in order, each with its own checks) and moves a change only into a
// batch that has not been sent: a change is never durable before one that
// was queued before it, except within one atomic batch. Patchgroups hold:
// a change is queued only after its groups' barrier made what they depend
// on durable (wbAcquire), so it may become durable at any time afterwards.
//
// A file larger than the inline limit keeps the synchronous path: its
// chunks go to the stores and its Commit, which sends the queue first.

// wbMaxThen bounds the changes folded into one create (a file rewritten
// and closed many times gets its later commits as ops of their own).
const wbMaxThen = 16

// wbCommit queues the commit req of open file n under write-back, and
// reports whether it did; false leaves the commit to the caller. gen is
// n's change count when req was made.
func (c *Client) wbCommit(ctx context.Context, n *openInode, req *pb.CommitRequest, gen uint64) bool {
	if !c.cfg.WriteBack || !req.Inline || len(req.InlineData) > c.cfg.InlineLimit ||
		uint64(len(req.InlineData)) != req.Size || len(req.Extents) > 0 || req.ExtentsOverflow {
		return false
	}
	n.mu.Lock()
	ref, creds := n.mu.ref, n.mu.creds
	n.mu.Unlock()
	if ref.Parent == 0 || ref.Name == "" || !c.wbEveryChange() && !c.wbCreateWaits(ref.Parent, ref.Name, n.ino) {
		return false
	}
	w := c.wbAcquire(ctx, ref.Parent)
	if w == nil {
		return false
	}
	w.ops.Lock()
	defer w.ops.Unlock()
	a, exists, err := c.wbResolve(ctx, w, ref.Name)
	if err != nil || !exists || a.Ino != n.ino || !core.IsRegular(a.Mode) || a.Nlink != 1 ||
		a.Mode&(core.ModeSetuid|core.ModeSetgid) != 0 || !mayWrite(creds, a) {
		// Setuid and setgid bits: the server's commit clears them for
		// some writers; the synchronous path tells this client the result.
		return false
	}
	now := time.Now()
	mtime := time.Unix(0, req.MtimeNs)
	w.mu.Lock()
	if !w.usableLocked(now) {
		w.mu.Unlock()
		return false
	}
	w.queueChangeLocked(ref.Name, n.ino, &pb.BatchOp{Creds: credsPB(creds), Write: &pb.BatchWrite{
		Name: ref.Name, Ino: uint64(n.ino), Data: req.InlineData, MtimeNs: req.MtimeNs, TimeNs: now.UnixNano()}})
	a.Size, a.Mtime, a.Ctime = req.Size, mtime, now
	wn := w.nameLocked(ref.Name)
	wn.attr, wn.data, wn.dataOK = a, req.InlineData, true
	w.mu.Unlock()
	n.mu.Lock()
	if n.mu.gen == gen {
		n.mu.modified = false
	}
	n.mu.Unlock()
	return true
}

// mayWrite reports whether creds may commit to a file of attributes a (the
// server's Commit: the owner, root, or a caller the mode lets write).
func mayWrite(creds core.Creds, a core.Attr) bool {
	if creds.UID == 0 || creds.UID == a.UID {
		return true
	}
	bits := a.Mode
	if creds.InGroup(a.GID) {
		bits >>= 3
	}
	return bits&0o2 != 0
}

// queueChangeLocked queues op, a change of file ino named name, folding it
// into the name's create if that is in the open batch.
func (w *wbDir) queueChangeLocked(name string, ino core.Ino, op *pb.BatchOp) {
	if c := w.mu.creates[name]; c != nil && c.Create.Ino == uint64(ino) && len(c.Create.Then) < wbMaxThen {
		c.Create.Then = append(c.Create.Then, op)
		return
	}
	w.queueLocked(op, name)
}

// ownerChange checks a chown or chgrp by creds of a file of attributes a
// as the server does (meta's checkSetAttr), and returns the changed
// attributes; ok = false if the server must decide.
func ownerChange(creds core.Creds, a core.Attr, s SetAttr) (core.Attr, bool) {
	if s.UID != nil {
		if creds.UID != 0 && (creds.UID != a.UID || *s.UID != a.UID) {
			return a, false
		}
		a.UID = *s.UID
	}
	if s.GID != nil {
		if creds.UID != 0 && (creds.UID != a.UID || *s.GID != a.GID && !creds.InGroup(*s.GID)) {
			return a, false
		}
		a.GID = *s.GID
	}
	if !a.IsDir() {
		// Linux clears setuid on any chown of a non-directory, and
		// setgid where group-exec makes it meaningful (meta's applySetAttr).
		a.Mode &^= core.ModeSetuid
		if a.Mode&0o010 != 0 {
			a.Mode &^= core.ModeSetgid
		}
	}
	return a, true
}

// wbOpen opens a file whose whole content this client knows (a create or
// a commit it queued, applied or not: knownContentLocked) without a
// request: under the directory's write lease nobody else changes it, and
// the servers would answer with the same. ok = false: the servers open it
// (a truncate or create, a name whose content the client does not know, a
// permission to check there).
func (c *Client) wbOpen(ctx context.Context, ref Ref, flags int) (f *File, ok bool, err error) {
	if !c.cfg.WriteBack || ref.Parent == 0 || ref.Name == "" || flags&(oTRUNC|oCREAT) != 0 {
		return nil, false, nil
	}
	w := c.wbLookupDir(ref.Parent)
	if w == nil {
		return nil, false, nil
	}
	creds := c.creds(ctx)
	w.mu.Lock()
	a, data, known := w.knownContentLocked(ref.Name)
	if !known || a.Ino != ref.Ino || !core.IsRegular(a.Mode) || a.Nlink != 1 ||
		!w.usableLocked(time.Now()) || !mayOpen(creds, a, flags) {
		w.mu.Unlock()
		return nil, false, nil
	}
	reply := &pb.OpenReply{Attr: attrToPB(a, true), InlineData: data}
	w.mu.Unlock()
	f, err = c.newFile(ctx, ref, reply, flags, false)
	return f, true, err
}

// knownContentLocked returns the attributes and whole content of name, if
// the client knows them: a queued create or commit, or what its applied
// batches left on the servers (the content map). Under the directory's
// write lease nobody else changes them: a file's attributes and inline
// content live in its entry, and a request that changes them (another
// client's commit through a handle it opened before the lease) recalls the
// lease first, which drops the map (wbLose).
func (w *wbDir) knownContentLocked(name string) (core.Attr, []byte, bool) {
	if n := w.mu.names[name]; n != nil {
		if n.absent || n.pending == 0 || !n.dataOK {
			return core.Attr{}, nil, false
		}
		return n.attr, n.data, true
	}
	data, ok := w.mu.content[name]
	if !ok || w.mu.unknown[name] {
		return core.Attr{}, nil, false
	}
	a, ok := w.mu.listing[name]
	if !ok || a.Size != uint64(len(data)) {
		return core.Attr{}, nil, false
	}
	return a, data, true
}

// setContentLocked records data as name's content on the servers (keep),
// or forgets it, within the client's budget.
func (w *wbDir) setContentLocked(name string, data []byte, keep bool) {
	budget := &w.c.wb.contentBytes
	if old, ok := w.mu.content[name]; ok {
		budget.Add(-int64(len(old)))
		delete(w.mu.content, name)
	}
	if !keep || w.mu.listing == nil {
		return
	}
	if budget.Add(int64(len(data))) > wbMaxContent {
		budget.Add(-int64(len(data)))
		return
	}
	if w.mu.content == nil {
		w.mu.content = make(map[string][]byte)
	}
	w.mu.content[name] = data
}

// dropContentLocked forgets every content of w.
func (w *wbDir) dropContentLocked() {
	for _, data := range w.mu.content {
		w.c.wb.contentBytes.Add(-int64(len(data)))
	}
	w.mu.content = nil
}

// mayOpen reports whether creds may open a file of attributes a with
// flags (meta's openNode and checkAccess; root may read and write any).
func mayOpen(creds core.Creds, a core.Attr, flags int) bool {
	var want uint32
	switch flags & oACCMODE {
	case oRDONLY:
		want = 0o4
	case oWRONLY:
		want = 0o2
	case oRDWR:
		want = 0o6
	default:
		return false
	}
	if creds.UID == 0 {
		return true
	}
	bits := a.Mode
	switch {
	case creds.UID == a.UID:
		bits >>= 6
	case creds.InGroup(a.GID):
		bits >>= 3
	}
	return bits&want == want
}

// wbOpenAlone reports whether req, about name in dir, is an open that
// need not send dir's queue first: only a queued change of that name
// matters to an open (the directory's own attributes are never written
// back), and one that truncates changes what the client knows of the name.
func (c *Client) wbOpenAlone(dir core.Ino, name string, req any) bool {
	open, ok := req.(*pb.OpenRequest)
	if !ok || open.Flags&oTRUNC != 0 {
		return false
	}
	w := c.wbLookupDir(dir)
	if w == nil {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.mu.names[name]
	return n == nil || n.pending == 0
}
