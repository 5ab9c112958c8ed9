package fusefs

import (
	"context"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/weftfs/weft/internal/errs"
)

var (
	_ fs.NodeGetxattrer    = (*Node)(nil)
	_ fs.NodeSetxattrer    = (*Node)(nil)
	_ fs.NodeListxattrer   = (*Node)(nil)
	_ fs.NodeRemovexattrer = (*Node)(nil)
)

// POSIX ACLs are not supported: their xattrs are refused outright, so that
// setfacl says "Operation not supported" instead of storing an ACL nobody
// enforces. Other system.* names are unknown to weft too.
func refusedXattr(name string) bool { return strings.HasPrefix(name, "system.") }

// capabilityXattr is what the kernel asks before every write, to drop file
// capabilities when a file changes (file_remove_privs). Its absence is
// cached for the attribute timeout, as attributes are, and forgotten when
// this mount sets or removes it; otherwise every write would cost a round
// trip to the meta server.
const capabilityXattr = "security.capability"

// Getxattr copies the value of name into dest, or says how large it is when
// dest is empty.
func (n *Node) Getxattr(ctx context.Context, name string, dest []byte) (uint32, syscall.Errno) {
	if refusedXattr(name) {
		return 0, syscall.EOPNOTSUPP
	}
	if name == capabilityXattr && n.noCapability() {
		return 0, syscall.ENODATA
	}
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	v, err := n.fsys.c.GetXattr(cctx, n.ref(), name)
	if name == capabilityXattr && errs.Is(err, errs.NoData) {
		n.mu.Lock()
		n.mu.noCapUntil = time.Now().Add(n.fsys.opts.AttrTimeout)
		n.mu.Unlock()
	}
	if err != nil {
		return 0, n.fsys.fail("getxattr", err)
	}
	if len(dest) == 0 {
		return uint32(len(v)), 0
	}
	if len(v) > len(dest) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

// Setxattr sets name (flags: XATTR_CREATE, XATTR_REPLACE).
func (n *Node) Setxattr(ctx context.Context, name string, value []byte, flags uint32) syscall.Errno {
	if refusedXattr(name) {
		return syscall.EOPNOTSUPP
	}
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	n.forgetCapability(name)
	return n.fsys.fail("setxattr", n.fsys.c.SetXattr(cctx, n.ref(), name, value, flags))
}

// Listxattr writes the NUL-terminated names into dest, or says how many
// bytes they need when dest is empty.
func (n *Node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	names, err := n.fsys.c.ListXattr(cctx, n.ref())
	if err != nil {
		return 0, n.fsys.fail("listxattr", err)
	}
	size := 0
	for _, s := range names {
		size += len(s) + 1
	}
	if len(dest) == 0 {
		return uint32(size), 0
	}
	if size > len(dest) {
		return uint32(size), syscall.ERANGE
	}
	k := 0
	for _, s := range names {
		k += copy(dest[k:], s)
		dest[k] = 0
		k++
	}
	return uint32(k), 0
}

// Removexattr removes name.
func (n *Node) Removexattr(ctx context.Context, name string) syscall.Errno {
	if refusedXattr(name) {
		return syscall.EOPNOTSUPP
	}
	cctx, cancel := n.fsys.callCtx(ctx)
	defer cancel()
	n.forgetCapability(name)
	return n.fsys.fail("removexattr", n.fsys.c.RemoveXattr(cctx, n.ref(), name))
}

func (n *Node) noCapability() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return time.Now().Before(n.mu.noCapUntil)
}

func (n *Node) forgetCapability(name string) {
	if name == capabilityXattr {
		n.mu.Lock()
		n.mu.noCapUntil = time.Time{}
		n.mu.Unlock()
	}
}
