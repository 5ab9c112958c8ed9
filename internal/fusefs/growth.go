package fusefs

import (
	"context"
	"errors"
	"io"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weftfs/weft/internal/core"
)

// A file open here that another mount grew. The kernel reads no further
// than the size it holds; a read past it asks for the attributes first
// (GETATTR), and drops the reply if an invalidation of the node came after
// the request was made (the node's attribute version is newer). A recall
// of the file's directory for a change to another name there makes such
// an invalidation, and the mount cannot see a GETATTR the kernel has
// queued but not yet sent: the read then ended at the old size (linz,
// cause 3). So a GETATTR through a handle whose reply grows the file also
// stores the new tail in the kernel's page cache (FUSE_NOTIFY_STORE), right
// before the reply: the kernel extends its size to the end of what it
// stored, whatever happens to the reply. The content is what the client
// reads through the handle, under the lease the read takes, so it is no
// older than what a READ would have returned.
//
// What the kernel holds is not always what the mount last reported: any
// reply with attributes (a LOOKUP's, a GETATTR's) that an invalidation
// overtook was dropped, and the mount cannot tell which. So after an
// invalidation of the node, told is unknown until a store sets the
// kernel's size, and a GETATTR through a handle stores the file from its
// start. It took told from the last reply: a LOOKUP's and a stat's replies
// said the new size and were both dropped, the reread's own GETATTR saw no
// growth past that size and stored nothing, and was dropped too (make linz
// run 9 of the twelfth session: reread -> "" 0.06 ms after another mount's
// write "A237" and close returned; TestRereadAfterOvertakenLookup). Content
// read without a lease is stored too, for the size, and its pages dropped
// at once: no recall would drop them.

// maxGrowthStore bounds the tail stored: a larger growth is left to the
// kernel's READs (its GETATTR may still be dropped).
const maxGrowthStore = 1 << 20

// pageStore is content for the kernel's page cache of one file.
type pageStore struct {
	off  int64
	data []byte
	node *Node
	// invals is the node's count of invalidations when its Getattr
	// started: the kernel's size is known once the store is made, unless
	// another invalidation came since.
	invals uint64
	// unleased: the content came from a view no lease covered; its pages
	// go right after the store.
	unleased bool
}

// notifyContent is NotifyContent, counted: an invalidation makes the
// kernel drop the attributes of replies it has not yet taken.
func (n *Node) notifyContent(off, length int64) syscall.Errno {
	n.mu.Lock()
	n.mu.invals++
	n.mu.Unlock()
	return n.NotifyContent(off, length)
}

// told returns the size the kernel holds for n as far as the mount knows
// (0 if an invalidation may have dropped what it last reported), and the
// count of invalidations it stands for.
func (n *Node) told() (int64, uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.invals != n.mu.sizeKnownAt {
		return 0, n.mu.invals
	}
	return int64(n.mu.attr.Size), n.mu.invals
}

// stored notes that a store made at invalidation count invals set the
// kernel's size.
func (n *Node) stored(invals uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.invals == invals {
		n.mu.sizeKnownAt = invals
	}
}

// storeGrowth reads what file h grew by past told, the size this mount
// last reported to the kernel, and keeps it for the GETATTR's reply
// (growthAfterGetattr), which runs once the node file system is done.
func (fsys *fileSystem) storeGrowth(ctx context.Context, h *handle, told int64, invals uint64, a core.Attr) {
	size := int64(a.Size)
	if size-told > maxGrowthStore || h.direct || h.write {
		// A handle that writes here grows the kernel's size with its
		// own writes.
		return
	}
	cctx, cancel := fsys.callCtx(ctx)
	defer cancel()
	buf := make([]byte, size-told)
	k, unleased, err := h.f.ReadAtLeased(cctx, buf, told)
	if err != nil && !errors.Is(err, io.EOF) || k == 0 {
		return
	}
	fsys.growth.Lock()
	defer fsys.growth.Unlock()
	if fsys.growth.m == nil {
		fsys.growth.m = make(map[core.Ino]pageStore)
	}
	fsys.growth.m[a.Ino] = pageStore{off: told, data: buf[:k], node: h.node, invals: invals, unleased: unleased}
}

// takeGrowth returns the content stored for ino's GETATTR, if any.
func (fsys *fileSystem) takeGrowth(ino core.Ino) (pageStore, bool) {
	fsys.growth.Lock()
	defer fsys.growth.Unlock()
	s, ok := fsys.growth.m[ino]
	delete(fsys.growth.m, ino)
	return s, ok
}

// GetAttr hands the kernel the tail storeGrowth read before the reply.
// This is inside the request, which holds no page of the file locked: the
// kernel's GETATTR of a read comes before it looks at the page cache.
func (l *lockReleasingFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	st := l.RawFileSystem.GetAttr(cancel, in, out)
	if st != fuse.OK || l.fsys == nil {
		return st
	}
	if s, ok := l.fsys.takeGrowth(core.Ino(out.Ino)); ok {
		if srv := l.server.Load(); srv != nil && srv.InodeNotifyStoreCache(in.NodeId, s.off, s.data) == fuse.OK {
			s.node.stored(s.invals)
			if s.unleased {
				// No page is locked for this request (see above).
				go func() { _ = s.node.notifyContent(s.off, 0) }()
			}
		}
	}
	return st
}
