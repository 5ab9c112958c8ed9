package client

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/rpc"
)

// ErasureStats counts the unit transfers of erasure-coded data since the
// client started: unit reads (direct and for rebuilds), unit writes, and
// rebuilds of a range from its stripe; and the stripe lock requests
// (stripelock.go: acquires and renewals, not counting the one-way
// releases), which carry no unit's bytes.
type ErasureStats struct {
	Reads, Writes, Rebuilds, Locks int64
}

// erasureCounters are the client's ErasureStats.
type erasureCounters struct {
	reads, writes, rebuilds, locks atomic.Int64
}

// ErasureStats returns the transfers counted so far (zero under
// replication).
func (c *Client) ErasureStats() ErasureStats {
	if c.ec == nil {
		return ErasureStats{}
	}
	return ErasureStats{Reads: c.ec.reads.Load(), Writes: c.ec.writes.Load(), Rebuilds: c.ec.rebuilds.Load(), Locks: c.ec.locks.Load()}
}

// writeStripeUnit is writeChunk under erasure coding: it writes data at off
// of data chunk index and the matching range of its stripe's parity units
// (reconstruct-write, stripe.go), and returns the stores written.
//
// It reads the range of the k-1 other data units, computes the parity, and
// writes the data unit and the m parity units in parallel. The data unit's
// write returns the bytes it replaced (return_old), so that a write that
// fails on some of its 1+m stores can be rolled back on the others without
// a read of its own unit first: a data range written without its parity
// (or the reverse) would make every later rebuild of that range of the
// stripe's other units wrong.
func (c *Client) writeStripeUnit(ctx context.Context, ino core.Ino, index uint64, off int64, data []byte, durable bool) ([]int, error) {
	sc := c.ec.scheme
	stripe, pos := sc.Stripe(index)
	unlock, err := c.lockStripe(ctx, ino, stripe, forWrite)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if c.ec.cache != nil {
		if !durable {
			if written, done, err := c.writeCached(ctx, ino, stripe, pos, off, data); done {
				return written, err
			}
		} else {
			c.flushFrameLocked(ctx, stripeKey{ino, stripe})
		}
	}
	n := int64(len(data))
	others, err := c.readOthersHeld(ctx, ino, stripe, off, n, pos)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, d := range others {
			rpc.PutBuffer(d)
		}
	}()
	shards := slices.Clone(others)
	shards[pos] = data
	parity, made, err := c.ec.codec.SendParity(shards, int(n), rpc.GetBuffer)
	if err != nil {
		return nil, err
	}
	defer func() {
		for j, u := range parity {
			if made[j] {
				rpc.PutBuffer(u)
			}
		}
	}()
	stores := sc.Stores(ino, stripe, len(c.stores))
	written := []int{stores[pos]}
	for j := range sc.M {
		written = append(written, stores[sc.K+j])
	}
	units := make([][]byte, 1+sc.M) // what goes to unit i: the data unit, then the parity units
	units[0] = data
	copy(units[1:], parity)
	undo, failed := c.writeUnits(ctx, ino, stripe, pos, off, units, durable)
	defer rpc.PutBuffer(undo.old)
	if failed == nil {
		c.releaseUndo(ctx, ino, stripe, pos, undo)
		return written, nil
	}
	c.rollBack(ctx, ino, stripe, pos, off, n, others, undo, failed)
	for _, err := range failed {
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// writeUnits writes units[0] to data unit pos and units[1+j] to parity unit
// j of stripe, at off, in parallel. It returns how the data unit's write
// can be undone (swapUnitOn), and nil when all writes succeeded, else each
// unit's error (nil for those written).
func (c *Client) writeUnits(ctx context.Context, ino core.Ino, stripe uint64, pos int, off int64, units [][]byte, durable bool) (undo unitUndo, _ []error) {
	errs := make([]error, len(units))
	var wg sync.WaitGroup
	for i := range units {
		wg.Go(func() {
			c.ec.writes.Add(1)
			idx, s := c.writtenUnit(ino, stripe, pos, i)
			if i == 0 {
				undo, errs[i] = c.swapUnitOn(ctx, ino, idx, s, off, units[i], durable)
				return
			}
			errs[i] = c.writeUnitOn(ctx, ino, idx, s, off, units[i], durable)
		})
	}
	wg.Wait()
	if slices.IndexFunc(errs, func(err error) bool { return err != nil }) < 0 {
		return undo, nil
	}
	return undo, errs
}

// writtenUnit is the chunk index and store of the i-th unit a write of data
// unit pos of stripe changes: the data unit itself (i = 0), then the
// parity units.
func (c *Client) writtenUnit(ino core.Ino, stripe uint64, pos, i int) (uint64, int) {
	sc := c.ec.scheme
	stores := sc.Stores(ino, stripe, len(c.stores))
	if i == 0 {
		return sc.DataIndex(stripe, pos), stores[pos]
	}
	return sc.ParityIndex(stripe, i-1), stores[sc.K+i-1]
}

// rollBack makes the stripe's data and parity agree again after a failed
// write (failed[i]: unit i's error, as writeUnits). When the data unit took
// the write, it gets its old bytes back (undo) and the parity units that
// took theirs get the parity of the old bytes. When the data unit's write
// failed, the parity units that took the write get the parity of whatever
// the data unit holds now, if its store answers a read; if it does not,
// they keep the new parity, so a rebuild of the unit gives the failed
// write's bytes (a failed write's range is undefined) and every other
// range as before. A unit whose own write failed is left alone: its store
// did not take the write or is gone (a store that comes back empty is
// rebuilt). If the rollback fails too, or the data unit's old bytes are
// unknown (its store had lost chunks, or restarted since), the range's
// parity may be stale until the next write of the range or weft repair
// --verify.
func (c *Client) rollBack(ctx context.Context, ino core.Ino, stripe uint64, pos int, off, n int64, others [][]byte, undo unitUndo, failed []error) {
	sc := c.ec.scheme
	dataIdx, dataStore := c.writtenUnit(ino, stripe, pos, 0)
	var cur []byte // what the data unit holds once rolled back
	switch {
	case failed[0] == nil && !undo.known:
		// The data unit took the write but could not say what it had
		// (a store that lost chunks): its new bytes stay.
		c.log.Error("a failed stripe write could not be rolled back: the range's parity may be stale until weft repair --verify",
			"ino", ino, "stripe", stripe, "off", off)
		return
	case failed[0] == nil:
		var err error
		if cur, err = c.undoUnit(ctx, ino, dataIdx, dataStore, off, n, undo); err != nil {
			c.log.Error("a failed stripe write could not be rolled back: the range's parity may be stale until weft repair --verify",
				"ino", ino, "stripe", stripe, "unit", dataIdx, "off", off, "err", err)
			return
		}
	default:
		c.ec.reads.Add(1)
		d, _, err := c.readUnitOn(ctx, ino, dataIdx, dataStore, off, n)
		if err != nil {
			return // the parity of the new bytes stays (see above)
		}
		defer rpc.PutBuffer(d)
		cur = d
	}
	shards := slices.Clone(others)
	shards[pos] = cur
	parity, err := c.ec.codec.ParityRange(shards, int(n))
	if err != nil {
		return
	}
	for j := range sc.M {
		if failed[1+j] != nil {
			continue
		}
		idx, s := c.writtenUnit(ino, stripe, pos, 1+j)
		c.ec.writes.Add(1)
		if rerr := c.writeUnitOn(ctx, ino, idx, s, off, parity[j], false); rerr != nil {
			c.log.Error("a failed stripe write could not be rolled back: the range's parity may be stale until weft repair --verify",
				"ino", ino, "stripe", stripe, "unit", idx, "off", off, "err", rerr)
		}
	}
}

// readStripeRange reads n bytes at off of every data unit of stripe but
// position skip (-1: none), in parallel, each rebuilt from the stripe if
// its store fails. The caller holds the stripe's lock. Slots are nil for
// holes and skip, shorter than n where a unit ends.
func (c *Client) readStripeRange(ctx context.Context, ino core.Ino, stripe uint64, off, n int64, skip int) ([][]byte, error) {
	sc := c.ec.scheme
	shards := make([][]byte, sc.K)
	err := c.onStores(allStores(sc.K), func(q int) error {
		if q == skip {
			return nil
		}
		d, err := c.readDataRange(ctx, ino, sc.DataIndex(stripe, q), off, n, true)
		shards[q] = d
		return err
	})
	if err != nil {
		for _, d := range shards {
			rpc.PutBuffer(d)
		}
		return nil, err
	}
	return shards, nil
}

// readOthersHeld is readStripeRange for a reconstruct-write: when the
// reads outlasted the trust in the stripe's lock at its store, and the
// lock had lapsed meanwhile, they are made again under the lock granted
// afresh (another client may have written the stripe in between).
func (c *Client) readOthersHeld(ctx context.Context, ino core.Ino, stripe uint64, off, n int64, pos int) ([][]byte, error) {
	for {
		others, err := c.readStripeRange(ctx, ino, stripe, off, n, pos)
		if err != nil {
			return nil, err
		}
		held, err := c.stillHeld(ctx, stripeKey{ino, stripe})
		if err == nil && held {
			return others, nil
		}
		for _, d := range others {
			rpc.PutBuffer(d)
		}
		if err != nil {
			return nil, err
		}
	}
}
