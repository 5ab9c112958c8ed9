package client

import (
	"context"
	"sync/atomic"
)

// An edge meta server in write-back mode (weft edge --durability
// writeback) may complete a setattr itself and send it upstream later; it
// says so in the reply (SetAttrReply.queued). Such a change is durable
// upstream once a sync_meta to the edge has returned, so this client then
// sends one at the next fsync of a file, fsync of a directory (SyncNamespace) or
// Close. Against meta servers (which never set it) nothing changes.

// edgeHeld records that an edge holds a change of this client's.
type edgeHeld struct{ pending atomic.Bool }

// noteEdgeHeld records a reply that says the change is held at an edge.
func (c *Client) noteEdgeHeld(queued bool) {
	if queued {
		c.edgeHeld.pending.Store(true)
	}
}

// syncEdgeHeld makes the changes the edges hold durable upstream: a
// sync_meta to every meta server of the client (the edge's listeners),
// if any reply said it was held since the last one.
func (c *Client) syncEdgeHeld(ctx context.Context) error {
	if !c.edgeHeld.pending.Swap(false) {
		return nil
	}
	if err := c.syncMetas(ctx, c.metas); err != nil {
		c.edgeHeld.pending.Store(true) // not yet durable: the next sync tries again
		return err
	}
	return nil
}

// closeEdgeHeld syncs the changes the edges hold at Close (unmount),
// bounded as the write-back queues' sending is.
func (c *Client) closeEdgeHeld() {
	ctx, cancel := context.WithTimeout(c.life, wbSendWait)
	defer cancel()
	if err := c.syncEdgeHeld(ctx); err != nil {
		c.log.Warn("changes an edge holds may not be durable upstream at close", "err", err)
	}
}
