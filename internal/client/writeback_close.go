package client

import (
	"context"

	"github.com/weftfs/weft/internal/core"
)

// Creates sent at close (Config.CreateAtClose): write-back's machinery,
// used for one change only. A new regular file's create is completed in
// the client under a write lease on its directory, as write-back does
// (wbCreate: O_EXCL's EEXIST is decided at the open, from the queue and
// from the servers' entries, which nobody else changes under the lease),
// and the close folds the file's inline content into it (wbCommit) and
// sends the directory's queue: one apply_batch request, answered when the
// servers applied it (durably in sync mode), instead of a create at the
// open and a commit at the close. So what close acknowledged is on the
// servers as without write-back, and a crash of the client between the
// open and the close loses the file as it loses its unsynced data.
//
// Every other change goes to the servers at once (wbEveryChange is false):
// an unlink, rename, setattr or mkdir first sends the queue (a pending
// create) and is then sent as without write-back.

// wbEveryChange reports whether write-back completes every change it can
// in the client, not only creates (CreateAtClose).
func (c *Client) wbEveryChange() bool {
	return c.cfg.WriteBack && !c.cfg.CreateAtClose
}

// sendAtClose sends, under CreateAtClose, the queue of the directory of
// f, being closed or flushed, if f's create (with its content) is still
// in it, and waits until the servers applied it. Only then: a mount's
// RELEASE of the previous file comes after its FLUSH sent its create, and
// sending again would take the next file's create before its content
// (whose commit would then go on its own). It returns the error of a batch
// the servers refused since, once (SyncDir).
func (c *Client) sendAtClose(ctx context.Context, f *File) error {
	if !c.cfg.CreateAtClose {
		return nil
	}
	ref := f.Ref()
	w := c.wbLookupDir(ref.Parent)
	if w == nil {
		return nil
	}
	w.mu.Lock()
	n := w.mu.names[ref.Name]
	waits := n != nil && n.pending > 0 && !n.absent && n.attr.Ino == f.n.ino
	w.mu.Unlock()
	if !waits {
		return nil
	}
	return c.SyncDir(ctx, ref.Parent)
}

// wbCreateWaits reports whether the create of file ino, name in dir, is in
// dir's open batch: under CreateAtClose the file's commit is folded into
// it, and any other commit goes to the servers (queueing it would take a
// write lease on the directory for nothing).
func (c *Client) wbCreateWaits(dir core.Ino, name string, ino core.Ino) bool {
	w := c.wbLookupDir(dir)
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	op := w.mu.creates[name]
	return op != nil && op.Create.Ino == uint64(ino)
}
