package client

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// A shrink to a size inside a stripe changes that stripe in two steps:
// the meta server cuts its data units (its reclaim, before it answers the
// truncate, or later when a store did not answer) and the client rewrites
// its parity for the new end. A rebuild between the two (a degraded read,
// here or in another client) would decode from data and parity that do
// not match, and return wrong bytes below the new size, where no one
// changed anything. So the stripe is guarded from before the meta
// server's truncate to the end of the rewrite (shrinkGuard):
//
//   - its lock is held, here and at its store (stripelock.go): writers
//     and this client's rebuilds wait, and so do other clients' rebuilds
//     for up to 2 × ParityFrameAge;
//   - its parity units are marked stale, so that a rebuild that stopped
//     waiting (or whose lock store is suspect) never decodes from them:
//     with M = 1 it is EIO, never wrong bytes;
//   - the parity for the new end is coded before the cut, from the data
//     below the new size as the stripe holds it then (a data unit whose
//     store is down is rebuilt from the stripe, still whole);
//   - after the meta server's answer the client cuts the stripe's data
//     units itself, under the lock, so that the stripe holds what the
//     parity was coded for even when the meta server's cut is late; the
//     late cut then finds nothing left to do. Only then is the parity
//     written and its marks cleared.
//
// Anything that fails after the cut leaves the marks: the stripe's
// parity is unused (degraded reads of it are EIO) until weft repair
// rewrites it from the data.

// shrinkGuard is a shrink's hold of the stripe that will hold the new
// end, taken before the meta server's truncate (guardShrink).
type shrinkGuard struct {
	k      stripeKey
	size   uint64   // the new size
	n      int64    // the parity's length: the longest data unit left
	parity [][]byte // the stripe's parity for the new end
	unlock func()
	// stopRenewing stops the renewal of the store's lock across the meta
	// server's call (keepHeld) and reports whether a renewal found it
	// lapsed. Idempotent.
	stopRenewing func() (lapsed bool)
}

// keepHeld renews g's lock at its store until stopRenewing: a truncate
// whose meta server waits for a store that hangs (ReclaimTimeout, 5 s per
// call) would outlast the lock's trust (4.5 s), and the guard would then
// have to leave the stripe marked (degraded reads EIO) until repair.
func (c *Client) keepHeld(g *shrinkGuard) {
	ctx, cancel := context.WithCancel(c.life)
	done := make(chan bool, 1)
	go func() {
		lapsed := false
		t := time.NewTicker(stripeLockTerm / 4)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				done <- lapsed
				return
			case <-t.C:
				l, err := c.renewStripe(ctx, g.k, stripeLockTerm/2)
				lapsed = lapsed || l
				if err != nil && ctx.Err() == nil {
					c.log.Warn("a truncate could not renew its stripe's lock", "ino", g.k.ino, "stripe", g.k.stripe, "err", err)
				}
			}
		}
	}()
	var once sync.Once
	var lapsed bool
	g.stopRenewing = func() bool {
		once.Do(func() {
			cancel()
			lapsed = <-done
		})
		return lapsed
	}
}

// guardShrink guards the stripe of ino that a truncate to size leaves
// partly written, before the meta server is asked (see above). before is
// the file's size as this client knows it (sizeUnknown when it does
// not): a truncate that does not shrink needs no guard. nil: no stripe to
// guard (a shrink to a stripe boundary, or to 0: the stripes past the new
// end are dropped whole, and every unit of the file with 0).
func (c *Client) guardShrink(ctx context.Context, ino core.Ino, size, before uint64) (*shrinkGuard, error) {
	if !c.needsShrinkGuard(ino, size, before) {
		return nil, nil
	}
	sc, cs := c.ec.scheme, c.cfg.ChunkSize
	sh := sc.ShrinkTo(size, cs)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel()
	k := stripeKey{ino, sh.Stripe}
	unlock, err := c.lockStripe(ctx, ino, sh.Stripe, forWrite)
	if refusedAccess(err) {
		return nil, nil // see below
	}
	if err != nil {
		return nil, errs.Wrap(errs.IO, "truncate", "locking the stripe holding the new end", err)
	}
	if c.ec.cache != nil {
		// A frame of the stripe that FlushParity could not write
		// (another client held the lock) goes out now.
		c.flushFrameLocked(ctx, k)
	}
	g := &shrinkGuard{k: k, size: size, unlock: unlock}
	start := sh.Stripe * uint64(sc.K) * uint64(cs)
	g.n = int64(min(uint64(cs), size-start))
	shards := make([][]byte, sc.K)
	defer func() {
		for _, d := range shards {
			rpc.PutBuffer(d)
		}
	}()
	err = c.onStores(allStores(sc.K), func(q int) error {
		ustart := start + uint64(q)*uint64(cs)
		if ustart >= size {
			return nil // to be cut: zeros
		}
		// The stripe is whole and locked: a unit whose store is down is
		// rebuilt from the others.
		d, err := c.readDataRange(ctx, ino, sc.DataIndex(sh.Stripe, q), 0, min(g.n, int64(size-ustart)), true)
		shards[q] = d
		return err
	})
	if err == nil {
		g.parity, err = c.ec.codec.ParityRange(shards, int(g.n))
	}
	if err == nil {
		err = c.setShrinkMarks(ctx, k)
	}
	c.keepHeld(g)
	if err != nil {
		g.abandon(ctx, c)
		if refusedAccess(err) {
			// The stores refuse this client the file (no capability for
			// it: not open here): whether the truncate may be done is the
			// meta server's to say, and the shrink goes on unguarded,
			// as it did before there was a guard.
			return nil, nil
		}
		return nil, errs.Wrap(errs.IO, "truncate", "guarding the stripe holding the new end", err)
	}
	return g, nil
}

// refusedAccess reports whether err is a store's refusal of the caller's
// rights.
func refusedAccess(err error) bool {
	k := errs.KindOf(err)
	return err != nil && (k == errs.CapabilityRefused || k == errs.Permission || k == errs.NotPermitted)
}

// unknownOutcome are the kinds of a meta server's error that leave
// unknown whether the truncate was done.
var unknownOutcome = []errs.Kind{errs.Other, errs.IO, errs.Unavailable, errs.Timeout, errs.Canceled, errs.Protocol}

// needsShrinkGuard reports whether a truncate of ino to size, whose size
// is before, needs guardShrink: it shrinks the file into the middle of a
// stripe.
func (c *Client) needsShrinkGuard(ino core.Ino, size, before uint64) bool {
	return ino != 0 && size < before && c.ec.scheme.ShrinkTo(size, c.cfg.ChunkSize).Rewrite
}

// sizeBefore asks the meta server the inode and size of the file ref
// names, before a truncate of it for which this client does not know the
// file's size (or, with ref by name, its inode): a truncate that does not
// shrink a chunked file needs no guard, which costs K unit reads and 2M
// mark writes. An inline file has no stripes (size 0). Size sizeUnknown
// when the server cannot say. The file may change between the two calls
// (another client grows it, a rename puts another file under the name):
// a shrink left unguarded so, and one of a file other than the guarded
// one (endGuard), is the case the guard does not cover (rewriteParity).
func (c *Client) sizeBefore(ctx context.Context, ref Ref) (core.Ino, uint64) {
	var r pb.GetAttrReply
	req := &pb.GetAttrRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb()}
	if err := c.callRef(ctx, req.Node, req.Node.ToOwner, pb.MethodGetAttr, req, &r, true); err != nil {
		return ref.Ino, sizeUnknown
	}
	if r.Attr.GetInline() {
		return core.Ino(r.Attr.GetIno()), 0
	}
	return core.Ino(r.Attr.GetIno()), r.Attr.GetSize()
}

// sizeUnknown is guardShrink's before when the client does not know the
// file's size.
const sizeUnknown = ^uint64(0)

// setShrinkMarks sets the stale marks of stripe k's parity units. Every
// one must be set: a parity store down now may come back holding the old
// parity unmarked.
func (c *Client) setShrinkMarks(ctx context.Context, k stripeKey) error {
	sc := c.ec.scheme
	stores := sc.Stores(k.ino, k.stripe, len(c.stores))
	return c.onStores(allStores(sc.M), func(j int) error {
		c.ec.writes.Add(1)
		return c.writeUnitOn(ctx, k.ino, sc.MarkIndex(k.stripe, j), stores[sc.K+j], 0, []byte{1}, false)
	})
}

// abandon lets the guard go when nothing was cut (the truncate failed, or
// it did not shrink the file): the parity is still right, its marks go.
// A mark that cannot be cleared stays until repair clears it.
func (g *shrinkGuard) abandon(ctx context.Context, c *Client) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.StoreTimeout)
	defer cancel()
	sc := c.ec.scheme
	if err := c.onStores(allStores(sc.M), func(j int) error {
		return c.truncateUnit(ctx, g.k.ino, sc.MarkIndex(g.k.stripe, j), 0)
	}); err != nil {
		c.log.Warn("a truncate's stale marks could not be cleared: the stripe's parity is unused until weft repair clears them",
			"ino", g.k.ino, "stripe", g.k.stripe, "err", err)
	}
	g.stopRenewing()
	g.unlock()
}

// release lets the guard go with the marks as they are: cleared by the
// parity's rewrite, or left after a truncate whose outcome is unknown (the
// meta server did not answer) or whose cut or rewrite failed, since the
// data may have been cut: weft repair rewrites the stripe's parity from
// its data and clears them.
func (g *shrinkGuard) release() {
	g.stopRenewing()
	g.unlock()
}

// endGuard ends g after the meta server's answer to its truncate, unless
// the truncate shrank the file to g's size (the file after it is a, and
// inline; oldSize its size before): then shrinkParity takes g on, and
// endGuard returns it. err is the truncate's error.
func (c *Client) endGuard(ctx context.Context, g *shrinkGuard, err error, a core.Attr, inline bool, oldSize uint64) *shrinkGuard {
	switch {
	case g == nil:
		return nil
	case err == nil && a.Ino == g.k.ino && a.Size == g.size && a.Size < oldSize && !inline:
		return g
	case err == nil || !slices.Contains(unknownOutcome, errs.KindOf(err)):
		g.abandon(ctx, c) // refused, or not a shrink: nothing was cut
	default:
		g.release()
	}
	return nil
}

// cutShrunkStripe cuts g's stripe at g's size on the stores, under g's
// lock: the data unit holding the new end is cut there, the ones after it
// go. The meta server does the same (its reclaim), maybe later; what it
// cut already is not touched again (a store creates no unit it does not
// hold). Only under a lock held since before the truncate: one taken
// after it could cut bytes another client wrote past the new end since.
func (c *Client) cutShrunkStripe(ctx context.Context, g *shrinkGuard) error {
	sc, cs := c.ec.scheme, uint64(c.cfg.ChunkSize)
	lapsed := g.stopRenewing()
	held, err := c.stillHeld(ctx, g.k)
	if err == nil && (lapsed || !held) {
		err = errs.New(errs.IO, "truncate", "the lock of stripe %d lapsed during the truncate", g.k.stripe)
	}
	if err == nil {
		start := g.k.stripe * uint64(sc.K) * cs
		err = c.onStores(allStores(sc.K), func(q int) error {
			ustart := start + uint64(q)*cs
			if ustart+cs <= g.size {
				return nil
			}
			return c.truncateUnit(ctx, g.k.ino, sc.DataIndex(g.k.stripe, q), int64(max(g.size, ustart)-ustart))
		})
	}
	if err != nil {
		// The stripe's marks stay: its parity is unused until repair
		// rewrites it from the data (another client may have written it
		// once the lock lapsed).
		return errs.Wrap(errs.IO, "truncate", "cutting the stripe holding the new end", err)
	}
	return nil
}
