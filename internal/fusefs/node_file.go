package fusefs

import (
	"context"
	"errors"
	"io"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// handle is an open regular file: a client file handle and what the kernel
// was told about its caching.
type handle struct {
	node   *Node
	f      *client.File
	write  bool // open for writing
	direct bool // FOPEN_DIRECT_IO: the page cache does not see its I/O
}

var (
	_ fs.NodeOpener    = (*Node)(nil)
	_ fs.NodeCreater   = (*Node)(nil)
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
	_ fs.FileLseeker   = (*handle)(nil)
)

// Open opens a regular file (directories go through OpendirHandle).
func (n *Node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	ref := n.ref()
	walk, retry := n.fsys.retries.retry(ctx, n, "open")
	if retry {
		defer n.fsys.retries.openEnds(ctx)
	}
	if retry && walk.name != "" {
		// The name the retry's lookup found it under: go-fuse's tree
		// may have lost it since (a recall's invalidation).
		ref.Parent, ref.Name = walk.parent, walk.name
	}
	var (
		f   *client.File
		err error
	)
	if retry {
		// The kernel's retry after ESTALE, through a lookup that found
		// the name holding this node within the call: the node is
		// opened wherever another mount moved it since, as a local open
		// opens the inode its walk found (a second ESTALE would reach
		// the caller). A file removed by then fails with ENOENT if its
		// name is gone too, else ESTALE reaches the caller: the name
		// held a file throughout.
		f, err = n.fsys.c.OpenMoved(cctx, ref, int(flags))
	} else {
		f, err = n.fsys.c.OpenRef(cctx, ref, int(flags))
	}
	if errs.Is(err, errs.NotExist) && ref.Parent != 0 && !retry {
		// The name the kernel reached this node by is gone (another
		// mount removed it): ESTALE makes the kernel look it up again,
		// and an O_CREAT open then creates the file.
		err = errs.Wrap(errs.Stale, "open", ref.Name, err)
	}
	if errs.Is(err, errs.Stale) {
		n.fsys.retries.estale(ctx, "open")
	}
	if err != nil {
		return nil, 0, n.fsys.fail("open", err)
	}
	h := n.newHandle(f, flags)
	return h, n.openFlags(h, true), 0
}

// Create creates (or, without O_EXCL, opens) name and returns it open.
func (n *Node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	l := n.entryLease(cctx, name)
	defer n.fsys.change(n.ino())()
	f, a, err := n.fsys.c.CreateAtAttr(cctx, n.ino(), name, int(flags), mode)
	if err != nil {
		return nil, nil, 0, n.fsys.fail("create", err)
	}
	a, _ = n.fsys.c.OpenAttr(a)
	child := n.newChild(ctx, name, a)
	cn := child.Operations().(*Node)
	h := cn.newHandle(f, flags)
	n.fillEntryLeased(out, child, a, l, client.Lease{})
	return child, h, cn.openFlags(h, false), 0
}

func (n *Node) newHandle(f *client.File, flags uint32) *handle {
	h := &handle{
		node:  n,
		f:     f,
		write: flags&syscall.O_ACCMODE != syscall.O_RDONLY,
		// An append goes where the client knows the end is; the
		// kernel's cached size may be stale (package doc). O_DIRECT asks
		// to bypass caches: the page cache is the one the kernel has.
		direct: flags&(syscall.O_APPEND|syscall.O_DIRECT) != 0,
	}
	n.mu.Lock()
	n.mu.opens++
	n.mu.Unlock()
	return h
}

// openFlags decides how the kernel caches the file opened with h: it keeps
// its page cache if the file has the size and mtime the cache was filled
// with. Otherwise the cache is dropped and, for an existing file, the
// kernel's attributes are invalidated so that reads and stat see the new
// size (close-to-open).
func (n *Node) openFlags(h *handle, existing bool) uint32 {
	if h.direct {
		n.mu.Lock()
		n.mu.cacheValid = false
		n.mu.Unlock()
		return fuse.FOPEN_DIRECT_IO
	}
	a, _ := n.fsys.c.OpenAttr(core.Attr{Ino: n.ino()})
	n.mu.Lock()
	// A stale open state (client.File.Stale: a change may have landed
	// since the open read the file) may still show the old size and
	// mtime: the kernel's pages go.
	keep := n.mu.cacheValid && n.mu.cacheSize == a.Size && n.mu.cacheMtime.Equal(a.Mtime) && !h.f.Stale()
	seen := n.mu.attr.Size == a.Size && n.mu.attr.Mtime.Equal(a.Mtime)
	n.mu.cacheSize, n.mu.cacheMtime, n.mu.cacheValid = a.Size, a.Mtime, true
	n.mu.Unlock()
	if keep {
		return fuse.FOPEN_KEEP_CACHE
	}
	if existing && !seen {
		// Attributes only (offset -1): takes no lock the kernel holds
		// while it waits for this OPEN (package doc).
		_ = n.notifyContent(-1, 0)
	}
	return 0
}

// repoint tells the client where the file is now, before it commits to
// the meta server: go-fuse's tree follows renames and unlinks, including
// which other name a hard-linked file keeps when one goes. A node without a
// parent keeps what the client tracked itself (its inode, or freed).
func (h *handle) repoint() { h.node.repoint() }

// repoint gives the client the name go-fuse's tree has for an open file
// whose name the client lost (this mount removed the name it addressed a
// hard-linked file by), before a request through its open state. A name
// the client has wins: it follows the file when another mount renames it
// (client.relocateOpen) and re-points it at this mount's own renames,
// while go-fuse's tree keeps the name the kernel last looked up. Pointing
// the open state back there left it out of the recalls of the file's real
// directory (client.OpenIn), and the kernel's pages of the file stayed
// after another mount changed it (TestRecallOfOpenFileAfterOwnCloseRepointed).
func (n *Node) repoint() {
	if _, ok := n.fsys.c.OpenPlace(n.ino()); ok {
		return
	}
	if ref := n.ref(); ref.Parent != 0 {
		n.fsys.c.RepointOpen(ref)
	}
}

// Read reads at off; a short read is the end of the file.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	cctx, cancel := h.node.fsys.callCtx(ctx)
	defer cancel()
	k, unleased, err := h.f.ReadAtLeased(cctx, dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, h.node.fsys.fail("read", err)
	}
	if h.node.fsys.leases && unleased {
		// Served without a lease (the server refused it: a change
		// waits for this mount's release of the one it recalled), so
		// no recall will tell this mount when the change lands: the
		// pages this reply fills must not stay in the kernel's cache.
		// What this read took, not the open state afterwards: a
		// refresh under a lease granted once the change landed
		// clears the mark, and the bytes read before it were the
		// old ones (TestReadOfViewNoLeaseCovered).
		if k == 0 {
			// go-fuse writes an empty reply without calling Done. The
			// pages are in the cache already (locked until the reply
			// is taken): the invalidation waits for them.
			go func() { _ = h.node.notifyContent(off, 0) }()
			return fuse.ReadResultData(nil), 0
		}
		return &dropAfterReply{data: dest[:k], node: h.node, off: off}, 0
	}
	return fuse.ReadResultData(dest[:k]), 0
}

// dropAfterReply is a READ reply after which the kernel drops the file's
// pages from off on. The kernel puts the pages a read fills in its cache
// (locked) before it sends the READ, and unlocks them once it has taken
// the reply: an invalidation sent after the reply is written finds them
// and waits for their lock, so it drops them whatever the timing (it used
// to be sent 1 ms and 10 ms after the handler returned, a guess). go-fuse
// calls Done after writing a reply whose data comes as slices (Slices);
// for other results it calls Done before the write.
type dropAfterReply struct {
	data []byte
	node *Node
	off  int64
}

var _ fuse.ReadResult = (*dropAfterReply)(nil)

func (r *dropAfterReply) Bytes([]byte) ([]byte, fuse.Status) { return r.data, fuse.OK }
func (r *dropAfterReply) Size() int                          { return len(r.data) }

// Slices makes go-fuse write the reply with writev and call Done after it.
func (r *dropAfterReply) Slices() ([][]byte, fuse.Status) { return [][]byte{r.data}, fuse.OK }

// Done runs after the reply was written. The invalidation may wait for the
// reader to unlock the pages: not on go-fuse's goroutine.
func (r *dropAfterReply) Done() { go func() { _ = r.node.notifyContent(r.off, 0) }() }

// Write buffers data at off (at the client's end of file for O_APPEND).
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	cctx, cancel := h.node.fsys.callCtx(ctx)
	defer cancel()
	kill := h.node.killsPrivileges(ctx)
	k, err := h.f.WriteAtContext(cctx, data, off)
	if err != nil {
		return uint32(k), h.node.fsys.fail("write", err)
	}
	if kill {
		h.node.privilegesDropped(cctx)
	}
	return uint32(k), 0
}

// killsPrivileges reports whether a write by ctx's caller clears the file's
// setuid or setgid bit (the client does it at the write, committing as the
// caller). go-fuse does not hand the write's FUSE_WRITE_KILL_SUIDGID flag
// to the file system; the caller's identity says the same (root stands for
// CAP_FSETID, as on the meta server).
func (n *Node) killsPrivileges(ctx context.Context) bool {
	caller, ok := fuse.FromContext(ctx)
	if !ok || caller.Uid == 0 {
		return false
	}
	n.mu.Lock()
	mode := n.mu.attr.Mode
	n.mu.Unlock()
	return mode&core.ModeSetuid != 0 || mode&core.ModeSetgid != 0 && mode&0o010 != 0
}

// privilegesDropped takes the file's new mode after a write cleared setuid
// or setgid, and drops the kernel's cached attributes so that stat and
// fstat show it at once. The invalidation (offset -1: attributes only)
// takes no lock the kernel holds during WRITE (package doc).
func (n *Node) privilegesDropped(ctx context.Context) {
	a, err := n.fsys.c.GetAttr(ctx, n.ref())
	if err != nil {
		return
	}
	a, _ = n.fsys.c.OpenAttr(a)
	n.setAttr(a)
	_ = n.notifyContent(-1, 0)
}

// Flush is close(2) of one descriptor: writes become visible to other
// mounts.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	if !h.write {
		return 0
	}
	cctx, cancel := h.node.fsys.callCtx(ctx)
	defer cancel()
	h.repoint()
	return h.node.fsys.fail("flush", h.f.FlushContext(cctx))
}

// Fsync makes the file durable (fdatasync does the same).
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	cctx, cancel := h.node.fsys.callCtx(ctx)
	defer cancel()
	h.repoint()
	return h.node.fsys.fail("fsync", h.f.SyncContext(cctx))
}

// Release is the last close of the handle. The kernel no longer waits for
// it, so an error can only be logged.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	n := h.node
	var a core.Attr
	if h.write && !h.direct {
		// What this mount wrote went through the page cache: it holds
		// the file as committed with the client's size and mtime.
		a, _ = n.fsys.c.OpenAttr(core.Attr{Ino: n.ino()})
	}
	h.repoint()
	cctx, cancel := n.fsys.callCtx(ctx)
	err := h.f.CloseContext(cctx)
	cancel()
	n.mu.Lock()
	n.mu.opens--
	if h.write {
		if h.direct || err != nil {
			n.mu.cacheValid = false
		} else {
			n.mu.cacheSize, n.mu.cacheMtime, n.mu.cacheValid = a.Size, a.Mtime, true
		}
	}
	n.mu.Unlock()
	if err != nil {
		n.fsys.log.Warn("closing a file failed; its last writes may be lost", "ino", n.ino(), "err", err)
	}
	return 0
}

// Allocate is fallocate(2): mode 0 grows the file (weft files are sparse,
// so nothing is reserved), KEEP_SIZE alone does nothing, and
// PUNCH_HOLE|KEEP_SIZE writes zeros over the range inside the file. Other
// modes are not supported.
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	const (
		keepSize  = 0x01
		punchHole = 0x02
	)
	end := off + size
	if end < off || end > 1<<50 {
		return syscall.EFBIG
	}
	cctx, cancel := h.node.fsys.callCtx(ctx)
	defer cancel()
	cur, _ := h.node.fsys.c.OpenAttr(core.Attr{Ino: h.node.ino()})
	switch mode {
	case 0:
		if end > cur.Size {
			return h.node.fsys.fail("fallocate", h.f.TruncateContext(cctx, int64(end)))
		}
		return 0
	case keepSize:
		return 0
	case punchHole | keepSize:
		return h.node.fsys.fail("fallocate", h.zero(off, min(end, cur.Size)))
	}
	return syscall.EOPNOTSUPP
}

// zero writes zeros over [from, to).
func (h *handle) zero(from, to uint64) error {
	if h.direct {
		// An O_APPEND handle writes at the end whatever offset it is
		// given: refuse rather than append zeros.
		return errs.New(errs.NotSupported, "fallocate", "punching a hole through an O_APPEND or O_DIRECT descriptor")
	}
	buf := make([]byte, min(to-from, 1<<20))
	for off := from; off < to; {
		k := min(to-off, uint64(len(buf)))
		if _, err := h.f.WriteAt(buf[:k], int64(off)); err != nil {
			return err
		}
		off += k
	}
	return nil
}

// Lseek answers SEEK_DATA and SEEK_HOLE treating the whole file as data
// (holes read as zeros, but weft does not track them).
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	const (
		seekData = 3
		seekHole = 4
	)
	a, ok := h.node.fsys.c.OpenAttr(core.Attr{Ino: h.node.ino()})
	if !ok {
		return 0, syscall.EBADF
	}
	if off >= a.Size {
		return 0, syscall.ENXIO
	}
	switch whence {
	case seekData:
		return off, 0
	case seekHole:
		return a.Size, 0
	}
	return 0, syscall.EINVAL
}
