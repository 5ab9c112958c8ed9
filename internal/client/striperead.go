package client

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
)

// unitAnswer is a store's answer to a unit read.
type unitAnswer struct {
	data  []byte
	found bool
	err   error
}

// readStripeChunk is readChunk under erasure coding: up to n bytes at off
// of data chunk index, nil for a hole, read from its store or, when that
// fails, rebuilt from the rest of its stripe (stripe.go). The result is
// the caller's (rpc.PutBuffer may take it back).
func (c *Client) readStripeChunk(ctx context.Context, ino core.Ino, index uint64, off, n int64) ([]byte, error) {
	return c.readDataRange(ctx, ino, index, off, n, false)
}

// readDataRange reads n bytes at off of data unit index: the unit's own
// bytes when its store answers, else the range rebuilt from the stripe's
// other units. locked says the caller holds the stripe's lock (a write);
// otherwise a rebuild takes it, so it never mixes the units of two states
// of the stripe that this client's uploads go through.
func (c *Client) readDataRange(ctx context.Context, ino core.Ino, index uint64, off, n int64, locked bool) ([]byte, error) {
	s := c.unitStore(ino, index)
	dctx, dcancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer dcancel()
	direct := make(chan unitAnswer, 1)
	c.ec.reads.Add(1)
	go func() {
		d, found, err := c.readUnitOn(dctx, ino, index, s, off, n)
		if err == nil && !found {
			err = c.lostIfWritten(ino, index) // a hole, unless it was written
		}
		direct <- unitAnswer{d, found, err}
	}()
	wait := c.cfg.ReplicaTimeout
	if c.suspects.suspect(s) {
		wait = 0 // known slow or failed lately: rebuild at once, in parallel
	}
	hedge := time.NewTimer(wait)
	defer hedge.Stop()
	select {
	case a := <-direct:
		if a.err == nil {
			c.suspects.clear(s)
			return a.data, nil // nil when not found: a hole
		}
		if ctx.Err() != nil || !failoverable(a.err) {
			return nil, a.err
		}
		c.log.Warn("unit read failed: rebuilding from the stripe", "ino", ino, "index", index, "store", s, "err", a.err)
		c.suspects.mark(s)
		direct = nil
	case <-hedge.C:
		if wait > 0 {
			c.log.Warn("unit read slow: rebuilding from the stripe", "ino", ino, "index", index, "store", s, "after", wait)
			c.suspects.mark(s)
		}
	case <-ctx.Done():
		return nil, ctxError("read chunk", ctx)
	}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	rebuilt := make(chan unitAnswer, 1)
	go func() {
		d, err := c.rebuildRange(rctx, ino, index, off, n, locked)
		rebuilt <- unitAnswer{d, true, err}
	}()
	// The first success wins; a failed rebuild still waits for the unit's
	// own store, which may only have been slow (or suspect from an old
	// failure).
	var failed error
	for {
		select {
		case a := <-direct:
			direct = nil
			if a.err == nil {
				c.suspects.clear(s)
				return a.data, nil
			}
			if failed != nil {
				return nil, failed
			}
		case r := <-rebuilt:
			rebuilt = nil
			if r.err == nil {
				return r.data, nil
			}
			failed = errs.Wrap(errs.IO, "read chunk", chunkName(ino, index), r.err)
			if direct == nil {
				return nil, failed
			}
		case <-ctx.Done():
			return nil, ctxError("read chunk", ctx)
		}
	}
}

// rebuildRange rebuilds n bytes at off of the unit at chunk index from the
// other units of its stripe: it asks all of them at once, each bounded by
// StoreTimeout, and decodes from the first k that answer (found = false
// counts: zeros). Fewer than k: errs.IO. The result is from rpc.GetBuffer.
func (c *Client) rebuildRange(ctx context.Context, ino core.Ino, index uint64, off, n int64, locked bool) ([]byte, error) {
	sc := c.ec.scheme
	stripe, _ := sc.Unit(index)
	if !locked {
		unlock, err := c.lockStripe(ctx, ino, stripe, forRead)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	c.ec.rebuilds.Add(1)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel() // the units still asked give up
	if c.ec.cache != nil && !locked {
		// This client's cached parity of the stripe goes out first, so
		// that the rebuild can use it. Not for a caller that holds the
		// lock (a write): it has flushed the stripe's frame or is filling
		// one, and this rebuild, hedging one of its reads, may run on
		// after that read answered and the caller moved on, without the
		// lock: a flush then raced the caller's writes under the frame
		// (torn parity sent, marks cleared) or dropped the frame it was
		// filling, whose marks then stayed until repair.
		c.flushFrameLocked(ctx, stripeKey{ino, stripe})
	}
	// A parity unit marked stale is some client's frame in flight (or
	// that of a client that died: then only repair clears it). Wait for
	// a live one's flush, bounded by its age bound, before giving up.
	deadline := time.Now().Add(2 * c.cfg.ParityFrameAge)
	for {
		out, stale, err := c.rebuildOnce(ctx, ino, index, off, n)
		if !stale || time.Now().After(deadline) {
			return out, err
		}
		t := time.NewTimer(c.cfg.ParityFrameAge / 4)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// rebuildOnce is one try of rebuildRange; stale says it failed with parity
// units marked stale among the unreadable ones.
func (c *Client) rebuildOnce(ctx context.Context, ino core.Ino, index uint64, off, n int64) ([]byte, bool, error) {
	sc := c.ec.scheme
	stripe, pos := sc.Unit(index)
	stores := sc.Stores(ino, stripe, len(c.stores))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the units still asked give up
	type answer struct {
		pos int
		unitAnswer
	}
	answers := make(chan answer, sc.Width())
	for p := range sc.Width() {
		if p == pos {
			continue
		}
		c.ec.reads.Add(1)
		go func() {
			if p >= sc.K {
				// The mark is read before the parity: a parity unit that a
				// frame's data writes may have overtaken is marked first.
				stale, err := c.markedStale(ctx, ino, stripe, p-sc.K, stores[p])
				if err == nil && stale {
					err = errStaleParity
				}
				if err != nil {
					answers <- answer{p, unitAnswer{err: err}}
					return
				}
			}
			d, found, err := c.readUnitOn(ctx, ino, sc.UnitIndex(stripe, p), stores[p], off, n)
			answers <- answer{p, unitAnswer{d, found, err}}
		}()
	}
	units := make([][]byte, sc.Width())
	known, failed := 0, 0
	var firstErr error
	stale := false
	for known < sc.K && known+failed < sc.Width()-1 {
		a := <-answers
		if a.err == nil && !a.found {
			a.err = c.unitLostIfWritten(ino, stripe, a.pos)
		}
		if a.err != nil {
			failed++
			stale = stale || a.err == errStaleParity
			if firstErr == nil || a.err == errStaleParity {
				firstErr = a.err
			}
			continue
		}
		units[a.pos] = a.data
		if units[a.pos] == nil {
			units[a.pos] = []byte{} // not found: a hole, zeros
		}
		known++
	}
	if known < sc.K {
		return nil, stale, errs.New(errs.IO, "rebuild", "%d of the %d other units of stripe %d are readable, %s needs %d (failure: %v)",
			known, sc.Width()-1, stripe, sc, sc.K, firstErr)
	}
	if err := c.ec.codec.Reconstruct(units, int(n)); err != nil {
		return nil, false, err
	}
	out := rpc.GetBuffer(int(n))
	copy(out, units[pos])
	return out, false, nil
}

// unitLostIfWritten is the error of unit pos of stripe that its store does
// not hold: a data unit is lost if it was written, a parity unit if any of
// its stripe's data units was (core.Extents); otherwise it is a hole, zeros.
func (c *Client) unitLostIfWritten(ino core.Ino, stripe uint64, pos int) error {
	sc := c.ec.scheme
	if pos < sc.K {
		return c.lostIfWritten(ino, sc.DataIndex(stripe, pos))
	}
	for q := range sc.K {
		if c.chunkWritten(ino, sc.DataIndex(stripe, q)) {
			return errs.New(errs.IO, "read chunk", "parity unit %d of stripe %d of inode %d was written, and its store does not hold it: lost", pos, stripe, ino)
		}
	}
	return nil
}

// suspect reports whether store s was slow or failed lately.
func (sp *suspects) suspect(s int) bool { return sp.until[s].Load() > time.Now().UnixNano() }
