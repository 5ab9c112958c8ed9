package client

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// mkdir and rmdir under write-back (writeback.go). A mkdir in a directory
// the client holds the write lease on is queued like a create: a number
// reserved from the server its name's partition is on, and a BatchMkdir
// that writes the entry and the new directory's record in one txn. The
// client holds the new directory's write lease from the start (the server
// grants it to the batch's session before the batch commits, and nobody
// can know the number before), so that what is made inside it is queued
// too: untar makes a directory and then its files.
//
// Ordering, so that a crash of the client never leaves a dangling entry
// (the servers hold a prefix of each directory's batches):
//   - the new directory's batches go only after the parent's batch with
//     its mkdir was applied (born: the new directory's flush sends the
//     parent's queue first);
//   - a rmdir's batch goes only after the removed directory's queue was
//     applied (kids: the parent's flush sends it first), and the servers
//     check again that it is empty;
//   - a refused parent batch refuses what was queued in the directories
//     its dropped mkdirs made.
//
// The new directory's lease is the key on its owner, the server that
// applied the mkdir. On a cluster of several meta servers the client takes
// it on the others (wbGrant) before its next change there once the mkdir
// is applied: until then nobody can see the directory, and no partition of
// it can be elsewhere.

// wbMkdir makes a directory under write-back.
func (c *Client) wbMkdir(ctx context.Context, parent core.Ino, name string, mode uint32) (core.Attr, bool, error) {
	if core.ValidateName("mkdir", name) != nil || !c.wbEveryChange() {
		return core.Attr{}, false, nil
	}
	w := c.wbAcquire(ctx, parent)
	if w == nil {
		return core.Attr{}, false, nil
	}
	w.ops.Lock()
	defer w.ops.Unlock()
	_, exists, err := c.wbResolve(ctx, w, name)
	switch {
	case err != nil:
		return core.Attr{}, false, nil
	case exists:
		return core.Attr{}, true, &errs.Error{Kind: errs.Exist, Op: "mkdir", Path: name}
	}
	ino, err := c.newIno(ctx, parent, name)
	if err != nil {
		return core.Attr{}, false, nil
	}
	creds := c.creds(ctx)
	now := time.Now()
	w.mu.Lock()
	if !w.usableLocked(now) || !dirAllows(creds, w.mu.dattr) {
		w.mu.Unlock()
		return core.Attr{}, false, nil
	}
	// mkdir(2) ignores setuid and setgid in its mode argument.
	a := newAttr(creds, w.mu.dattr, ino, core.ModeDir|mode&(core.ModePerm|core.ModeSticky), now)
	a.Nlink, a.Size = 2, dirSize
	op := &pb.BatchOp{Creds: credsPB(creds), Mkdir: &pb.BatchMkdir{Name: name, Ino: uint64(ino), Mode: a.Mode, TimeNs: now.UnixNano()}}
	kid := newKidDir(c, w, a, now)
	w.queueLocked(op, name)
	w.kidLocked(op, kid)
	n := w.nameLocked(name)
	if n.absent {
		n.absent = false
		w.mu.absent--
	}
	n.attr, n.data, n.dataOK = a, nil, false
	w.mu.dattr.Nlink++
	w.mu.mtime = now
	w.mu.Unlock()
	// Known by number only to the caller from now on: registered after
	// the parent's lock is released (the client's map is taken first).
	c.wb.mu.Lock()
	c.wb.mu.dirs[ino] = kid
	c.wb.mu.Unlock()
	return a, true, nil
}

// dirSize is the size a directory reports (meta's).
const dirSize = 4096

// newKidDir makes the write-back state of the directory a whose mkdir the
// caller queues in parent (whose lock it holds): known empty, and trusted
// for the parent's term from now (the server's grant comes later, when the
// mkdir is applied, and the trust is set from its send then).
func newKidDir(c *Client, parent *wbDir, a core.Attr, now time.Time) *wbDir {
	kid := &wbDir{c: c, dir: a.Ino, sending: make(chan struct{}, 1)}
	kid.mu.names = make(map[string]*wbName)
	kid.mu.listing = map[string]core.Attr{}
	kid.mu.dattr, kid.mu.dattrOK = a, true
	kid.mu.mtime = a.Mtime
	kid.mu.term = parent.mu.term
	kid.mu.trusted = now.Add(parent.mu.term - leaseMargin(parent.mu.term))
	kid.mu.born = parent
	return kid
}

// kidLocked records the directory op makes or removes.
func (w *wbDir) kidLocked(op *pb.BatchOp, kid *wbDir) {
	if w.mu.kids == nil {
		w.mu.kids = make(map[*pb.BatchOp]*wbDir)
	}
	w.mu.kids[op] = kid
}

// wbRmdir removes an empty directory under write-back: one the client
// knows empty under its own write lease (made here, or whose listing it
// read under the lease). Otherwise the servers decide.
func (c *Client) wbRmdir(ctx context.Context, parent core.Ino, name string) (bool, error) {
	if core.ValidateName("rmdir", name) != nil || !c.wbEveryChange() {
		return false, nil
	}
	w := c.wbAcquire(ctx, parent)
	if w == nil {
		return false, nil
	}
	w.ops.Lock()
	defer w.ops.Unlock()
	a, exists, err := c.wbResolve(ctx, w, name)
	switch {
	case err != nil:
		return false, nil
	case !exists:
		return true, &errs.Error{Kind: errs.NotExist, Op: "rmdir", Path: name}
	case !a.IsDir():
		return true, &errs.Error{Kind: errs.NotDir, Op: "rmdir", Path: name}
	case a.Ino == core.RootIno:
		return false, nil
	}
	kid := c.wbLookupDir(a.Ino)
	if kid == nil {
		return false, nil
	}
	// A rename into the directory queued elsewhere goes first, and its
	// link with it (writeback_move.go): the parent's flush sends the
	// removed directory's queue with the parent's token held, and must
	// not have to follow a link from there, which may lead back to the
	// parent's queue.
	if kid.linked() && (kid.flush(ctx) != nil || kid.linked()) {
		return false, nil
	}
	unsplit := c.unsplit(a.Ino)
	creds := c.creds(ctx)
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.usableLocked(now) || !dirAllows(creds, w.mu.dattr) {
		return false, nil
	}
	// Checked and retired under the directory's lock: nothing is queued
	// in it from now on (its own changes go before the rmdir).
	kid.mu.Lock()
	empty, known := kid.emptyLocked(now, unsplit)
	known = known && kid.mu.after == nil
	if known && empty {
		kid.mu.lost, kid.mu.retired = true, true
	}
	kid.mu.Unlock()
	switch {
	case !known:
		return false, nil
	case !empty:
		return true, &errs.Error{Kind: errs.NotEmpty, Op: "rmdir", Path: name}
	}
	op := &pb.BatchOp{Creds: credsPB(creds), Rmdir: &pb.BatchRmdir{Name: name, Ino: uint64(a.Ino), TimeNs: now.UnixNano()}}
	w.queueLocked(op, name)
	w.kidLocked(op, kid)
	n := w.nameLocked(name)
	n.absent, n.attr, n.data, n.dataOK = true, core.Attr{}, nil, false
	w.mu.dattr.Nlink--
	w.mu.mtime = now
	return true, nil
}

// emptyLocked reports whether the directory is empty as the client knows
// it under its write lease, and whether it knows.
func (w *wbDir) emptyLocked(now time.Time, unsplit bool) (empty, known bool) {
	if !w.usableLocked(now) || w.mu.partial && w.mu.born == nil && !unsplit ||
		w.mu.listing == nil || len(w.mu.unknown) > 0 {
		return false, false
	}
	for name := range w.mu.listing {
		if n := w.mu.names[name]; n == nil || !n.absent {
			return false, true
		}
	}
	for _, n := range w.mu.names {
		if !n.absent && n.pending > 0 {
			return false, true
		}
	}
	return true, true
}

// bornIn returns the directory whose queue holds w's mkdir, until applied.
func (w *wbDir) bornIn() *wbDir {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.born
}

// kidsOf returns the directories whose queues must be applied before batch:
// those it removes.
func (w *wbDir) kidsOf(batch []*pb.BatchOp) []*wbDir {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*wbDir
	for _, op := range batch {
		if kid := w.mu.kids[op]; kid != nil && op.Rmdir != nil {
			out = append(out, kid)
		}
	}
	return out
}

// bornLocked tells the directories batch made that their mkdir is applied:
// trusted as the servers' grants say (in trusted, by number), or lost if
// not granted (their queue goes at once and their lease is asked again).
func (w *wbDir) bornLocked(batch []*pb.BatchOp, trusted map[core.Ino]time.Time) {
	for _, op := range batch {
		kid := w.mu.kids[op]
		if kid == nil {
			continue
		}
		delete(w.mu.kids, op)
		if op.Mkdir == nil {
			continue
		}
		kid.mu.Lock()
		kid.mu.born = nil
		if t, ok := trusted[kid.dir]; ok {
			kid.mu.trusted = t
			kid.mu.partial = len(w.c.metas) > 1
		} else {
			kid.mu.lost = true
		}
		kid.mu.Unlock()
	}
}

// dropKidsLocked refuses what was queued in the directories that the
// dropped ops made: they never reach the servers. It returns the renames
// into other directories those queues held (settleMoves).
func (w *wbDir) dropKidsLocked(ops []*pb.BatchOp, err error) []*wbMove {
	var moved []*wbMove
	for _, op := range ops {
		kid := w.mu.kids[op]
		if kid == nil {
			continue
		}
		delete(w.mu.kids, op)
		if op.Mkdir == nil {
			continue
		}
		kid.mu.Lock()
		kid.mu.born = nil
		moved = append(moved, kid.refusedLocked(err)...)
		kid.mu.Unlock()
	}
	return moved
}

// wbNoXattrs reports whether ref is a file this client created under
// write-back that has no extended attributes (wbName.fresh), as known to
// creds, who may read them (its owner, or root).
func (c *Client) wbNoXattrs(ctx context.Context, ref Ref) bool {
	if ref.Parent == 0 || ref.Name == "" {
		return false
	}
	w := c.wbLookupDir(ref.Parent)
	if w == nil {
		return false
	}
	creds := c.creds(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.mu.names[ref.Name]
	return n != nil && n.fresh && !n.absent && n.pending > 0 && n.attr.Ino == ref.Ino &&
		(creds.UID == 0 || creds.UID == n.attr.UID)
}

// wbSetDirAttr queues a change of the mode, times or owner of a directory
// under write-back in the directory's own queue (BatchOp.dir_setattr,
// dir_owner), in order with its entries' changes, which touch its times:
// tar sets each directory's times, mode and owner after its entries.
func (c *Client) wbSetDirAttr(ctx context.Context, ref Ref, s SetAttr) (core.Attr, bool) {
	if !wbSetAttrOK(s) || !c.wbEveryChange() {
		return core.Attr{}, false
	}
	w := c.wbLookupDir(ref.Ino)
	if w == nil {
		return core.Attr{}, false
	}
	w.ops.Lock()
	defer w.ops.Unlock()
	creds := c.creds(ctx)
	now := time.Now()
	w.mu.Lock()
	if !w.usableLocked(now) || !w.mu.dattrOK || w.mu.partial {
		w.mu.Unlock()
		return core.Attr{}, false
	}
	a := w.mu.dattr
	if w.mu.mtime.After(a.Mtime) {
		a.Mtime, a.Ctime = w.mu.mtime, w.mu.mtime
	}
	req := s.pb()
	var op *pb.BatchOp
	if s.UID != nil || s.GID != nil {
		var ok bool
		if a, ok = ownerChange(creds, a, s); !ok {
			w.mu.Unlock()
			return core.Attr{}, false
		}
		op = &pb.BatchOp{Creds: credsPB(creds), DirOwner: &pb.BatchOwner{Ino: uint64(a.Ino),
			Valid: req.Valid, Uid: req.Uid, Gid: req.Gid, TimeNs: now.UnixNano()}}
	} else {
		if creds.UID != 0 && creds.UID != a.UID {
			w.mu.Unlock()
			return core.Attr{}, false
		}
		a = modeTimesChange(creds, a, s, req, now)
		op = &pb.BatchOp{Creds: credsPB(creds), DirSetattr: &pb.BatchSetAttr{Ino: uint64(a.Ino),
			Valid: req.Valid, Mode: req.Mode, AtimeNs: req.AtimeNs, MtimeNs: req.MtimeNs, TimeNs: now.UnixNano()}}
	}
	a.Ctime = now
	w.queueLocked(op)
	// What a stat here sees from now on; later changes in the directory
	// move its times on from the one set.
	w.mu.dattr, w.mu.mtime = a, a.Mtime
	w.mu.Unlock()
	// The parent's queued entry of the directory, if any, says the same.
	if ref.Parent != 0 && ref.Name != "" {
		if p := c.wbLookupDir(ref.Parent); p != nil {
			p.mu.Lock()
			if n := p.mu.names[ref.Name]; n != nil && !n.absent && n.attr.Ino == a.Ino {
				n.attr = a
			}
			p.mu.Unlock()
		}
	}
	return a, true
}
