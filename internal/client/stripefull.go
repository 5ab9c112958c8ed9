package client

import (
	"context"

	"github.com/weftfs/weft/internal/core"
)

// Full-stripe writes. Under erasure coding a chunk that a write filled
// whole waits in the write buffer until the k chunks of its stripe are all
// full: they then go out as one upload that computes the parity from the k
// new chunks and writes the k+m units in parallel, with no reads at all
// (a chunk at a time costs k range reads each, stripe.go). A stripe that
// does not fill (the file's last, a scattered writer) goes out a chunk at
// a time as before, when a flush, a read of it or the write buffer's bound
// pushes it out. The write buffer is two stripes by default, so that one
// stripe fills while the previous one uploads.
//
// A full-stripe upload that fails on some stores is not rolled back (the
// old bytes were never read): the stripe's units then mix the write's
// bytes and the old ones, and the file's sticky error says the write
// failed. The whole stripe is within the failed write's range, whose
// content is not defined after the failure; weft repair --verify makes the
// parity match the data again.

// uploadFullLocked starts the upload of chunk idx, which its dirty range d
// covers whole (see above).
func (n *openInode) uploadFullLocked(idx uint64, d *dirtyRange) {
	if n.c.ec == nil {
		n.startUploadLocked(idx, d)
		return
	}
	sc := n.c.ec.scheme
	stripe, _ := sc.Stripe(idx)
	ds := make([]*dirtyRange, sc.K)
	for q := range sc.K {
		dq := n.mu.dirty[sc.DataIndex(stripe, q)]
		if dq == nil || dq.off != 0 || int64(len(dq.buf)) != n.c.cfg.ChunkSize {
			return // the stripe is not full yet: d waits
		}
		ds[q] = dq
	}
	idxs := make([]uint64, sc.K)
	bufs := make([][]byte, sc.K)
	for q, dq := range ds {
		idxs[q] = sc.DataIndex(stripe, q)
		bufs[q] = dq.buf
		delete(n.mu.dirty, idxs[q])
	}
	n.chainUploadsLocked(idxs, int64(sc.K)*n.c.cfg.ChunkSize, func(ctx context.Context) ([]int, error) {
		return n.c.writeFullStripe(ctx, n.ino, stripe, bufs, false)
	}, func() {
		for _, dq := range ds {
			dq.release()
		}
	})
}

// writeFullStripe writes the k data units of stripe (each a whole chunk)
// and their parity, all at once, and returns the stores written.
func (c *Client) writeFullStripe(ctx context.Context, ino core.Ino, stripe uint64, data [][]byte, durable bool) ([]int, error) {
	sc := c.ec.scheme
	unlock, err := c.lockStripe(ctx, ino, stripe, forWrite)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if c.ec.cache != nil {
		// The stripe is written whole: a frame of it would be stale.
		c.flushFrameLocked(ctx, stripeKey{ino, stripe})
	}
	parity, err := c.ec.codec.ParityRange(data, int(c.cfg.ChunkSize))
	if err != nil {
		return nil, err
	}
	stores := sc.Stores(ino, stripe, len(c.stores))
	units := append(append([][]byte(nil), data...), parity...)
	err = c.onStores(allStores(sc.Width()), func(p int) error {
		c.ec.writes.Add(1)
		return c.writeUnitOn(ctx, ino, sc.UnitIndex(stripe, p), stores[p], 0, units[p], durable)
	})
	return stores, err
}
