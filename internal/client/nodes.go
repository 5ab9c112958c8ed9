package client

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// LookupAt returns the attributes of name in directory parent.
func (c *Client) LookupAt(ctx context.Context, parent core.Ino, name string) (core.Attr, error) {
	var r pb.LookupReply
	err := c.callIdempotent(ctx, c.metaFor(parent), pb.MethodLookup,
		&pb.LookupRequest{Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name}, &r)
	if err != nil {
		return core.Attr{}, err
	}
	return c.overlayOpen(attrFromPB(r.Attr)), nil
}

// GetAttr returns the attributes of the node ref names.
func (c *Client) GetAttr(ctx context.Context, ref Ref) (core.Attr, error) {
	var r pb.GetAttrReply
	err := c.callIdempotent(ctx, c.metaFor(ref.Parent), pb.MethodGetAttr,
		&pb.GetAttrRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb()}, &r)
	if err != nil {
		return core.Attr{}, err
	}
	return c.overlayOpen(attrFromPB(r.Attr)), nil
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
	return c.setAttr(ctx, ref, s, false)
}

func (c *Client) setAttr(ctx context.Context, ref Ref, s SetAttr, byHandle bool) (core.Attr, error) {
	req := s.pb()
	req.Creds = credsPB(c.creds(ctx))
	req.Node = ref.pb()
	req.ByHandle = byHandle
	var r pb.SetAttrReply
	if err := call(ctx, c.metaFor(ref.Parent), pb.MethodSetAttr, req, &r); err != nil {
		return core.Attr{}, err
	}
	a := attrFromPB(r.Attr)
	if s.Size != nil && r.OldSize > a.Size {
		// Bytes past the new size must read as zeros if the file grows
		// again, so the stores drop them before the call returns. (A
		// truncate to zero makes the file inline again: its old chunks
		// must go all the same.)
		if err := c.shrinkChunks(ctx, a.Ino, a.Size); err != nil {
			return a, err
		}
	}
	return a, nil
}

// prepareTruncate makes an inline file chunked before it grows past the
// inline limit: the meta server cannot write to the stores.
func (c *Client) prepareTruncate(ctx context.Context, ref Ref, size uint64) error {
	if size <= uint64(c.cfg.InlineLimit) {
		return nil
	}
	var r pb.OpenReply
	err := c.callIdempotent(ctx, c.metaFor(ref.Parent), pb.MethodOpen,
		&pb.OpenRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb(), Flags: oWRONLY}, &r)
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
	req := &pb.CreateRequest{
		Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name,
		Mode: core.ModeFile | mode&core.ModeBits, Exclusive: flags&oEXCL != 0, OpenFlags: uint32(flags),
	}
	var r pb.CreateReply
	if err := call(ctx, c.metaFor(parent), pb.MethodCreate, req, &r); err != nil {
		return nil, core.Attr{}, err
	}
	ref := Ref{Ino: core.Ino(r.Attr.GetIno()), Parent: parent, Name: name}
	open := &pb.OpenReply{Attr: r.Attr, InlineData: r.InlineData}
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
	return f, attrFromPB(r.Attr), nil
}

// MknodAt creates a fifo, socket or device node (mode carries the type).
func (c *Client) MknodAt(ctx context.Context, parent core.Ino, name string, mode, rdev uint32) (core.Attr, error) {
	if mode&core.ModeType == 0 {
		mode |= core.ModeFile
	}
	var r pb.CreateReply
	err := call(ctx, c.metaFor(parent), pb.MethodCreate, &pb.CreateRequest{
		Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name, Mode: mode, Rdev: rdev, Exclusive: true,
	}, &r)
	return attrFromPB(r.Attr), err
}

// MkdirAt creates directory name in parent.
func (c *Client) MkdirAt(ctx context.Context, parent core.Ino, name string, mode uint32) (core.Attr, error) {
	var r pb.MkdirReply
	err := call(ctx, c.metaFor(parent), pb.MethodMkdir, &pb.MkdirRequest{
		Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name, Mode: mode & core.ModeBits,
	}, &r)
	return attrFromPB(r.Attr), err
}

// SymlinkAt creates symlink name in parent pointing at target.
func (c *Client) SymlinkAt(ctx context.Context, parent core.Ino, name, target string) (core.Attr, error) {
	var r pb.SymlinkReply
	err := call(ctx, c.metaFor(parent), pb.MethodSymlink, &pb.SymlinkRequest{
		Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name, Target: target,
	}, &r)
	return attrFromPB(r.Attr), err
}

// Readlink returns the target of the symlink ref names.
func (c *Client) Readlink(ctx context.Context, ref Ref) (string, error) {
	var r pb.ReadlinkReply
	err := c.callIdempotent(ctx, c.metaFor(ref.Parent), pb.MethodReadlink,
		&pb.ReadlinkRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb()}, &r)
	return r.Target, err
}

// UnlinkAt removes name, not a directory, from parent. When that was the
// last link of a chunked file, its chunks are reclaimed in the background.
func (c *Client) UnlinkAt(ctx context.Context, parent core.Ino, name string) error {
	var r pb.UnlinkReply
	err := call(ctx, c.metaFor(parent), pb.MethodUnlink, &pb.UnlinkRequest{
		Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name,
	}, &r)
	if err == nil {
		c.dropped(core.Ino(r.Attr.GetIno()), r.Attr.GetNlink() == 0, r.Freed, parent, name)
	}
	return err
}

// RmdirAt removes the empty directory name from parent.
func (c *Client) RmdirAt(ctx context.Context, parent core.Ino, name string) error {
	return call(ctx, c.metaFor(parent), pb.MethodRmdir, &pb.RmdirRequest{
		Creds: credsPB(c.creds(ctx)), Parent: uint64(parent), Name: name,
	}, &pb.Empty{})
}

// Rename flags, Linux values.
const (
	RenameNoReplace = uint32(pb.RenameFlags_RENAME_NOREPLACE)
	RenameExchange  = uint32(pb.RenameFlags_RENAME_EXCHANGE)
)

// RenameAt moves srcName in srcParent to dstName in dstParent.
func (c *Client) RenameAt(ctx context.Context, srcParent core.Ino, srcName string, dstParent core.Ino, dstName string, flags uint32) error {
	var r pb.RenameReply
	err := call(ctx, c.metaFor(srcParent), pb.MethodRename, &pb.RenameRequest{
		Creds: credsPB(c.creds(ctx)), SrcParent: uint64(srcParent), SrcName: srcName,
		DstParent: uint64(dstParent), DstName: dstName, Flags: flags,
	}, &r)
	if err == nil {
		replaced := core.Ino(r.Replaced.GetIno())
		if replaced != 0 {
			c.dropped(replaced, r.Replaced.GetNlink() == 0, r.Freed, dstParent, dstName)
		}
		c.renameOpen(srcParent, srcName, dstParent, dstName, flags&RenameExchange != 0, replaced)
	}
	return err
}

// LinkAt makes newName in newParent a hard link to the file ref names.
func (c *Client) LinkAt(ctx context.Context, ref Ref, newParent core.Ino, newName string) (core.Attr, error) {
	var r pb.LinkReply
	err := call(ctx, c.metaFor(newParent), pb.MethodLink, &pb.LinkRequest{
		Creds: credsPB(c.creds(ctx)), Node: ref.pb(), NewParent: uint64(newParent), NewName: newName,
	}, &r)
	return attrFromPB(r.Attr), err
}

// ReadDirPage returns up to limit entries of dir after cookie (nil starts at
// the beginning), the cookie to continue with, and whether the listing ended.
func (c *Client) ReadDirPage(ctx context.Context, dir core.Ino, cookie []byte, limit int, plus bool) ([]core.DirEntry, []byte, bool, error) {
	var r pb.ReadDirReply
	err := c.callIdempotent(ctx, c.metaFor(dir), pb.MethodReadDir, &pb.ReadDirRequest{
		Creds: credsPB(c.creds(ctx)), Dir: uint64(dir), Cookie: cookie, Limit: uint32(limit), Plus: plus,
	}, &r)
	if err != nil {
		return nil, nil, false, err
	}
	out := make([]core.DirEntry, 0, len(r.Entries))
	for _, e := range r.Entries {
		out = append(out, entryFromPB(e))
	}
	return out, r.Cookie, r.Eof, nil
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
	return c.callIdempotent(ctx, c.metaFor(ref.Parent), pb.MethodAccess,
		&pb.AccessRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb(), Mask: mask}, &pb.Empty{})
}
