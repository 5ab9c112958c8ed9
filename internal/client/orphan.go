package client

import (
	"context"
	"slices"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// This file keeps files that this client has open usable when their names
// change under it: a rename re-points the open state to the new name, and a
// file whose last link goes away stays readable and writable through its
// handles (POSIX's open-unlinked file) until the last one closes, when its
// chunks are reclaimed.

// OpenAttr returns a with the size and mtime this client's open state of
// a.Ino holds (its own writes included, committed or not), and whether the
// file is open here. The FUSE layer reports these to the kernel, whose page
// cache follows the size it is told.
func (c *Client) OpenAttr(a core.Attr) (core.Attr, bool) {
	c.mu.Lock()
	n := c.mu.open[a.Ino]
	c.mu.Unlock()
	if n == nil {
		return a, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	a.Size, a.Mtime = n.mu.size, n.mu.mtime
	return a, true
}

// OwnWrites returns a with the size and mtime of this client's writes to
// a.Ino not yet committed, if there are any; otherwise a as it is. Unlike
// OpenAttr, it never puts the size an open state read at its open in place
// of a newer one from the server (another client may have written since).
func (c *Client) OwnWrites(a core.Attr) core.Attr { return c.overlayOpen(a) }

// RepointOpen tells the client how the meta server now finds an open file,
// when the caller knows better than the client can (the FUSE layer knows a
// hard-linked file's other names when one of them is removed).
func (c *Client) RepointOpen(ref Ref) {
	c.mu.Lock()
	n := c.mu.open[ref.Ino]
	c.mu.Unlock()
	if n == nil {
		return
	}
	n.mu.Lock()
	n.mu.ref = ref
	n.mu.Unlock()
}

// dropped handles the removal of name from parent, which held ino: gone
// says ino has no link left. The meta server recorded its chunks for
// reclaim in the same batch; a file gone while open here (the request listed
// it in sent: openAt) stays usable until its last release, which lets the
// held record go (inode.go: releaseOpen). A file listed but closed while the
// request was on its way lets it go now. One that keeps other links is found
// by inode from now on.
func (c *Client) dropped(ino core.Ino, gone bool, parent core.Ino, name string, sent []uint64) {
	switch {
	case !gone:
		c.forgetName(ino, parent, name)
	case c.orphan(ino):
	case slices.Contains(sent, uint64(ino)):
		c.releaseReclaim(ino)
	default:
		c.forgetFrames(ino)
	}
}

// forgetFrames drops, unwritten, the parity cache's frames of a file that
// is gone (no link left, no handle open here): its chunks are reclaimed,
// and a frame's flush after the reclaim would leave parity units of a freed
// inode on the stores. The frames' stripe locks go with them.
func (c *Client) forgetFrames(ino core.Ino) {
	if c.ec == nil || c.ec.cache == nil {
		return
	}
	ctx, cancel := context.WithTimeout(c.life, c.cfg.StoreTimeout)
	defer cancel()
	c.discardFrames(ctx, ino, 0)
}

// openAt lists the inodes open here that (parent, name) may name: those
// opened by that name and those known by inode only (hard-linked files). An
// unlink or rename sends them so that the meta server holds the reclaim of
// a file that stays open here.
func (c *Client) openAt(parent core.Ino, name string) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []uint64
	for ino, n := range c.mu.open {
		n.mu.Lock()
		r := n.mu.ref
		n.mu.Unlock()
		if r.Parent == parent && r.Name == name || r.Name == "" {
			out = append(out, uint64(ino))
		}
	}
	return out
}

// releaseReclaim tells every meta server that the last handle of unlinked
// file ino closed, so its held reclaim record goes ahead. It runs in the
// background with a bound; a record it misses stays held (weft fsck reports
// it, weft gc --release-held releases it).
func (c *Client) releaseReclaim(ino core.Ino) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		c.forgetFrames(ino) // before the reclaim it holds goes ahead
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A written-back unlink of the file must reach the servers
		// before the release of the reclaim it holds.
		c.wbFlushAll(ctx)
		for i, m := range c.metas {
			if err := m.Call(ctx, pb.MethodReleaseReclaim, &pb.ReleaseReclaimRequest{Ino: uint64(ino)}, &pb.Empty{}); err != nil {
				c.log.Warn("releasing the reclaim of an unlinked file failed", "ino", ino, "meta", i, "err", err)
			}
		}
	}()
}

// orphan marks ino's open state freed, and reports whether the file is
// open here.
func (c *Client) orphan(ino core.Ino) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.mu.open[ino]
	if n == nil {
		return false
	}
	n.mu.Lock()
	n.mu.freed = true
	n.mu.Unlock()
	return true
}

// forgetName re-points the open state of ino, if it names (parent, name),
// to the inode alone: the name is gone but the file has other links, and a
// file with several links keeps a standalone record found by inode.
func (c *Client) forgetName(ino, parent core.Ino, name string) {
	c.mu.Lock()
	n := c.mu.open[ino]
	c.mu.Unlock()
	if n == nil {
		return
	}
	n.mu.Lock()
	if n.mu.ref.Parent == parent && n.mu.ref.Name == name {
		n.mu.ref = Ref{Ino: ino}
	}
	n.mu.Unlock()
}

// renameOpen re-points open states after a rename: what was named (sp, sn)
// is now (dp, dn), and with exchange the other way round too. skip is the
// inode the rename replaced, if any.
func (c *Client) renameOpen(sp core.Ino, sn string, dp core.Ino, dn string, exchange bool, skip core.Ino) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ino, n := range c.mu.open {
		if ino == skip {
			continue
		}
		n.mu.Lock()
		switch r := n.mu.ref; {
		case r.Parent == sp && r.Name == sn:
			n.mu.ref = Ref{Ino: ino, Parent: dp, Name: dn}
		case exchange && r.Parent == dp && r.Name == dn:
			n.mu.ref = Ref{Ino: ino, Parent: sp, Name: sn}
		}
		n.mu.Unlock()
	}
}

// truncateFreedLocked truncates a file that has no name left: no meta
// server has it, so only this client's state and the stores change.
func (n *openInode) truncateFreedLocked(ctx context.Context, size uint64) error {
	if !n.mu.inline && size < n.mu.size {
		if err := n.c.shrinkChunks(ctx, n.ino, size, n.mu.size, n.capability(auth.Write)); err != nil {
			return err
		}
	}
	if n.mu.inline && uint64(len(n.mu.data)) > size {
		n.mu.data = n.mu.data[:size]
	}
	n.mu.size = size
	n.mu.mtime = time.Now()
	n.trimExtentsLocked(size)
	return nil
}
