package fusefs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// Node is one file, directory, symlink or special file of the mount.
type Node struct {
	fs.Inode
	fsys *fileSystem

	mu struct {
		sync.Mutex
		attr  core.Attr // the latest attributes the server reported
		opens int       // open file handles of this mount
		// The size and mtime the kernel's page cache holds content for;
		// a later open keeps the cache only if the file still has them.
		cacheSize  uint64
		cacheMtime time.Time
		cacheValid bool
		noCapUntil time.Time // security.capability known absent until then
		// getattrs counts the Getattr calls in flight; getattrsDone is
		// closed when it drops to 0 (lease.go: invalidateAttrs).
		getattrs     int
		getattrsDone chan struct{}
		// Deferred name invalidations that concern n (lease.go:
		// staleNames): pending now, made, and answered with ESTALE.
		staleNames   int
		staleMarks   uint64
		staleChecked uint64
		// invals counts the invalidations of n sent to the kernel
		// (notifyContent); sizeKnownAt is invals when a store last set
		// the kernel's size (growth.go). Between them, the kernel may
		// have dropped a reply that the mount took for told.
		invals      uint64
		sizeKnownAt uint64
	}
}

var (
	_ fs.InodeEmbedder  = (*Node)(nil)
	_ fs.NodeGetattrer  = (*Node)(nil)
	_ fs.NodeSetattrer  = (*Node)(nil)
	_ fs.NodeAccesser   = (*Node)(nil)
	_ fs.NodeStatfser   = (*Node)(nil)
	_ fs.NodeReadlinker = (*Node)(nil)
)

func (n *Node) ino() core.Ino { return core.Ino(n.StableAttr().Ino) }

// ref names the node for the meta server by its current place in the tree.
// A node with no known parent (unlinked, or reached without a path) is named
// by inode alone, which finds directories and hard-linked files; a file
// open here by where the client addresses it: go-fuse drops a node's name
// when a rename of this mount replaces it, and the file may live on under
// a name another mount gave it (by inode alone a one-link file is not
// found, and its GETATTR was answered with the open state's size, from
// before another mount's write: TestRereadOfOpenFileWhoseNameThisMountReused).
func (n *Node) ref() client.Ref {
	ino := n.ino()
	if ino == core.RootIno {
		return client.Ref{Ino: ino}
	}
	name, parent := n.Parent()
	if parent == nil {
		if r, ok := n.fsys.c.OpenPlace(ino); ok && !n.IsDir() {
			return r
		}
		return client.Ref{Ino: ino}
	}
	return client.Ref{Ino: ino, Parent: core.Ino(parent.StableAttr().Ino), Name: name}
}

// newChild returns the node for a child with attributes a, reusing the one
// go-fuse already knows under name, or under another name: go-fuse keeps
// one node per inode and would drop a new one for it once the handler
// returns, with what the handler noted on it (the attributes, the walk of
// a retry: TestLookupOfFileKnownByAnotherName).
func (n *Node) newChild(ctx context.Context, name string, a core.Attr) *fs.Inode {
	if ch := n.GetChild(name); ch != nil && ch.StableAttr().Ino == uint64(a.Ino) {
		if cn, ok := ch.Operations().(*Node); ok {
			cn.setAttr(a)
		}
		return ch
	}
	if cn := n.fsys.index.live(a.Ino, a.Mode&core.ModeType); cn != nil {
		cn.setAttr(a)
		return cn.EmbeddedInode()
	}
	child := &Node{fsys: n.fsys}
	child.mu.attr = a
	in := n.NewInode(ctx, child, fs.StableAttr{Mode: a.Mode & core.ModeType, Ino: uint64(a.Ino), Gen: 1})
	n.fsys.index.add(child)
	return in
}

func (n *Node) setAttr(a core.Attr) {
	n.mu.Lock()
	n.mu.attr = a
	n.mu.Unlock()
}

// fillAttr converts weft attributes to the kernel's.
func fillAttr(out *fuse.Attr, a core.Attr) {
	out.Ino = uint64(a.Ino)
	out.Size = a.Size
	out.Blocks = a.Blocks()
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid = a.UID
	out.Gid = a.GID
	out.Rdev = a.Rdev
	out.Blksize = 1 << 16
	setTime(&out.Atime, &out.Atimensec, a.Atime)
	setTime(&out.Mtime, &out.Mtimensec, a.Mtime)
	setTime(&out.Ctime, &out.Ctimensec, a.Ctime)
}

func setTime(sec *uint64, nsec *uint32, t time.Time) {
	ns := t.UnixNano()
	s, r := ns/1e9, ns%1e9
	if r < 0 {
		s, r = s-1, r+1e9
	}
	*sec, *nsec = uint64(s), uint32(r)
}

// attrTimeout is how long the kernel may trust n's attributes. Writes need
// no exception: the kernel keeps the size itself and forgets its cached
// size and times after every write, so the next stat asks.
func (n *Node) attrTimeout() time.Duration {
	return n.fsys.opts.AttrTimeout
}

// fillEntry fills a lookup-style reply for child with attributes a.
func (n *Node) fillEntry(out *fuse.EntryOut, child *fs.Inode, a core.Attr) {
	n.fillEntryLeased(out, child, a, client.Lease{}, client.Lease{})
}

// fillEntryLeased is fillEntry for a reply read under lease l, the entry's,
// which covers the attributes too when they live in the entry; al covers
// them when they live in the inode's own record.
func (n *Node) fillEntryLeased(out *fuse.EntryOut, child *fs.Inode, a core.Attr, l, al client.Lease) {
	fillAttr(&out.Attr, a)
	out.SetEntryTimeout(n.fsys.cacheFor(l, n.fsys.opts.EntryTimeout))
	attr := n.fsys.opts.AttrTimeout
	if cn, ok := child.Operations().(*Node); ok {
		attr = cn.attrTimeout()
	}
	if inlineAttrs(a) {
		al = l
	}
	// Under leases, attributes no lease covers are not kept: the kernel
	// asks again (Getattr takes their lease).
	out.SetAttrTimeout(n.fsys.cacheFor(al, attr))
}

// Getattr asks the server. A file whose last name is gone while this mount
// still has it open answers from what this mount knows (see the package
// doc). fh is go-fuse's pick of an open handle when the kernel names none:
// a stat by path and an fstat both name none, so a file open here gets the
// same answer to both.
func (n *Node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	defer n.startGetattr()()
	if !n.IsDir() {
		n.fsys.calls.fileGetattrs.Add(1)
	}
	var (
		walk  retryWalk
		retry bool
	)
	if fh == nil {
		walk, retry = n.fsys.retries.retry(ctx, n, "getattr")
		if !retry && n.maybeStaleName() {
			n.fsys.retries.estale(ctx, "getattr")
			return syscall.ESTALE
		}
	}
	told, invals := n.told()
	a, l, err := n.getattr(ctx, fh == nil, walk, retry)
	if err != nil {
		errno := n.fsys.fail("getattr", err)
		switch {
		case errno == syscall.ESTALE && fh == nil:
			n.fsys.retries.estale(ctx, "getattr")
		case retry:
			n.fsys.retries.forget(ctx)
		}
		return errno
	}
	if h := n.fsys.hooks.getattr.Load(); h != nil && fh != nil {
		(*h)()
	}
	if h, ok := fh.(*handle); ok && n.fsys.leases && int64(a.Size) > told {
		n.fsys.storeGrowth(ctx, h, told, invals, a)
	}
	fillAttr(&out.Attr, a)
	out.SetTimeout(n.fsys.cacheFor(l, n.attrTimeout()))
	return 0
}

// getattr asks the server for n's attributes under the read lease that
// covers them where the server found them (client.GetAttrLeased: a file
// open here that another mount renamed is found by its new name, not the
// one go-fuse's tree still has).
//
// A file open here whose last name is gone answers with what this mount
// knows, through a descriptor. A request by path (byPath) that reached it
// by a name another mount removed or replaced gets ESTALE instead: the
// kernel walked a name that was valid when it looked it up, a recall then
// made it forget the attributes, and the open state's size may predate
// another mount's write (linz: stat -> the old size of a file another
// mount had written and closed). The kernel looks the name up again; its
// retry (retry.go) gets what that lookup said.
func (n *Node) getattr(ctx context.Context, byPath bool, walk retryWalk, retry bool) (core.Attr, client.Lease, error) {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	n.mu.Lock()
	known := n.mu.attr
	n.mu.Unlock()
	ref := n.ref()
	if retry && walk.name != "" {
		// The name the retry's lookup found it under: go-fuse's tree
		// may have lost it since (a recall's invalidation).
		ref.Parent, ref.Name = walk.parent, walk.name
	}
	a, l, err := n.fsys.c.GetAttrLeased(cctx, ref, known)
	if err == nil {
		n.setAttr(a)
		return a, l, nil
	}
	k := errs.KindOf(err)
	if k != errs.NotExist && k != errs.Stale {
		return a, l, err
	}
	n.mu.Lock()
	open, last := n.mu.opens > 0, n.mu.attr
	n.mu.Unlock()
	if byPath && ref.Parent != 0 {
		switch {
		case !open && k == errs.NotExist:
			return a, l, err // the name is gone now: ENOENT
		case retry && last.Ino != 0:
			// The kernel looked the name up again within this call:
			// what that lookup said is the answer.
			return last, client.Lease{}, nil
		}
		return a, l, errs.Wrap(errs.Stale, "getattr", ref.Name, err)
	}
	if !open || last.Ino == 0 {
		return a, l, err
	}
	// The newer of what the servers last said of the file (a lookup, a
	// getattr) and the open state (its open, a refresh, this mount's
	// commits), with this mount's writes not yet committed: the open
	// state's size may predate another mount's write
	// (TestStatOfOpenFileRemovedElsewhere). No lease covers it: the
	// kernel must not keep it.
	last.Nlink = 0
	if o, ok := n.fsys.c.OpenAttr(last); ok && o.Mtime.After(last.Mtime) {
		last = o
	}
	return n.fsys.c.OwnWrites(last), client.Lease{}, nil
}

// Setattr is chmod, chown, truncate and utimensat. A truncate through an
// open handle (ftruncate) needs only that the handle is writable.
func (n *Node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	var (
		walk  retryWalk
		retry bool
	)
	if fh == nil {
		// A chmod, chown or utimes by path (the kernel names no handle
		// but for a truncate): it must change what the name holds now.
		walk, retry = n.fsys.retries.retry(ctx, n, "setattr")
		if !retry && n.maybeStaleName() {
			n.fsys.retries.estale(ctx, "setattr")
			return syscall.ESTALE
		}
		cctx = client.ByName(cctx)
	}
	// The reply is cached under the attributes' lease, taken first: the
	// server spares this client's leases for its own change, and a recall
	// for a later change by another mount ends it.
	l := n.attrLease(cctx)
	var s client.SetAttr
	if m, ok := in.GetMode(); ok {
		s.Mode = &m
	}
	if u, ok := in.GetUID(); ok {
		s.UID = &u
	}
	if g, ok := in.GetGID(); ok {
		s.GID = &g
	}
	if in.Valid&fuse.FATTR_ATIME != 0 {
		if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
			s.AtimeNow = true
		} else {
			t := time.Unix(int64(in.Atime), int64(in.Atimensec))
			s.Atime = &t
		}
	}
	if in.Valid&fuse.FATTR_MTIME != 0 {
		if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
			s.MtimeNow = true
		} else {
			t := time.Unix(int64(in.Mtime), int64(in.Mtimensec))
			s.Mtime = &t
		}
	}
	size, hasSize := in.GetSize()
	if hasSize {
		n.repoint() // a truncate of an open file goes through its open state
	}
	if h, ok := fh.(*handle); ok && hasSize {
		if err := h.f.TruncateContext(cctx, int64(size)); err != nil {
			return n.fsys.fail("ftruncate", err)
		}
		hasSize = false
	}
	if hasSize {
		s.Size = &size
	}
	var a core.Attr
	var err error
	if s == (client.SetAttr{}) {
		a, l, err = n.getattr(ctx, fh == nil, walk, retry)
	} else {
		ref := n.ref()
		a, err = n.fsys.c.SetAttr(cctx, ref, s)
		if retry && errs.Is(err, errs.Stale) {
			// The kernel's retry, and the name it looked up in
			// this call holds another file now: the call changes
			// what the name holds (retry.go).
			a, err = n.fsys.c.SetAttr(cctx, client.Ref{Parent: walk.parent, Name: walk.name}, s)
			if err == nil {
				n.changedOther(a.Ino)
				l = client.Lease{}
			}
		}
		if h, ok := fh.(*handle); ok && h.f.Ref() != ref {
			// Through a handle the client follows the file to where
			// another mount moved it: the lease taken on the name in
			// go-fuse's tree does not cover what the reply says.
			l = client.Lease{}
		}
		// The kernel truncates its page cache to the size in this reply:
		// it must be this mount's size, buffered writes included, and
		// otherwise the server's (an open state's size may predate
		// another mount's write).
		a = n.fsys.c.OwnWrites(a)
	}
	if err != nil {
		errno := n.fsys.fail("setattr", err)
		if errno == syscall.ESTALE && fh == nil {
			n.fsys.retries.estale(ctx, "setattr")
		}
		return errno
	}
	n.setAttr(a)
	fillAttr(&out.Attr, a)
	out.SetTimeout(n.fsys.cacheFor(l, n.attrTimeout()))
	return 0
}

// Access checks the caller's permission with the server (the kernel checks
// mode bits itself under default_permissions and rarely asks).
func (n *Node) Access(ctx context.Context, mask uint32) syscall.Errno {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	return n.fsys.fail("access", n.fsys.c.Access(cctx, n.ref(), mask&7))
}

// Statfs reports the cluster's capacity in 4 KiB blocks.
func (n *Node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	s, err := n.fsys.c.StatFS(cctx)
	if err != nil {
		return n.fsys.fail("statfs", err)
	}
	const bs = 4096
	out.Bsize, out.Frsize = bs, bs
	out.Blocks = s.Capacity / bs
	free := uint64(0)
	if s.Capacity > s.Used {
		free = (s.Capacity - s.Used) / bs
	}
	out.Bfree, out.Bavail = free, free
	out.Files = s.Files + s.FilesFree
	out.Ffree = s.FilesFree
	out.NameLen = s.NameMax
	return 0
}

// Readlink returns a symlink's target.
func (n *Node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	t, err := n.fsys.c.Readlink(cctx, n.ref())
	if err != nil {
		return nil, n.fsys.fail("readlink", err)
	}
	return []byte(t), 0
}

// changedOther makes the kernel forget the attributes of ino, which a
// setattr of n changed instead (the name n was reached by holds ino now),
// and n's own, which the reply would otherwise overwrite with ino's: the
// invalidation, made while the kernel waits for the reply, makes it drop
// the reply's attributes. Attributes only: no lock the kernel holds.
func (n *Node) changedOther(ino core.Ino) {
	for _, o := range n.fsys.index.get(ino) {
		_ = o.notifyContent(-1, 0)
	}
	_ = n.notifyContent(-1, 0)
}
