package fusefs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/errs"
)

// File locks. The mount asks the kernel to forward fcntl and flock locks
// (MountOptions.EnableLocks) instead of keeping them itself, so that the
// meta server arbitrates them between mounts (client/lock.go). The kernel
// sends flock as SETLK/SETLKW with FUSE_LK_FLOCK, whole-file, with the open
// file description as owner; POSIX locks carry the process's file table as
// owner.
//
// Releasing locks when a file is closed is the file system's job with
// forwarded locks: the kernel does not remember them. It says so in two
// requests the node API does not pass on, which lockReleasingFS intercepts,
// as libfuse does: FLUSH (every close(2)) carries the closing process's
// lock owner, whose POSIX locks on the file go; RELEASE (the last close of
// an open file description) says whether the description used flock, whose
// lock goes. RELEASE also drops any lock still recorded as set through that
// handle, which covers open-file-description locks (F_OFD_SETLK), whose
// close the kernel reports only this way.

var (
	_ fs.NodeGetlker  = (*Node)(nil)
	_ fs.NodeSetlker  = (*Node)(nil)
	_ fs.NodeSetlkwer = (*Node)(nil)
)

// Getlk is F_GETLK: out gets a lock that would conflict with lk, or type
// F_UNLCK.
func (n *Node) Getlk(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	want, errno := lockOf(lk)
	if errno != 0 {
		return errno
	}
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	got, err := n.fsys.c.GetLock(cctx, n.ino(), lockOwnerOf(owner, flags), want)
	if err != nil {
		return n.fsys.fail("getlk", err)
	}
	*out = fuse.FileLock{Typ: syscall.F_UNLCK}
	if got.Type != client.Unlock {
		*out = fuse.FileLock{Start: got.Start, End: got.End, Typ: syscall.F_RDLCK, Pid: got.Pid}
		if got.Type == client.WriteLock {
			out.Typ = syscall.F_WRLCK
		}
	}
	return 0
}

// Setlk is F_SETLK and flock with LOCK_NB: EAGAIN (EWOULDBLOCK) if another
// owner, on any mount, holds a conflicting lock.
func (n *Node) Setlk(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return n.setLock(ctx, f, owner, lk, flags, false)
}

// Setlkw is F_SETLKW and flock without LOCK_NB: it waits until the lock is
// granted or the caller is interrupted by a signal (EINTR; the kernel
// restarts the call if the signal's handler asked for that). Unlike the
// other requests it honours interrupts and has no time limit.
func (n *Node) Setlkw(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return n.setLock(ctx, f, owner, lk, flags, true)
}

// setLock sets or removes a lock and keeps the file's content coherent with
// the locks, as NFS does: this mount's writes to the file are committed
// before any lock change (so the next holder, on any mount, reads
// them), and a granted lock revalidates the file, dropping the page cache
// if another mount changed it.
func (n *Node) setLock(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	want, errno := lockOf(lk)
	if errno != 0 {
		return errno
	}
	op := "setlk"
	if wait {
		op = "setlkw"
	}
	h, _ := f.(*handle)
	if h != nil {
		// Whatever this mount wrote to the file, through any descriptor
		// (the client shares one state per file); cheap when nothing is
		// pending.
		h.repoint()
		if err := h.f.Flush(); err != nil {
			if want.Type != client.Unlock {
				return n.fsys.fail(op, err)
			}
			// An unlock goes ahead: a lock kept because of a failed write
			// would block every other process too.
			n.fsys.log.Warn("committing writes before an unlock failed", "ino", n.ino(), "err", err)
		}
	}
	o := lockOwnerOf(owner, flags)
	var err error
	if wait {
		// The caller's context: an interrupt cancels it.
		err = n.fsys.c.SetLockWait(ctx, n.ino(), o, want)
	} else {
		cctx, cancel := n.fsys.callCtx(ctx)
		err = n.fsys.c.SetLock(cctx, n.ino(), o, want)
		cancel()
	}
	if err != nil {
		return n.lockErrno(op, err)
	}
	if h != nil && want.Type != client.Unlock {
		n.revalidate(ctx, h)
	}
	return 0
}

// revalidate takes the server's view of a file a lock was just granted on,
// and drops the kernel's cached pages and attributes if the file changed.
// The kernel holds no lock of the file while it waits for a lock request,
// so the invalidation cannot deadlock with it.
func (n *Node) revalidate(ctx context.Context, h *handle) {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	changed, err := h.f.Revalidate(cctx)
	if err != nil {
		// The lock is held; the content may be as old as the open.
		n.fsys.log.Debug("revalidating a locked file failed", "ino", n.ino(), "err", err)
		return
	}
	if changed {
		_ = n.notifyContent(0, 0)
	}
}

func (n *Node) lockErrno(op string, err error) syscall.Errno {
	switch errs.KindOf(err) {
	case errs.Busy:
		return syscall.EAGAIN
	case errs.NoSpace:
		return syscall.ENOLCK // the server's lock table limit
	}
	return n.fsys.fail(op, err)
}

// lockOf converts the kernel's lock description.
func lockOf(lk *fuse.FileLock) (client.Lock, syscall.Errno) {
	if lk.Start > lk.End || lk.End > client.MaxLockEnd {
		return client.Lock{}, syscall.EINVAL
	}
	l := client.Lock{Start: lk.Start, End: lk.End, Pid: lk.Pid}
	switch lk.Typ {
	case syscall.F_RDLCK:
		l.Type = client.ReadLock
	case syscall.F_WRLCK:
		l.Type = client.WriteLock
	case syscall.F_UNLCK:
		l.Type = client.Unlock
	default:
		return client.Lock{}, syscall.EINVAL
	}
	return l, 0
}

func lockOwnerOf(owner uint64, flags uint32) client.LockOwner {
	return client.LockOwner{ID: owner, Flock: flags&fuse.FUSE_LK_FLOCK != 0}
}

// mountWithLocks is fs.Mount with the node file system wrapped in
// lockReleasingFS.
func mountWithLocks(dir string, root fs.InodeEmbedder, opts *fs.Options) (*fuse.Server, error) {
	raw := &lockReleasingFS{RawFileSystem: fs.NewNodeFS(root, opts)}
	raw.mu.set = make(map[lockUse]struct{})
	if n, ok := root.(*Node); ok {
		raw.fsys = n.fsys
	}
	server, err := fuse.NewServer(raw, dir, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	raw.server.Store(server)
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		return nil, err
	}
	return server, nil
}

// lockReleasingFS passes every request to the node file system and turns
// closes into unlocks (see the top of this file).
type lockReleasingFS struct {
	fuse.RawFileSystem
	// fsys and server hand the kernel the pages a GETATTR's reply
	// needs (growth.go).
	fsys   *fileSystem
	server atomic.Pointer[fuse.Server]

	mu struct {
		sync.Mutex
		// set records who set a POSIX lock through which handle, so
		// that a close that cannot matter costs no round trip.
		set map[lockUse]struct{}
	}
}

// lockUse is a lock owner that set a POSIX lock on a node through a handle.
type lockUse struct{ node, fh, owner uint64 }

// SetLk records the lock's owner before the lock is set, so that a close
// racing with it unlocks rather than leaks it.
func (l *lockReleasingFS) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	l.note(in)
	return l.RawFileSystem.SetLk(cancel, in)
}

// SetLkw: see SetLk.
func (l *lockReleasingFS) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	l.note(in)
	return l.RawFileSystem.SetLkw(cancel, in)
}

func (l *lockReleasingFS) note(in *fuse.LkIn) {
	if in.Lk.Typ == syscall.F_UNLCK || in.LkFlags&fuse.FUSE_LK_FLOCK != 0 {
		return
	}
	l.mu.Lock()
	l.mu.set[lockUse{in.NodeId, in.Fh, in.Owner}] = struct{}{}
	l.mu.Unlock()
}

// take removes and returns the recorded lock owners that match: those of
// node and owner (match by owner) or of handle fh (match by handle).
func (l *lockReleasingFS) take(node, fh, owner uint64, byOwner bool) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var owners []uint64
	for u := range l.mu.set {
		if u.node != node || byOwner && u.owner != owner || !byOwner && u.fh != fh {
			continue
		}
		delete(l.mu.set, u)
		if !containsOwner(owners, u.owner) {
			owners = append(owners, u.owner)
		}
	}
	return owners
}

func containsOwner(owners []uint64, o uint64) bool {
	for _, x := range owners {
		if x == o {
			return true
		}
	}
	return false
}

// Flush is close(2): the closing process's POSIX locks on the file go.
func (l *lockReleasingFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	st := l.RawFileSystem.Flush(cancel, in)
	for _, owner := range l.take(in.NodeId, in.Fh, in.LockOwner, true) {
		l.unlock(in.InHeader, in.Fh, owner, 0)
	}
	return st
}

// Release is the last close of an open file description: its flock lock
// and the locks set through it go.
func (l *lockReleasingFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	if in.ReleaseFlags&fuse.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		l.unlock(in.InHeader, in.Fh, in.LockOwner, fuse.FUSE_LK_FLOCK)
	}
	for _, owner := range l.take(in.NodeId, in.Fh, 0, false) {
		l.unlock(in.InHeader, in.Fh, owner, 0)
	}
	l.RawFileSystem.Release(cancel, in)
}

// unlock removes owner's locks on the whole file through the node file
// system, as an F_UNLCK from the kernel would. Unlocks are never
// interrupted (nil cancel).
func (l *lockReleasingFS) unlock(h fuse.InHeader, fh, owner uint64, flags uint32) {
	in := &fuse.LkIn{
		InHeader: h, Fh: fh, Owner: owner, LkFlags: flags,
		Lk: fuse.FileLock{Start: 0, End: client.MaxLockEnd, Typ: syscall.F_UNLCK},
	}
	l.RawFileSystem.SetLk(nil, in)
}
