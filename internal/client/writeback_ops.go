package client

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// The operations write-back completes in the client (writeback.go). Each
// returns handled = false when it cannot decide alone (no lease, a name it
// cannot resolve, a check only the server makes: a sticky directory, a
// hard-linked or chunked open file, a size change, an owner change the
// caller may not make); the caller then sends
// the queue and the operation to the servers as without write-back. The
// checks here are the servers' (ApplyBatch makes them again); a change
// the client answered is applied by the servers unless the lease was lost
// meanwhile.
//
// One write-back operation at a time runs per directory (wbDir.ops), as
// the kernel's directory lock orders them for a mount: an operation's
// lookup of the servers' state and its queueing must not interleave with
// another's on the same name.

// wbResolve returns what name in w's directory is: from the queued changes,
// or from the servers (what they say stays true under the lease).
func (c *Client) wbResolve(ctx context.Context, w *wbDir, name string) (a core.Attr, exists bool, err error) {
	c.loadListing(ctx, w)
	w.mu.Lock()
	n := w.mu.names[name]
	if n != nil && (n.pending > 0 || n.absent) {
		a, exists = n.attr, !n.absent
		w.mu.Unlock()
		return a, exists, nil
	}
	if a, exists, known := w.listedLocked(name); known {
		w.mu.Unlock()
		return a, exists, nil
	}
	gen := w.mu.gen
	w.mu.Unlock()
	a, err = c.lookupServer(ctx, w.dir, name)
	if errs.Is(err, errs.NotExist) {
		w.noteAbsent(name, gen)
		return core.Attr{}, false, nil
	}
	if err == nil {
		w.noteListed(name, a, gen)
	}
	return a, err == nil, err
}

// noteListed puts back in the listing a name that a request had made
// unknown (forgetName), as a lookup that started at generation gen found
// it: what the servers say stays true under the lease. A file synced by
// its own request (IMAP's delivery with fsync) is then unlinked later with
// no lookup.
func (w *wbDir) noteListed(name string, a core.Attr, gen uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.lost || w.mu.gen != gen || w.mu.listing == nil || !w.mu.unknown[name] || w.mu.names[name] != nil {
		return
	}
	delete(w.mu.unknown, name)
	w.mu.listing[name] = a
}

// listedLocked answers from the listing, if it knows name.
func (w *wbDir) listedLocked(name string) (a core.Attr, exists, known bool) {
	if w.mu.listing == nil || w.mu.unknown[name] {
		return core.Attr{}, false, false
	}
	a, exists = w.mu.listing[name]
	return a, exists, true
}

// noteAbsent remembers that the servers do not have name, as a lookup
// that started at generation gen found.
func (w *wbDir) noteAbsent(name string, gen uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.lost || w.mu.gen != gen || w.mu.absent >= wbMaxAbsent || w.mu.names[name] != nil {
		return
	}
	w.mu.names[name] = &wbName{absent: true}
	w.mu.absent++
}

// generation is w's forget count (0 for no w).
func (w *wbDir) generation() uint64 {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.gen
}

// usableLocked reports whether a change may still be queued under the lease.
func (w *wbDir) usableLocked(now time.Time) bool {
	return !w.mu.lost && w.mu.trusted.Sub(now) >= wbFlushBefore
}

// lookupServer is LookupAt without write-back's view.
func (c *Client) lookupServer(ctx context.Context, parent core.Ino, name string) (core.Attr, error) {
	var r pb.LookupReply
	err := c.callName(ctx, parent, name, pb.MethodLookup,
		&pb.LookupRequest{Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name}, &r, true)
	if err != nil {
		return core.Attr{}, err
	}
	return attrFromPB(r.Attr), nil
}

// wbLookup answers a lookup from the queued changes, if they say.
func (c *Client) wbLookup(parent core.Ino, name string) (core.Attr, bool, error) {
	w := c.wbLookupDir(parent)
	if w == nil || core.ValidateName("lookup", name) != nil {
		// A bad name's error is the servers' (ENAMETOOLONG, EINVAL).
		return core.Attr{}, false, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.mu.names[name]
	switch {
	case n == nil && w.mu.listing != nil && !w.mu.unknown[name] && w.usableLocked(time.Now()):
		if a, ok := w.mu.listing[name]; ok {
			return a, true, nil
		}
		return core.Attr{}, true, &errs.Error{Kind: errs.NotExist, Op: "lookup", Path: name}
	case n == nil:
		return core.Attr{}, false, nil
	case n.pending == 0 && !w.usableLocked(time.Now()):
		// An absence the servers told, no longer guarded by the lease.
		delete(w.mu.names, name)
		w.mu.absent--
		return core.Attr{}, false, nil
	case n.absent:
		return core.Attr{}, true, &errs.Error{Kind: errs.NotExist, Op: "lookup", Path: name}
	}
	return n.attr, true, nil
}

// wbStat answers a stat of a file with queued changes or in the
// directory's listing, or of a directory under write-back whose attributes
// the client knows.
func (c *Client) wbStat(ref Ref) (core.Attr, bool) {
	if w := c.wbLookupDir(ref.Ino); w != nil {
		w.mu.Lock()
		a, ok := w.mu.dattr, w.mu.dattrOK && w.usableLocked(time.Now())
		if ok && w.mu.mtime.After(a.Mtime) {
			a.Mtime, a.Ctime = w.mu.mtime, w.mu.mtime
		}
		w.mu.Unlock()
		if ok {
			return a, true
		}
	}
	if ref.Parent == 0 || ref.Name == "" {
		return core.Attr{}, false
	}
	w := c.wbLookupDir(ref.Parent)
	if w == nil {
		return core.Attr{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.mu.names[ref.Name]
	if n == nil {
		// What the servers hold, as the client's batches left it: a
		// file's attributes live in its entry, which the lease covers
		// (those of a directory or of a file with several links do not).
		a, ok := w.mu.listing[ref.Name]
		if !ok || w.mu.unknown[ref.Name] || a.Ino != ref.Ino || a.IsDir() || a.Nlink != 1 ||
			!w.usableLocked(time.Now()) {
			return core.Attr{}, false
		}
		return a, true
	}
	if n.absent || n.pending == 0 || n.attr.Ino != ref.Ino {
		return core.Attr{}, false
	}
	return n.attr, true
}

// dirAllows reports whether creds may add and remove names in the
// directory, with no sticky bit (whose rules the servers apply).
func dirAllows(creds core.Creds, d core.Attr) bool {
	if d.Mode&core.ModeSticky != 0 {
		return false
	}
	if creds.UID == 0 {
		return true
	}
	bits := d.Mode
	switch {
	case creds.UID == d.UID:
		bits >>= 6
	case creds.InGroup(d.GID):
		bits >>= 3
	}
	return bits&3 == 3
}

// newAttr is the attributes the servers give a file creds creates in d
// (meta's newRecord).
func newAttr(creds core.Creds, d core.Attr, ino core.Ino, mode uint32, now time.Time) core.Attr {
	gid := creds.GID
	if d.Mode&core.ModeSetgid != 0 {
		gid = d.GID
		if core.IsDir(mode) {
			mode |= core.ModeSetgid
		} else if mode&(core.ModeSetgid|0o010) == core.ModeSetgid|0o010 && creds.UID != 0 && !creds.InGroup(gid) {
			mode &^= core.ModeSetgid
		}
	}
	return core.Attr{Ino: ino, Mode: mode, Nlink: 1, UID: creds.UID, GID: gid, Atime: now, Mtime: now, Ctime: now}
}

func attrToPB(a core.Attr, inline bool) *pb.Attr {
	return &pb.Attr{Ino: uint64(a.Ino), Mode: a.Mode, Nlink: a.Nlink, Uid: a.UID, Gid: a.GID, Rdev: a.Rdev,
		Size: a.Size, AtimeNs: a.Atime.UnixNano(), MtimeNs: a.Mtime.UnixNano(), CtimeNs: a.Ctime.UnixNano(), Inline: inline}
}

// wbCreate creates a regular file under write-back.
func (c *Client) wbCreate(ctx context.Context, parent core.Ino, name string, flags int, mode uint32) (*File, core.Attr, bool, error) {
	if core.ValidateName("create", name) != nil {
		return nil, core.Attr{}, false, nil
	}
	w := c.wbAcquire(ctx, parent)
	if w == nil {
		return nil, core.Attr{}, false, nil
	}
	w.ops.Lock()
	defer w.ops.Unlock()
	creds := c.creds(ctx)
	_, exists, err := c.wbResolve(ctx, w, name)
	switch {
	case err != nil:
		return nil, core.Attr{}, false, nil
	case exists && flags&oEXCL != 0:
		return nil, core.Attr{}, true, &errs.Error{Kind: errs.Exist, Op: "create", Path: name}
	case exists:
		return nil, core.Attr{}, false, nil // opens the file: the servers' part
	}
	ino, err := c.newIno(ctx, parent, name)
	if err != nil {
		return nil, core.Attr{}, false, nil
	}
	now := time.Now()
	w.mu.Lock()
	if !w.usableLocked(now) || !dirAllows(creds, w.mu.dattr) {
		w.mu.Unlock()
		return nil, core.Attr{}, false, nil
	}
	a := newAttr(creds, w.mu.dattr, ino, core.ModeFile|mode&core.ModeBits, now)
	create := &pb.BatchOp{Creds: credsPB(creds), Create: &pb.BatchCreate{Name: name, Ino: uint64(ino), Mode: a.Mode, TimeNs: now.UnixNano()}}
	w.queueLocked(create, name)
	if w.mu.creates == nil {
		w.mu.creates = make(map[string]*pb.BatchOp)
	}
	w.mu.creates[name] = create
	n := w.nameLocked(name)
	if n.absent {
		n.absent = false
		w.mu.absent--
	}
	n.attr, n.data, n.dataOK, n.fresh = a, nil, true, true
	w.mu.mtime = now
	w.mu.Unlock()
	ref := Ref{Ino: ino, Parent: parent, Name: name}
	f, err := c.newFile(ctx, ref, &pb.OpenReply{Attr: attrToPB(a, true)}, flags, false)
	return f, a, true, err
}

// wbUnlink removes a file under write-back.
func (c *Client) wbUnlink(ctx context.Context, parent core.Ino, name string) (bool, error) {
	if core.ValidateName("unlink", name) != nil || !c.wbEveryChange() {
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
		return true, &errs.Error{Kind: errs.NotExist, Op: "unlink", Path: name}
	case a.IsDir() || a.Nlink != 1:
		return false, nil
	}
	creds := c.creds(ctx)
	// The servers hold the reclaim of a file open here until its last
	// close, as for an unlink sent at once.
	open := c.openAt(parent, name)
	now := time.Now()
	w.mu.Lock()
	if !w.usableLocked(now) || !dirAllows(creds, w.mu.dattr) {
		w.mu.Unlock()
		return false, nil
	}
	w.queueLocked(&pb.BatchOp{Creds: credsPB(creds), Unlink: &pb.BatchUnlink{Name: name, Ino: uint64(a.Ino), Open: open, TimeNs: now.UnixNano()}}, name)
	n := w.nameLocked(name)
	n.absent, n.attr, n.data, n.dataOK = true, core.Attr{}, nil, false
	w.mu.mtime = now
	w.mu.Unlock()
	c.dropped(a.Ino, true, parent, name, open)
	return true, nil
}

// wbSetAttrOK reports whether a setattr may be written back: a change of
// mode and times, or of owner and group, not both at once (they are
// different ops), and no size.
func wbSetAttrOK(s SetAttr) bool {
	owner := s.UID != nil || s.GID != nil
	other := s.Mode != nil || s.Atime != nil || s.Mtime != nil || s.AtimeNow || s.MtimeNow
	return s.Size == nil && owner != other
}

// wbSetAttr changes the mode, times or owner of a file under write-back. A
// file open here must be inline (tar sets the times, owner and mode of
// each file it extracts before closing it); an explicit mtime first
// queues the commit of what was written, whose own mtime would otherwise
// overwrite it (as setMtime does on the synchronous path).
func (c *Client) wbSetAttr(ctx context.Context, ref Ref, s SetAttr) (core.Attr, bool) {
	if !wbSetAttrOK(s) || ref.Parent == 0 || ref.Name == "" || !c.wbEveryChange() {
		return core.Attr{}, false
	}
	open := c.lookupOpen(ref.Ino)
	if open != nil {
		defer c.releaseOpen(open)
		open.mu.Lock()
		inline := open.mu.inline && open.mu.err == nil
		open.mu.Unlock()
		if !inline {
			return core.Attr{}, false
		}
		if s.Mtime != nil || s.MtimeNow {
			if open.flushAs(ctx, false, nil, true) != nil {
				return core.Attr{}, false // the synchronous path reports it
			}
		}
	}
	w := c.wbAcquire(ctx, ref.Parent)
	if w == nil {
		return core.Attr{}, false
	}
	a, ok := c.wbQueueSetAttr(ctx, w, ref, s)
	if ok && open != nil {
		open.mu.Lock()
		if (s.Mtime != nil || s.MtimeNow) && !open.mu.modified {
			open.mu.mtime = a.Mtime
		}
		open.mu.mode = a.Mode
		open.mu.Unlock()
	}
	return a, ok
}

// wbQueueSetAttr checks and queues the setattr s of ref in w.
func (c *Client) wbQueueSetAttr(ctx context.Context, w *wbDir, ref Ref, s SetAttr) (core.Attr, bool) {
	w.ops.Lock()
	defer w.ops.Unlock()
	a, exists, err := c.wbResolve(ctx, w, ref.Name)
	creds := c.creds(ctx)
	if err != nil || !exists || a.Ino != ref.Ino || a.IsDir() || a.Nlink != 1 {
		return core.Attr{}, false
	}
	now := time.Now()
	req := s.pb()
	var op *pb.BatchOp
	if s.UID != nil || s.GID != nil {
		var ok bool
		if a, ok = ownerChange(creds, a, s); !ok {
			return core.Attr{}, false
		}
		op = &pb.BatchOp{Creds: credsPB(creds), Owner: &pb.BatchOwner{Name: ref.Name, Ino: uint64(a.Ino),
			Valid: req.Valid, Uid: req.Uid, Gid: req.Gid, TimeNs: now.UnixNano()}}
	} else {
		if creds.UID != 0 && creds.UID != a.UID {
			return core.Attr{}, false
		}
		a = modeTimesChange(creds, a, s, req, now)
		op = &pb.BatchOp{Creds: credsPB(creds), Setattr: &pb.BatchSetAttr{Name: ref.Name, Ino: uint64(a.Ino),
			Valid: req.Valid, Mode: req.Mode, AtimeNs: req.AtimeNs, MtimeNs: req.MtimeNs, TimeNs: now.UnixNano()}}
	}
	a.Ctime = now
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.usableLocked(now) {
		return core.Attr{}, false
	}
	w.queueChangeLocked(ref.Name, a.Ino, op)
	w.nameLocked(ref.Name).attr = a
	return a, true
}

// modeTimesChange applies a change of mode and times to a, as the server
// does (meta's applySetAttr).
func modeTimesChange(creds core.Creds, a core.Attr, s SetAttr, req *pb.SetAttrRequest, now time.Time) core.Attr {
	if s.Mode != nil {
		a.Mode = a.Mode&core.ModeType | *s.Mode&core.ModeBits
		if creds.UID != 0 && !creds.InGroup(a.GID) {
			a.Mode &^= core.ModeSetgid
		}
	}
	switch {
	case s.AtimeNow:
		a.Atime = now
	case s.Atime != nil:
		a.Atime = time.Unix(0, req.AtimeNs)
	}
	switch {
	case s.MtimeNow:
		a.Mtime = now
	case s.Mtime != nil:
		a.Mtime = time.Unix(0, req.MtimeNs)
	}
	return a
}

// wbRename renames a file to a free name in the same directory under
// write-back (not in a split directory, whose names may be on two servers).
func (c *Client) wbRename(ctx context.Context, dir core.Ino, src, dst string, flags uint32) (bool, error) {
	if src == dst || !c.wbEveryChange() || flags&^RenameNoReplace != 0 || core.ValidateName("rename", src) != nil ||
		core.ValidateName("rename", dst) != nil || !c.unsplit(dir) {
		return false, nil
	}
	w := c.wbAcquire(ctx, dir)
	if w == nil {
		return false, nil
	}
	w.ops.Lock()
	defer w.ops.Unlock()
	a, ok, err := c.wbRenameResolve(ctx, w, src, w, dst, flags)
	if err != nil || !ok {
		return err != nil, err
	}
	creds := c.creds(ctx)
	now := time.Now()
	w.mu.Lock()
	if !w.usableLocked(now) || !dirAllows(creds, w.mu.dattr) {
		w.mu.Unlock()
		return false, nil
	}
	w.queueLocked(&pb.BatchOp{Creds: credsPB(creds), Rename: &pb.BatchRename{Src: src, Dst: dst, Ino: uint64(a.Ino), TimeNs: now.UnixNano()}}, src, dst)
	s := w.nameLocked(src)
	data, dataOK, fresh := s.data, s.dataOK, s.fresh
	s.absent, s.attr, s.data, s.dataOK, s.fresh = true, core.Attr{}, nil, false, false
	d := w.nameLocked(dst)
	if d.absent {
		d.absent = false
		w.mu.absent--
	}
	a.Ctime = now
	d.attr, d.data, d.dataOK, d.fresh = a, data, dataOK, fresh
	w.mu.mtime = now
	w.mu.Unlock()
	// An open file follows its name: its next commit (which sends the
	// queue first) goes to the new one.
	c.renameOpen(dir, src, dir, dst, false, 0)
	return true, nil
}

// unsplit reports whether the client knows dir as one partition.
func (c *Client) unsplit(dir core.Ino) bool {
	if len(c.metas) == 1 {
		return true
	}
	b := c.maps.bitmap(dir)
	for i, x := range b {
		if i == 0 && x != 1 || i > 0 && x != 0 {
			return false
		}
	}
	return true
}

// wbTakeErr returns, once, the error of a refused batch of dir.
func (c *Client) wbTakeErr(dir core.Ino) error {
	w := c.wbLookupDir(dir)
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.mu.err
	w.mu.err = nil
	return err
}

// wbRenameResolve resolves the source of a rename in ws and its
// destination in wd under write-back: ok = false leaves the rename to the
// servers (a directory, a hard-linked file, a name it replaces, a lookup
// that failed); err is the rename's own error (no source, or a taken name
// under RenameNoReplace).
func (c *Client) wbRenameResolve(ctx context.Context, ws *wbDir, src string, wd *wbDir, dst string, flags uint32) (a core.Attr, ok bool, err error) {
	a, exists, err := c.wbResolve(ctx, ws, src)
	switch {
	case err != nil:
		return a, false, nil
	case !exists:
		return a, false, &errs.Error{Kind: errs.NotExist, Op: "rename", Path: src}
	case a.IsDir() || a.Nlink != 1:
		return a, false, nil
	}
	_, taken, err := c.wbResolve(ctx, wd, dst)
	switch {
	case err != nil:
		return a, false, nil
	case taken && flags&RenameNoReplace != 0:
		return a, false, &errs.Error{Kind: errs.Exist, Op: "rename", Path: dst}
	case taken:
		return a, false, nil // replacing a file: the servers' part
	}
	return a, true, nil
}
