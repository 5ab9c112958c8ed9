package fusefs

import (
	"context"
	"syscall"

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
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	a, err := n.fsys.c.LookupAt(cctx, n.ino(), name)
	if err != nil {
		return nil, n.fsys.fail("lookup", err)
	}
	child := n.newChild(ctx, name, a)
	n.fillEntry(out, child, a)
	return child, 0
}

// created finishes a call that made a new node named name.
func (n *Node) created(ctx context.Context, op, name string, a core.Attr, err error, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if err != nil {
		return nil, n.fsys.fail(op, err)
	}
	child := n.newChild(ctx, name, a)
	n.fillEntry(out, child, a)
	return child, 0
}

// Mkdir creates a directory.
func (n *Node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	a, err := n.fsys.c.MkdirAt(cctx, n.ino(), name, mode)
	return n.created(ctx, "mkdir", name, a, err, out)
}

// Mknod creates a fifo, socket, device node or empty regular file.
func (n *Node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	a, err := n.fsys.c.MknodAt(cctx, n.ino(), name, mode, rdev)
	return n.created(ctx, "mknod", name, a, err, out)
}

// Symlink creates name pointing at target.
func (n *Node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	a, err := n.fsys.c.SymlinkAt(cctx, n.ino(), name, target)
	return n.created(ctx, "symlink", name, a, err, out)
}

// Link makes name in n another link to target.
func (n *Node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	tn, ok := target.(*Node)
	if !ok {
		return nil, syscall.EXDEV
	}
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
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
	if err := n.fsys.c.UnlinkAt(cctx, n.ino(), name); err != nil {
		return n.fsys.fail("unlink", err)
	}
	return 0
}

// Rmdir removes the empty directory name.
func (n *Node) Rmdir(ctx context.Context, name string) syscall.Errno {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
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
	return n.fsys.fail("rename", n.fsys.c.RenameAt(cctx, n.ino(), name, np.ino(), newName, flags))
}
