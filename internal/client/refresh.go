package client

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/core"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Files open on several clients. An open file's size, times and inline
// content are what the server said at open, plus this client's own writes
// (close-to-open). A layer that learns that another client is about to
// change the file (a lease recall) calls MarkStale; the next read then asks
// the server again under a read lease on the file's attributes, which the
// server grants only once that change is in, so a file that stays open on
// two mounts reads what the other wrote and closed. A file with writes of
// its own not yet committed keeps its view: those writes win until they
// land.

// MarkStale tells the client that ino, if open here, may be changed by
// another client: its next read takes the server's view again.
func (c *Client) MarkStale(ino core.Ino) {
	n := c.lookupOpen(ino)
	if n == nil {
		return
	}
	n.mu.Lock()
	n.mu.stale = true
	n.mu.Unlock()
	c.releaseOpen(n)
}

// openLease is the lease an open of ref takes before the server is asked:
// the entry's, which covers a one-link file's attributes. A change that
// lands after the server answered recalls it, maybe before the open state
// exists for MarkStale to find: staleUnless then sees it recalled.
func (c *Client) openLease(ctx context.Context, ref Ref) Lease {
	if ref.Parent == 0 || ref.Name == "" || !c.LeasesOn() {
		return Lease{}
	}
	return c.ReadLease(ctx, c.EntryLease(ref.Parent, ref.Name))
}

// GetAttrLeased is GetAttr under the read lease that covers the attributes
// where the server read them, taken first; known is what the caller last
// knew of them (a one-link file's live in its entry, anything else's in
// its own record). An open file that another client moved is read under
// its new name (callRef finds it), so the lease taken on the old name's
// directory covers nothing: that directory's recalls no longer concern the
// file, and the next change under the new name would recall a key this
// client does not hold. Then the lease is taken again on the new key and
// the attributes read again, as refreshIfStale does for the open state.
func (c *Client) GetAttrLeased(ctx context.Context, ref Ref, known core.Attr) (core.Attr, Lease, error) {
	for try := 0; ; try++ {
		key := c.AttrLease(ref, known)
		l := c.ReadLease(ctx, key)
		a, at, err := c.getAttrAt(ctx, ref)
		if err != nil || c.AttrLease(at, a) == key {
			return a, l, err
		}
		if try == maxRelocations {
			return a, Lease{}, nil // it keeps moving: cache nothing
		}
		ref, known = at, a
	}
}

// staleUnless marks the open state stale after an open that read a, unless
// lease l (openLease) still covers what it read: with leases on, a change
// by another client may have landed since, and its recall may have come
// before this state existed. The next read then asks the server again
// (refreshIfStale). With leases off, opens keep close-to-open as before.
func (n *openInode) staleUnless(l Lease, a *pb.Attr) {
	if !n.c.LeasesOn() {
		return
	}
	covered := l.Remaining() > 0 && !core.IsDir(a.GetMode()) && a.GetNlink() <= 1
	n.mu.Lock()
	defer n.mu.Unlock()
	if covered {
		n.mu.lease, n.mu.leased = l, true
	}
	if !covered && !n.mu.modified && n.mu.buffered == 0 {
		n.mu.stale = true
	}
}

// staleLocked reports whether what the client holds of the file may
// predate another client's change: marked so (a recall; a refresh the
// server refused a lease), or read under a lease that is no longer
// trusted. A lease whose term ran out without a recall (this client held
// it through a stall, say) saw no change, but from then on one lands
// without a recall: a reread returned the content the open read 2 s
// earlier, after another mount's write and close (make linz, twelfth
// session run 18; TestReadAfterLeaseRanOut). This client's own writes
// not yet committed win, as in refreshIfStale, and a file with no name
// left has nothing to refresh from.
func (n *openInode) staleLocked() bool {
	if n.mu.stale {
		return true
	}
	return n.mu.leased && !n.mu.freed && !n.mu.modified && n.mu.buffered == 0 && n.mu.lease.Remaining() == 0
}

// Stale reports whether the file's next read asks the server again: what
// this client holds of it may predate another client's change. A cache
// above (the kernel's pages) should not be kept across such an open.
func (f *File) Stale() bool {
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	return f.n.staleLocked()
}

// refreshIfStale takes the server's view of a file marked stale that has
// no writes of this client pending. If the server cannot be asked, the
// read goes on with what the client has (as before the mark), and the next
// read asks again.
func (n *openInode) refreshIfStale(ctx context.Context) {
	n.mu.Lock()
	if !n.staleLocked() {
		n.mu.Unlock()
		return
	}
	ref, creds, mode := n.mu.ref, n.mu.creds, n.mu.mode
	if n.mu.modified || n.mu.buffered != 0 {
		n.mu.stale = false
		n.mu.Unlock()
		return
	}
	n.mu.Unlock()
	c := n.c
	var (
		l Lease
		r pb.OpenReply
	)
	for try := 0; ; try++ {
		// The lease is what makes the read wait for the change it was
		// warned of: the server grants none while a change of its key
		// runs.
		l = c.ReadLease(ctx, c.AttrLease(ref, core.Attr{Mode: mode, Nlink: 1}))
		req := &pb.OpenRequest{Creds: credsPB(creds), Node: ref.pb(), Flags: uint32(oRDONLY)}
		if err := c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodOpen, req, &r, true); err != nil {
			c.log.Debug("refresh of an open file failed; reading what the client has", "ino", n.ino, "err", err)
			return
		}
		at := Ref{Ino: ref.Ino, Parent: core.Ino(req.Node.Parent), Name: req.Node.Name}
		if req.Node.Parent == 0 || at == ref {
			break
		}
		if try == maxRelocations {
			l = Lease{} // it keeps moving: ask again at the next read
			break
		}
		// Another client moved the file (callRef found it again): the
		// lease taken covers the old name's directory, not the new
		// one, whose changes this client would not hear of. Again,
		// under the right lease.
		ref = at
		r.Reset()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.modified || n.mu.buffered != 0 {
		n.mu.stale = false
		return // a write of this client came in meanwhile: it wins
	}
	// Without a lease the view may predate the change: ask again next
	// time. A recall after the lease was taken marks the file again.
	n.mu.stale = l.Remaining() == 0
	n.mu.lease, n.mu.leased = l, !n.mu.stale
	c.log.Debug("open file refreshed", "ino", n.ino, "parent", ref.Parent, "name", ref.Name, "size", r.Attr.GetSize(), "mtime", r.Attr.GetMtimeNs(), "stale", n.mu.stale)
	n.mu.size = r.Attr.GetSize()
	n.mu.mtime = time.Unix(0, r.Attr.GetMtimeNs())
	n.mu.inline = r.Attr.GetInline()
	n.mu.data = append([]byte(nil), r.InlineData...)
	n.takeExtentsLocked(r.Attr)
	n.takeVersionLocked(r.Attr)
	n.dropCacheLocked()
}

// SetReadStepHook makes every read call fn after each step that took
// bytes from one view of the file (ReadAtLeased), before it may refresh
// that view and read on; nil removes it. For tests (fusefs): a change
// landing between two steps of one read.
func (c *Client) SetReadStepHook(fn func()) {
	if fn == nil {
		c.hooks.readStep.Store(nil)
		return
	}
	c.hooks.readStep.Store(&fn)
}
