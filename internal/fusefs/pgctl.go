package fusefs

import (
	"context"
	"encoding/binary"
	"math"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/errs"
)

// The patchgroup control file (issue 15, Featherstitch's pg_* calls for
// programs on a mount). PatchgroupControl at the mount root is not listed
// by readdir; a program opens it and calls ioctls on it:
//
//	WEFT_PG_CREATE    _IOR('W', 1, int64)    the new group's id
//	WEFT_PG_DEPEND    _IOW('W', 2, int64[2]) {after, before}: after depends on before
//	WEFT_PG_ENGAGE    _IOW('W', 3, int64)    the calling process engages the group
//	WEFT_PG_DISENGAGE _IOW('W', 4, int64)
//	WEFT_PG_SYNC      _IOW('W', 5, int64)    wait until the group is durable
//	WEFT_PG_CLOSE     _IOW('W', 6, int64)
//
// The result is 0 or -1 with errno. Engagements belong to the calling
// process and are inherited by its descendants (pgprocs.go). include/weft_pg.h
// and python/weft_pg.py wrap the calls with the paper's names.

// PatchgroupControl is the name of the control file at the mount root.
const PatchgroupControl = ".weft-pg"

// pgCtlIno is the control file's inode number: one no meta server hands
// out (server 65535).
const pgCtlIno = math.MaxUint64 - 1

// ioctl numbers, as Linux's _IOC encodes them: direction, size, type, nr.
const (
	iocWrite = 1
	iocRead  = 2
)

func pgIoc(dir, nr, size uint32) uint32 { return dir<<30 | size<<16 | 'W'<<8 | nr }

// The control file's ioctl numbers (weft pg uses them too).
var (
	PGIoctlCreate    = pgIoc(iocRead, 1, 8)
	PGIoctlDepend    = pgIoc(iocWrite, 2, 16)
	PGIoctlEngage    = pgIoc(iocWrite, 3, 8)
	PGIoctlDisengage = pgIoc(iocWrite, 4, 8)
	PGIoctlSync      = pgIoc(iocWrite, 5, 8)
	PGIoctlClose     = pgIoc(iocWrite, 6, 8)
)

// pgCtlNode is the control file.
type pgCtlNode struct {
	fs.Inode
	fsys *fileSystem
}

var (
	_ fs.NodeGetattrer = (*pgCtlNode)(nil)
	_ fs.NodeOpener    = (*pgCtlNode)(nil)
	_ fs.NodeIoctler   = (*pgCtlNode)(nil)
	_ fs.NodeSetattrer = (*pgCtlNode)(nil)
)

// lookupControl answers the lookup of PatchgroupControl in the root.
func (n *Node) lookupControl(ctx context.Context, out *fuse.EntryOut) *fs.Inode {
	ctl := &pgCtlNode{fsys: n.fsys}
	ctl.fillAttr(&out.Attr)
	out.NodeId, out.Generation = pgCtlIno, 1
	out.SetEntryTimeout(n.fsys.opts.EntryTimeout)
	out.SetAttrTimeout(n.fsys.opts.AttrTimeout)
	return n.NewInode(ctx, ctl, fs.StableAttr{Mode: syscall.S_IFREG, Ino: pgCtlIno, Gen: 1})
}

func (p *pgCtlNode) fillAttr(a *fuse.Attr) {
	*a = fuse.Attr{Ino: pgCtlIno, Mode: syscall.S_IFREG | 0o666, Nlink: 1}
}

func (p *pgCtlNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	p.fillAttr(&out.Attr)
	return 0
}

// Setattr accepts only what opening with O_TRUNC sends: the file is empty.
func (p *pgCtlNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && sz == 0 && in.Valid&^(fuse.FATTR_SIZE|fuse.FATTR_FH) == 0 {
		p.fillAttr(&out.Attr)
		return 0
	}
	return syscall.EPERM
}

func (p *pgCtlNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

// Ioctl runs one patchgroup call for the calling process.
func (p *pgCtlNode) Ioctl(ctx context.Context, f fs.FileHandle, cmd uint32, arg uint64, input []byte, output []byte) (int32, syscall.Errno) {
	caller, ok := fuse.FromContext(ctx)
	if !ok {
		return -1, syscall.EINVAL
	}
	t := p.fsys.pg
	id := func() uint64 {
		if len(input) < 8 {
			return 0
		}
		return binary.LittleEndian.Uint64(input)
	}
	var err error
	switch cmd {
	case PGIoctlCreate:
		if len(output) < 8 {
			return -1, syscall.EINVAL
		}
		var g uint64
		if g, err = t.create(caller.Uid); err == nil {
			binary.LittleEndian.PutUint64(output, g)
		}
	case PGIoctlDepend:
		if len(input) < 16 {
			return -1, syscall.EINVAL
		}
		err = t.depend(caller.Uid, binary.LittleEndian.Uint64(input), binary.LittleEndian.Uint64(input[8:]))
	case PGIoctlEngage:
		err = t.engage(caller, id())
	case PGIoctlDisengage:
		err = t.disengage(caller, id())
	case PGIoctlSync:
		var g *client.Patchgroup
		if g, err = t.group(caller.Uid, id()); err == nil {
			cctx, cancel := p.fsys.callCtx(ctx)
			err = g.Sync(cctx)
			cancel()
		}
	case PGIoctlClose:
		err = t.close(caller.Uid, id())
	default:
		return -1, syscall.ENOTTY
	}
	if err != nil {
		return -1, p.fsys.fail("patchgroup", err)
	}
	return 0, 0
}

// errNoGroup is the answer for an id the mount does not know.
func errNoGroup(op string, id uint64) error {
	return errs.New(errs.BadHandle, op, "no patchgroup %d", id)
}
