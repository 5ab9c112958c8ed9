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
// rebuilds of a range from its stripe.
type ErasureStats struct {
	Reads, Writes, Rebuilds int64
}

// erasureCounters are the client's ErasureStats.
type erasureCounters struct {
	reads, writes, rebuilds atomic.Int64
}

// ErasureStats returns the transfers counted so far (zero under
// replication).
func (c *Client) ErasureStats() ErasureStats {
	if c.ec == nil {
		return ErasureStats{}
	}
	return ErasureStats{Reads: c.ec.reads.Load(), Writes: c.ec.writes.Load(), Rebuilds: c.ec.rebuilds.Load()}
}

// writeStripeUnit is writeChunk under erasure coding: it writes data at off
// of data chunk index and the matching range of its stripe's parity units
// (reconstruct-write, stripe.go), and returns the stores written.
//
// It reads the range of all k data units, its own included, so that a
// write that fails on some of its 1+m stores can be rolled back on the
// others: a data range written without its parity (or the reverse) would
// make every later rebuild of that range of the stripe's other units
// wrong. One read more than reconstruct-write needs buys that.
func (c *Client) writeStripeUnit(ctx context.Context, ino core.Ino, index uint64, off int64, data []byte, durable bool) ([]int, error) {
	sc := c.ec.scheme
	stripe, pos := sc.Stripe(index)
	unlock, err := c.ec.lock(ctx, ino, stripe)
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
	old, err := c.readStripeRange(ctx, ino, stripe, off, n)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, d := range old {
			rpc.PutBuffer(d)
		}
	}()
	shards := slices.Clone(old)
	shards[pos] = data
	parity, err := c.ec.codec.ParityRange(shards, int(n))
	if err != nil {
		return nil, err
	}
	stores := sc.Stores(ino, stripe, len(c.stores))
	written := []int{stores[pos]}
	for j := range sc.M {
		written = append(written, stores[sc.K+j])
	}
	units := make([][]byte, 1+sc.M) // what goes to unit i: the data unit, then the parity units
	units[0] = data
	copy(units[1:], parity)
	failed := c.writeUnits(ctx, ino, stripe, pos, off, units, durable)
	if failed == nil {
		return written, nil
	}
	c.rollBack(ctx, ino, stripe, pos, off, n, old, failed)
	for _, err := range failed {
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// writeUnits writes units[0] to data unit pos and units[1+j] to parity unit
// j of stripe, at off, in parallel. It returns nil when all succeeded, else
// each unit's error (nil for those written).
func (c *Client) writeUnits(ctx context.Context, ino core.Ino, stripe uint64, pos int, off int64, units [][]byte, durable bool) []error {
	errs := make([]error, len(units))
	var wg sync.WaitGroup
	for i := range units {
		wg.Go(func() {
			c.ec.writes.Add(1)
			idx, s := c.writtenUnit(ino, stripe, pos, i)
			errs[i] = c.writeUnitOn(ctx, ino, idx, s, off, units[i], durable)
		})
	}
	wg.Wait()
	if slices.IndexFunc(errs, func(err error) bool { return err != nil }) < 0 {
		return nil
	}
	return errs
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

// rollBack puts the old bytes of the range back on the units of a failed
// write that did take it, so that the stripe's data and parity agree
// again. A unit whose write failed is left alone: its store did not take
// the write or is gone (a store that comes back empty is rebuilt). If the
// rollback fails too, the range's parity may be stale until the next write
// of the range or weft repair --verify.
func (c *Client) rollBack(ctx context.Context, ino core.Ino, stripe uint64, pos int, off, n int64, old [][]byte, failed []error) {
	oldParity, err := c.ec.codec.ParityRange(old, int(n))
	if err != nil {
		return
	}
	units := make([][]byte, len(failed))
	units[0] = make([]byte, n) // zeros where the unit had no bytes
	copy(units[0], old[pos])
	copy(units[1:], oldParity)
	for i, err := range failed {
		if err != nil {
			continue
		}
		idx, s := c.writtenUnit(ino, stripe, pos, i)
		c.ec.writes.Add(1)
		if rerr := c.writeUnitOn(ctx, ino, idx, s, off, units[i], false); rerr != nil {
			c.log.Error("a failed stripe write could not be rolled back: the range's parity may be stale until weft repair --verify",
				"ino", ino, "stripe", stripe, "unit", idx, "off", off, "err", rerr)
		}
	}
}

// readStripeRange reads n bytes at off of every data unit of stripe, in
// parallel, each rebuilt from the stripe if its store fails. The caller
// holds the stripe's lock. Slots are nil for holes, shorter than n where a
// unit ends.
func (c *Client) readStripeRange(ctx context.Context, ino core.Ino, stripe uint64, off, n int64) ([][]byte, error) {
	sc := c.ec.scheme
	shards := make([][]byte, sc.K)
	err := c.onStores(allStores(sc.K), func(q int) error {
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
