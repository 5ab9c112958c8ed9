package client

import (
	"context"
	"encoding/binary"
	"slices"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// LookupAt returns the attributes of name in directory parent.
func (c *Client) LookupAt(ctx context.Context, parent core.Ino, name string) (core.Attr, error) {
	if a, ok, err := c.wbLookup(parent, name); ok {
		return c.overlayOpen(a), err
	}
	w := c.wbLookupDir(parent)
	gen := w.generation()
	a, err := c.lookupServer(ctx, parent, name)
	if err != nil {
		if w != nil && errs.Is(err, errs.NotExist) {
			w.noteAbsent(name, gen)
		}
		return core.Attr{}, err
	}
	return c.wbDirAttr(c.overlayOpen(a)), nil
}

// GetAttr returns the attributes of the node ref names.
func (c *Client) GetAttr(ctx context.Context, ref Ref) (core.Attr, error) {
	a, _, err := c.getAttrAt(ctx, ref)
	return a, err
}

// getAttrAt is GetAttr that also says where the server found the node: an
// open file another client moved is read under its new name (callRef).
func (c *Client) getAttrAt(ctx context.Context, ref Ref) (core.Attr, Ref, error) {
	if a, ok := c.wbStat(ref); ok {
		return c.overlayOpen(a), ref, nil
	}
	var r pb.GetAttrReply
	req := &pb.GetAttrRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb()}
	err := c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodGetAttr, req, &r, true)
	if err != nil {
		return core.Attr{}, ref, err
	}
	if req.Node.Parent != 0 && req.Node.Name != "" {
		ref.Parent, ref.Name = core.Ino(req.Node.Parent), req.Node.Name
	}
	return c.wbDirAttr(c.overlayOpen(attrFromPB(r.Attr))), ref, nil
}

// SetAttr names the attributes to change; nil fields stay.
type SetAttr struct {
	Mode     *uint32
	UID      *uint32
	GID      *uint32
	Size     *uint64
	Atime    *time.Time
	Mtime    *time.Time
	AtimeNow bool
	MtimeNow bool
}

func (s SetAttr) pb() *pb.SetAttrRequest {
	req := &pb.SetAttrRequest{}
	if s.Mode != nil {
		req.Valid |= uint32(pb.SetAttrBits_SETATTR_MODE)
		req.Mode = *s.Mode
	}
	if s.UID != nil {
		req.Valid |= uint32(pb.SetAttrBits_SETATTR_UID)
		req.Uid = *s.UID
	}
	if s.GID != nil {
		req.Valid |= uint32(pb.SetAttrBits_SETATTR_GID)
		req.Gid = *s.GID
	}
	if s.Size != nil {
		req.Valid |= uint32(pb.SetAttrBits_SETATTR_SIZE)
		req.Size = *s.Size
	}
	if s.Atime != nil {
		req.Valid |= uint32(pb.SetAttrBits_SETATTR_ATIME)
		req.AtimeNs = s.Atime.UnixNano()
	}
	if s.Mtime != nil {
		req.Valid |= uint32(pb.SetAttrBits_SETATTR_MTIME)
		req.MtimeNs = s.Mtime.UnixNano()
	}
	if s.AtimeNow {
		req.Valid |= uint32(pb.SetAttrBits_SETATTR_ATIME_NOW)
	}
	if s.MtimeNow {
		req.Valid |= uint32(pb.SetAttrBits_SETATTR_MTIME_NOW)
	}
	return req
}

// SetAttr changes attributes of the node ref names. A size change goes
// through the file's open state when this client has it open, so buffered
// writes and the new size agree.
func (c *Client) SetAttr(ctx context.Context, ref Ref, s SetAttr) (core.Attr, error) {
	if a, ok := c.wbSetAttr(ctx, ref, s); ok {
		return a, nil
	}
	if a, ok := c.wbSetDirAttr(ctx, ref, s); ok {
		return a, nil
	}
	// A directory under write-back: its queue goes first, and the client
	// forgets the attributes it knew.
	if err := c.wbBarrier(ctx, ref.Ino); err != nil {
		return core.Attr{}, err
	}
	if s.Size != nil {
		if n := c.lookupOpen(ref.Ino); n != nil {
			defer c.releaseOpen(n)
			if err := n.truncate(ctx, *s.Size, false); err != nil {
				return core.Attr{}, err
			}
			s.Size = nil
			if s == (SetAttr{}) {
				return c.GetAttr(ctx, ref)
			}
		} else if err := c.prepareTruncate(ctx, ref, *s.Size); err != nil {
			return core.Attr{}, err
		}
	}
	if s.Mtime != nil || s.MtimeNow {
		if n := c.lookupOpen(ref.Ino); n != nil {
			defer c.releaseOpen(n)
			return n.setMtime(ctx, ref, s)
		}
	}
	a, err := c.setAttr(ctx, ref, s, false)
	if err == nil && s.Mode != nil {
		c.noteMode(a)
	}
	return a, err
}

// setMtime is SetAttr with an explicit mtime of a file open here (futimens
// after writes, as cp -p and tar x do): the writes buffered so far are
// committed first, so that their own mtime does not overwrite the one set.
func (n *openInode) setMtime(ctx context.Context, ref Ref, s SetAttr) (core.Attr, error) {
	if err := n.flush(ctx, false); err != nil {
		return core.Attr{}, err
	}
	a, err := n.c.setAttr(ctx, ref, s, false)
	if err != nil {
		return a, err
	}
	n.mu.Lock()
	if !n.mu.modified {
		n.mu.mtime = a.Mtime
	}
	n.mu.mode = a.Mode
	n.mu.Unlock()
	return a, nil
}

func (c *Client) setAttr(ctx context.Context, ref Ref, s SetAttr, byHandle bool) (core.Attr, error) {
	return c.setAttrFrom(ctx, ref, s, byHandle, sizeUnknown)
}

// setAttrFrom is setAttr for a file whose size this client knows is
// before (sizeUnknown: it does not): a truncate that does not shrink it
// needs no guard of its parity (guardShrink).
func (c *Client) setAttrFrom(ctx context.Context, ref Ref, s SetAttr, byHandle bool, before uint64) (core.Attr, error) {
	req := s.pb()
	req.Creds = credsPB(c.creds(ctx))
	req.Node = ref.pb()
	req.ByHandle = byHandle
	req.ChunkSize, req.Replication = c.cfg.ChunkSize, c.layoutReplication()
	var guard *shrinkGuard
	if c.ec != nil && s.Size != nil {
		// Cached parity goes out before the truncate cuts the data it
		// was computed from (stripecache.go); Ino 0 (a name): every file's.
		c.FlushParity(ref.Ino)
		// The stripe that will hold the new end is locked and its parity
		// marked until its parity is rewritten (stripeguard.go).
		ino := ref.Ino
		if before == sizeUnknown && c.needsShrinkGuard(max(ino, 1), *s.Size, before) {
			ino, before = c.sizeBefore(ctx, ref)
		}
		var err error
		if guard, err = c.guardShrink(ctx, ino, *s.Size, before); err != nil {
			return core.Attr{}, err
		}
	}
	var r pb.SetAttrReply
	err := c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodSetAttr, req, &r, false)
	a := attrFromPB(r.Attr)
	guard = c.endGuard(ctx, guard, err, a, r.Attr.GetInline(), r.OldSize)
	if err != nil {
		return core.Attr{}, err
	}
	c.noteEdgeHeld(r.Queued)
	if c.ec != nil && s.Size != nil && c.afterTruncateReply != nil {
		c.afterTruncateReply(a.Ino)
	}
	if c.ec != nil && s.Size != nil && !r.Attr.GetInline() {
		if err := c.shrinkParity(ctx, a.Ino, a.Size, r.OldSize, guard); err != nil {
			return a, err
		}
	}
	// Bytes past a new smaller size are dropped from the stores by the meta
	// server, recorded in the truncate's batch (meta/reclaim.go).
	return a, nil
}

// noteMode tells the file's open state, if any, its new mode, so that a
// write by another user knows whether it clears setuid and setgid. The
// caller must not hold the open state's lock.
func (c *Client) noteMode(a core.Attr) {
	c.mu.Lock()
	n := c.mu.open[a.Ino]
	c.mu.Unlock()
	if n != nil {
		n.mu.Lock()
		n.mu.mode = a.Mode
		n.mu.Unlock()
	}
}

// prepareTruncate makes an inline file chunked before it grows past the
// inline limit: the meta server cannot write to the stores.
func (c *Client) prepareTruncate(ctx context.Context, ref Ref, size uint64) error {
	if size <= uint64(c.cfg.InlineLimit) {
		return nil
	}
	var r pb.OpenReply
	req := &pb.OpenRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb(), Flags: oWRONLY}
	err := c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodOpen, req, &r, true)
	if err != nil || !r.Attr.GetInline() {
		return err
	}
	n := c.acquireOpen(ref, &r, c.creds(ctx))
	defer c.releaseOpen(n)
	return n.uninline(ctx)
}

// CreateAt creates a regular file (or, with O_EXCL unset, opens an existing
// one) in directory parent and returns it open with flags.
func (c *Client) CreateAt(ctx context.Context, parent core.Ino, name string, flags int, mode uint32) (*File, error) {
	f, _, err := c.CreateAtAttr(ctx, parent, name, flags, mode)
	return f, err
}

// CreateAtAttr is CreateAt that also returns the file's attributes as the
// server reported them, which the FUSE layer's reply needs.
func (c *Client) CreateAtAttr(ctx context.Context, parent core.Ino, name string, flags int, mode uint32) (*File, core.Attr, error) {
	if f, a, ok, err := c.wbCreate(ctx, parent, name, flags, mode); ok {
		return f, a, err
	}
	if flags&oTRUNC != 0 {
		c.flushBeforeCut(0) // the name's file, if it exists, is not known here
	}
	req := &pb.CreateRequest{
		Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name,
		Mode: core.ModeFile | mode&core.ModeBits, Exclusive: flags&oEXCL != 0, OpenFlags: uint32(flags),
	}
	l := c.openLease(ctx, Ref{Parent: parent, Name: name})
	var r pb.CreateReply
	if err := c.callName(ctx, parent, name, pb.MethodCreate, req, &r, false); err != nil {
		return nil, core.Attr{}, err
	}
	ref := Ref{Ino: core.Ino(r.Attr.GetIno()), Parent: parent, Name: name}
	open := &pb.OpenReply{Attr: r.Attr, InlineData: r.InlineData, Capability: r.Capability}
	truncated := r.Existed && flags&oTRUNC != 0
	if truncated {
		// The create reply does not say how large the file was: assume it
		// had chunks, so that none of its old bytes can reappear in a hole.
		open.OldSize = 1
	}
	f, err := c.newFile(ctx, ref, open, flags, truncated)
	if err != nil {
		return nil, core.Attr{}, err
	}
	f.n.staleUnless(l, r.Attr)
	return f, attrFromPB(r.Attr), nil
}

// MknodAt creates a fifo, socket or device node (mode carries the type).
func (c *Client) MknodAt(ctx context.Context, parent core.Ino, name string, mode, rdev uint32) (core.Attr, error) {
	if mode&core.ModeType == 0 {
		mode |= core.ModeFile
	}
	var r pb.CreateReply
	err := c.callName(ctx, parent, name, pb.MethodCreate, &pb.CreateRequest{
		Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name, Mode: mode, Rdev: rdev, Exclusive: true,
	}, &r, false)
	return attrFromPB(r.Attr), err
}

// MkdirAt creates directory name in parent.
func (c *Client) MkdirAt(ctx context.Context, parent core.Ino, name string, mode uint32) (core.Attr, error) {
	if a, ok, err := c.wbMkdir(ctx, parent, name, mode); ok {
		return a, err
	}
	var r pb.MkdirReply
	err := c.callName(ctx, parent, name, pb.MethodMkdir, &pb.MkdirRequest{
		Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name, Mode: mode & core.ModeBits,
	}, &r, false)
	return attrFromPB(r.Attr), err
}

// SymlinkAt creates symlink name in parent pointing at target.
func (c *Client) SymlinkAt(ctx context.Context, parent core.Ino, name, target string) (core.Attr, error) {
	var r pb.SymlinkReply
	err := c.callName(ctx, parent, name, pb.MethodSymlink, &pb.SymlinkRequest{
		Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name, Target: target,
	}, &r, false)
	return attrFromPB(r.Attr), err
}

// Readlink returns the target of the symlink ref names.
func (c *Client) Readlink(ctx context.Context, ref Ref) (string, error) {
	var r pb.ReadlinkReply
	req := &pb.ReadlinkRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb()}
	err := c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodReadlink, req, &r, true)
	return r.Target, err
}

// UnlinkAt removes name, not a directory, from parent. When that was the
// last link of a chunked file, the meta server reclaims its chunks (after
// this client's last close if it has the file open).
func (c *Client) UnlinkAt(ctx context.Context, parent core.Ino, name string) error {
	if ok, err := c.wbUnlink(ctx, parent, name); ok {
		return err
	}
	var r pb.UnlinkReply
	open := c.openAt(parent, name)
	err := c.callName(ctx, parent, name, pb.MethodUnlink, &pb.UnlinkRequest{
		Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name, Open: open,
	}, &r, false)
	if err == nil {
		c.dropped(core.Ino(r.Attr.GetIno()), r.Attr.GetNlink() == 0, parent, name, open)
	}
	return err
}

// RmdirAt removes the empty directory name from parent.
func (c *Client) RmdirAt(ctx context.Context, parent core.Ino, name string) error {
	if ok, err := c.wbRmdir(ctx, parent, name); ok {
		return err
	}
	// The directory's written-back unlinks go first: the server checks
	// that it is empty.
	if err := c.wbBarrierChild(ctx, parent, name); err != nil {
		return err
	}
	return c.callName(ctx, parent, name, pb.MethodRmdir, &pb.RmdirRequest{
		Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name,
	}, &pb.Empty{}, false)
}

// Rename flags, Linux values.
const (
	RenameNoReplace = uint32(pb.RenameFlags_RENAME_NOREPLACE)
	RenameExchange  = uint32(pb.RenameFlags_RENAME_EXCHANGE)
)

// RenameAt moves srcName in srcParent to dstName in dstParent.
func (c *Client) RenameAt(ctx context.Context, srcParent core.Ino, srcName string, dstParent core.Ino, dstName string, flags uint32) error {
	if srcParent == dstParent {
		if ok, err := c.wbRename(ctx, srcParent, srcName, dstName, flags); ok {
			return err
		}
	} else if ok, err := c.wbRenameCross(ctx, srcParent, srcName, dstParent, dstName, flags); ok {
		return err
	} else if err := c.wbBarrier(ctx, dstParent); err != nil {
		return err
	} else {
		// The rename changes dstParent too: what the client learnt of it
		// meanwhile goes once it is done.
		defer c.wbForgetDir(dstParent)
	}
	// A directory renamed over must be empty: its queue goes first.
	if err := c.wbBarrierChild(ctx, dstParent, dstName); err != nil {
		return err
	}
	var r pb.RenameReply
	open := c.openAt(dstParent, dstName)
	err := c.callName(ctx, srcParent, srcName, pb.MethodRename, &pb.RenameRequest{
		Creds: credsPB(c.creds(ctx)), SrcParent: uint64(srcParent), SrcName: srcName,
		DstParent: uint64(dstParent), DstName: dstName, Flags: flags, Open: open,
	}, &r, false)
	if err == nil {
		replaced := core.Ino(r.Replaced.GetIno())
		if replaced != 0 {
			c.dropped(replaced, r.Replaced.GetNlink() == 0, dstParent, dstName, open)
		}
		c.renameOpen(srcParent, srcName, dstParent, dstName, flags&RenameExchange != 0, replaced)
	}
	return err
}

// LinkAt makes newName in newParent a hard link to the file ref names.
func (c *Client) LinkAt(ctx context.Context, ref Ref, newParent core.Ino, newName string) (core.Attr, error) {
	if err := c.wbBarrier(ctx, ref.Parent); err != nil {
		return core.Attr{}, err
	}
	var r pb.LinkReply
	err := c.callName(ctx, newParent, newName, pb.MethodLink, &pb.LinkRequest{
		Creds: credsPB(c.creds(ctx)), Node: ref.pb(), NewParent: uint64(newParent), NewName: newName,
	}, &r, false)
	return attrFromPB(r.Attr), err
}

// ReadDirPage returns up to limit entries of dir after cookie (nil starts at
// the beginning), the cookie to continue with, and whether the listing ended.
//
// A directory split across meta servers is listed by merging its partitions:
// every partition the client knows of is read from the cookie's position in
// (name hash, name) order, the order every partition keeps, and the smallest
// entries are returned. A partition's bitmap may name partitions the client
// did not know, which are read too. An entry that a concurrent split moves is
// returned once: a moved entry keeps its position, so it is skipped as a
// duplicate if both its old and new partition return it.
func (c *Client) ReadDirPage(ctx context.Context, dir core.Ino, cookie []byte, limit int, plus bool) ([]core.DirEntry, []byte, bool, error) {
	// A listing sees the queued write-back changes: they go first.
	if err := c.wbFlushDir(ctx, dir); err != nil {
		return nil, nil, false, err
	}
	return c.readDirPage(ctx, dir, cookie, limit, plus)
}

// readDirPage is ReadDirPage without sending write-back changes first.
func (c *Client) readDirPage(ctx context.Context, dir core.Ino, cookie []byte, limit int, plus bool) ([]core.DirEntry, []byte, bool, error) {
	if limit <= 0 {
		limit = defaultPageLimit
	}
	req := func() *pb.ReadDirRequest {
		return &pb.ReadDirRequest{Creds: credsPB(c.creds(ctx)), Dir: uint64(dir), Cookie: cookie, Limit: uint32(limit), Plus: plus}
	}
	if len(c.metas) == 1 {
		var r pb.ReadDirReply
		if err := c.callIdempotent(ctx, c.metas[0], pb.MethodReadDir, req(), &r); err != nil {
			return nil, nil, false, err
		}
		out := make([]core.DirEntry, 0, len(r.Entries))
		for _, e := range r.Entries {
			out = append(out, entryFromPB(e))
		}
		return out, r.Cookie, r.Eof, nil
	}
	type part struct {
		entries []*pb.DirEntryMsg
		eof     bool
	}
	parts := map[uint32]*part{}
	for {
		bitmap := c.maps.bitmap(dir)
		var todo []uint32
		for p := uint32(0); p < uint32(len(bitmap))*8; p++ {
			if core.BitmapHas(bitmap, p) && parts[p] == nil {
				todo = append(todo, p)
			}
		}
		if len(todo) == 0 {
			break
		}
		replies := make([]pb.ReadDirReply, len(todo))
		errc := make(chan error, len(todo))
		for i, p := range todo {
			go func() {
				errc <- c.callIdempotent(ctx, c.partPeer(dir, p), pb.MethodReadDir, req(), &replies[i])
			}()
		}
		var first error
		for range todo {
			if err := <-errc; err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			return nil, nil, false, first
		}
		for i, p := range todo {
			parts[p] = &part{entries: replies[i].Entries, eof: replies[i].Eof}
			c.maps.learn(dir, replies[i].Bitmap)
		}
	}
	// Merge: an entry may be returned only if every partition that stopped
	// early (not eof) has returned past it.
	var bound *pb.DirEntryMsg
	var all []*pb.DirEntryMsg
	for _, p := range parts {
		all = append(all, p.entries...)
		if !p.eof && len(p.entries) > 0 {
			last := p.entries[len(p.entries)-1]
			if bound == nil || entryLess(last, bound) {
				bound = last
			}
		}
	}
	slices.SortFunc(all, func(a, b *pb.DirEntryMsg) int {
		switch {
		case entryLess(a, b):
			return -1
		case entryLess(b, a):
			return 1
		}
		return 0
	})
	out := make([]core.DirEntry, 0, min(limit, len(all)))
	next := cookie
	eof := bound == nil
	for i, e := range all {
		if i > 0 && all[i-1].Name == e.Name {
			continue // moved by a split while we read
		}
		if bound != nil && entryLess(bound, e) || len(out) == limit {
			eof = false
			break
		}
		out = append(out, entryFromPB(e))
		next = readdirCookie(e.Name)
	}
	return out, next, eof, nil
}

// defaultPageLimit is the page size when the caller names none.
const defaultPageLimit = 1024

// entryLess orders entries as every partition lists them: name hash, then
// name.
func entryLess(a, b *pb.DirEntryMsg) bool {
	ha, hb := core.NameHash(a.Name), core.NameHash(b.Name)
	if ha != hb {
		return ha < hb
	}
	return a.Name < b.Name
}

// readdirCookie is the position just after name, in the meta servers'
// cookie format (docs/wire.md): version 2, the name hash, the name.
func readdirCookie(name string) []byte {
	c := binary.BigEndian.AppendUint64([]byte{2}, core.NameHash(name))
	return append(c, name...)
}

// ReadDirAt lists every entry of dir ("." and ".." excluded), calling fn for
// each page-worth as it arrives so huge directories stream.
func (c *Client) ReadDirAt(ctx context.Context, dir core.Ino, plus bool, fn func(core.DirEntry) error) error {
	var cookie []byte
	for {
		page, next, eof, err := c.ReadDirPage(ctx, dir, cookie, 0, plus)
		if err != nil {
			return err
		}
		for _, e := range page {
			if err := fn(e); err != nil {
				return err
			}
		}
		if eof {
			return nil
		}
		if len(page) == 0 && string(next) == string(cookie) {
			return errs.New(errs.Protocol, "readdir", "server made no progress")
		}
		cookie = next
	}
}

// Access checks the caller's permission mask (R=4, W=2, X=1; 0 = exists).
func (c *Client) Access(ctx context.Context, ref Ref, mask uint32) error {
	req := &pb.AccessRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb(), Mask: mask}
	return c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodAccess, req, &pb.Empty{}, true)
}
