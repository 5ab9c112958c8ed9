package fusefs

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
)

var (
	_ fs.NodeLookuper  = (*Node)(nil)
	_ fs.NodeMkdirer   = (*Node)(nil)
	_ fs.NodeMknoder   = (*Node)(nil)
	_ fs.NodeSymlinker = (*Node)(nil)
	_ fs.NodeLinker    = (*Node)(nil)
	_ fs.NodeUnlinker  = (*Node)(nil)
	_ fs.NodeRmdirer   = (*Node)(nil)
	_ fs.NodeRenamer   = (*Node)(nil)
)

// Lookup finds name in the directory n.
func (n *Node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if name == PatchgroupControl && n == n.fsys.index.root {
		return n.lookupControl(ctx, out), 0
	}
	n.fsys.calls.lookups.Add(1)
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	l := n.entryLease(cctx, name)
	if l.Denied() && n.fsys.retries.pending(ctx) {
		l = n.retryLease(cctx, name)
	}
	// A recall of n from here on waits for the retried open this lookup
	// may be part of (retry.go). Not during the lease's acquire: that may
	// wait at the server for the change the recall is for.
	defer n.fsys.retries.looking(ctx, n.ino())()
	a, err := n.fsys.c.LookupAt(cctx, n.ino(), name)
	if h := n.fsys.hooks.lookupAnswered.Load(); h != nil {
		(*h)()
	}
	if err != nil {
		n.fsys.lastLookups.other(ctx)
		n.fsys.retries.notFound(ctx)
		return nil, n.fsys.fail("lookup", err)
	}
	if !inlineAttrs(a) {
		n.fsys.lastLookups.other(ctx)
	} else if moved, again := n.fsys.lastLookups.found(ctx, a.Ino, n.ino(), name); again || moved && !n.fsys.retries.pending(ctx) {
		// twonames.go. The kernel's retry may GETATTR and OPEN the
		// node its walk finds: a retry like one of a GETATTR's.
		if moved {
			ch := n.GetChild(name)
			n.fsys.lastLookups.answeredStale(ctx, ch != nil && ch.StableAttr().Ino != uint64(a.Ino))
		}
		n.fsys.retries.estale(ctx, "getattr")
		return nil, syscall.ESTALE
	}
	var al client.Lease
	if l.Remaining() > 0 && !inlineAttrs(a) {
		a, al = n.ownAttrs(cctx, a)
	}
	child := n.newChild(ctx, name, a)
	if cn, ok := child.Operations().(*Node); ok {
		cn.lookedUp()
		n.fsys.retries.lookedUp(ctx, n.ino(), name, cn)
	}
	n.fillEntryLeased(out, child, a, l, al)
	return child, 0
}

// retryLeaseWait bounds how long the lookup of a kernel's retry after
// ESTALE waits for this mount's recalls to be released before it asks
// for its lease again.
const retryLeaseWait = 50 * time.Millisecond

// retryLeaseAgain is how long such a lookup waits before it asks again
// when the server still refused the lease after the releases were sent.
const retryLeaseAgain = 2 * time.Millisecond

// retryLease asks again for the lease of a lookup in the kernel's retry
// after ESTALE that the server refused because this mount owed a release
// while a change of the directory was in progress. Without a lease, no
// recall holds the change until the retried OPEN (retry.go), and a change
// that removed the file the lookup found left the OPEN nothing to open: a
// second ESTALE reached open(2) (cause 10 of the twelfth session,
// TestOpenRetryWhoseLookupWasRefusedItsLease). Once this mount's recalls
// are released, the server has the acquire wait for the change, and the
// lookup finds its result. Not when a recall of this very directory is
// among them: its names' invalidation waits for the kernel's lock the
// lookup holds, and the recall holds the change for the retried OPEN once
// the lookup is done (retry.go) anyway; a first version waited its bound
// there, and 15-25 recalls a minute took 50 ms more in make linz. The
// wait is bounded for the same reason, in case another recall waits for
// this lookup; then the lookup goes on without a lease, as before.
func (n *Node) retryLease(ctx context.Context, name string) client.Lease {
	if h := n.fsys.hooks.retryLeaseWait.Load(); h != nil {
		(*h)()
	}
	deadline := time.Now().Add(retryLeaseWait)
	key := n.fsys.c.EntryLease(n.ino(), name)
	for {
		if !n.fsys.c.WaitRecalls(ctx, time.Until(deadline), key) {
			return client.Lease{}
		}
		l := n.entryLease(ctx, name)
		if !l.Denied() || !time.Now().Before(deadline) {
			return l
		}
		// The release is one-way: the server may take this acquire
		// before it (TestOpenRetryWhoseLookupWasRefusedItsLease failed 3
		// runs in 20 that way). Ask again shortly.
		t := time.NewTimer(retryLeaseAgain)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return l
		}
	}
}

// ownAttrs reads again, under their lease, the attributes a lookup found
// in the inode's own record (a directory's, a hard-linked file's): the
// lease of the entry does not cover them, and a kernel told to keep them 0
// seconds still keeps them for the rest of its clock tick. If either step
// fails, a stays as it was and unleased.
func (n *Node) ownAttrs(ctx context.Context, a core.Attr) (core.Attr, client.Lease) {
	c := n.fsys.c
	al := c.ReadLease(ctx, c.InodeLease(a.Ino))
	if al.Remaining() == 0 {
		return a, client.Lease{}
	}
	b, err := c.GetAttr(ctx, client.Ref{Ino: a.Ino})
	if err != nil || b.Ino != a.Ino {
		return a, client.Lease{}
	}
	return b, al
}

// created finishes a call that made a new node named name, under lease l
// (taken before the call).
func (n *Node) created(ctx context.Context, op, name string, a core.Attr, err error, out *fuse.EntryOut, l client.Lease) (*fs.Inode, syscall.Errno) {
	if err != nil {
		return nil, n.fsys.fail(op, err)
	}
	child := n.newChild(ctx, name, a)
	n.fillEntryLeased(out, child, a, l, client.Lease{})
	return child, 0
}

// Mkdir creates a directory.
func (n *Node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	l := n.entryLease(cctx, name)
	defer n.fsys.change(n.ino())()
	a, err := n.fsys.c.MkdirAt(cctx, n.ino(), name, mode)
	return n.created(ctx, "mkdir", name, a, err, out, l)
}

// Mknod creates a fifo, socket, device node or empty regular file.
func (n *Node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	l := n.entryLease(cctx, name)
	defer n.fsys.change(n.ino())()
	a, err := n.fsys.c.MknodAt(cctx, n.ino(), name, mode, rdev)
	return n.created(ctx, "mknod", name, a, err, out, l)
}

// Symlink creates name pointing at target.
func (n *Node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	l := n.entryLease(cctx, name)
	defer n.fsys.change(n.ino())()
	a, err := n.fsys.c.SymlinkAt(cctx, n.ino(), name, target)
	return n.created(ctx, "symlink", name, a, err, out, l)
}

// Link makes name in n another link to target.
func (n *Node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	tn, ok := target.(*Node)
	if !ok {
		return nil, syscall.EXDEV
	}
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	defer n.fsys.change(n.ino(), tn.ino())()
	a, err := n.fsys.c.LinkAt(cctx, tn.ref(), n.ino(), name)
	if err != nil {
		return nil, n.fsys.fail("link", err)
	}
	tn.setAttr(a)
	// The file now has a standalone record: an open handle finds it by
	// inode from here on, whichever name goes.
	n.fsys.c.RepointOpen(client.Ref{Ino: a.Ino})
	n.fillEntry(out, tn.EmbeddedInode(), a)
	return tn.EmbeddedInode(), 0
}

// Unlink removes name. A file still open on this mount stays usable (see
// the package doc).
func (n *Node) Unlink(ctx context.Context, name string) syscall.Errno {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	defer n.fsys.change(n.ino())()
	if err := n.fsys.c.UnlinkAt(cctx, n.ino(), name); err != nil {
		return n.fsys.fail("unlink", err)
	}
	return 0
}

// Rmdir removes the empty directory name.
func (n *Node) Rmdir(ctx context.Context, name string) syscall.Errno {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	defer n.fsys.change(n.ino())()
	return n.fsys.fail("rmdir", n.fsys.c.RmdirAt(cctx, n.ino(), name))
}

// Rename moves name to newName in newParent (flags: RENAME_NOREPLACE,
// RENAME_EXCHANGE). go-fuse moves the tree after it succeeds.
func (n *Node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*Node)
	if !ok {
		return syscall.EXDEV
	}
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	defer n.fsys.change(n.ino(), np.ino())()
	if ch := n.GetChild(name); ch != nil {
		if cn, ok := ch.Operations().(*Node); ok {
			defer n.fsys.index.moveInto(np.ino(), cn)()
		}
	}
	err := n.fsys.c.RenameAt(cctx, n.ino(), name, np.ino(), newName, flags)
	if h := n.fsys.hooks.renamed.Load(); h != nil && err == nil {
		(*h)()
	}
	if err == nil && n.fsys.leases {
		go n.dropRenamedNames(name, np, newName, flags)
	}
	return n.fsys.fail("rename", err)
}

// dropRenamedNames makes the kernel forget the names a rename of this
// mount changed, once it is done with them. The kernel moves the source's
// dentry to the new name with the source's entry timeout: the lease this
// mount held on the old directory. A lease on the new directory may not
// cover it (refused while the mount owed a release, or shorter): a change
// there by another mount then recalled nothing here, and a stat or open of
// the new name was served by the dentry after the name had moved on
// (TestStatAfterOwnRenameWithoutLeaseOnTarget). The invalidation waits for
// the kernel's lock on the directory, which the rename holds until it has
// moved the dentry; the next lookup of the name asks the server.
func (n *Node) dropRenamedNames(name string, np *Node, newName string, flags uint32) {
	_ = np.NotifyEntry(newName)
	if flags&client.RenameExchange != 0 {
		_ = n.NotifyEntry(name)
	}
	if h := n.fsys.hooks.renamedNames.Load(); h != nil {
		(*h)()
	}
}
