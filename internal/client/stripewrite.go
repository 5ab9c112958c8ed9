package client

import (
	"context"
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
func (c *Client) writeStripeUnit(ctx context.Context, ino core.Ino, index uint64, off int64, data []byte, sync bool) ([]int, error) {
	sc := c.ec.scheme
	stripe, pos := sc.Stripe(index)
	unlock, err := c.ec.lock(ctx, ino, stripe)
	if err != nil {
		return nil, err
	}
	defer unlock()
	n := int64(len(data))
	shards, err := c.readOtherData(ctx, ino, stripe, pos, off, n)
	if err != nil {
		return nil, err
	}
	shards[pos] = data
	parity, err := c.ec.codec.ParityRange(shards, int(n))
	for p, d := range shards {
		if p != pos {
			rpc.PutBuffer(d)
		}
	}
	if err != nil {
		return nil, err
	}
	stores := sc.Stores(ino, stripe, len(c.stores))
	written := []int{stores[pos]}
	for j := range sc.M {
		written = append(written, stores[sc.K+j])
	}
	err = c.onStores(allStores(1+sc.M), func(i int) error {
		c.ec.writes.Add(1)
		if i == 0 {
			return c.writeUnitOn(ctx, ino, index, stores[pos], off, data, sync)
		}
		return c.writeUnitOn(ctx, ino, sc.ParityIndex(stripe, i-1), stores[sc.K+i-1], off, parity[i-1], sync)
	})
	return written, err
}

// readOtherData reads n bytes at off of every data unit of stripe but
// position skip, in parallel, each rebuilt from the stripe if its store
// fails. The caller holds the stripe's lock. Slots are nil for holes.
func (c *Client) readOtherData(ctx context.Context, ino core.Ino, stripe uint64, skip int, off, n int64) ([][]byte, error) {
	sc := c.ec.scheme
	shards := make([][]byte, sc.K)
	var others []int
	for q := range sc.K {
		if q != skip {
			others = append(others, q)
		}
	}
	if len(others) == 0 {
		return shards, nil
	}
	err := c.onStores(others, func(q int) error {
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
