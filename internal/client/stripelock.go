package client

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Stripe locks across clients. A write of an erasure-coded stripe codes
// its parity from the stripe's other data units (stripewrite.go) or from a
// frame's copy of them (stripecache.go). Two clients writing one stripe at
// once would each code parity from bytes the other is replacing, and the
// stripe's parity would then match neither: no error, until a store is
// lost and a degraded read rebuilds wrong bytes. So every writer of a
// stripe holds the stripe's lock at the store of its first parity unit
// (store/stripelock.go), which every write of the stripe needs anyway, on
// top of this client's own lock (stripes.lock):
//
//   - a reconstruct-write and a full-stripe write hold it for their own
//     length, and release it (one-way) at the end;
//   - a shrink holds the lock of the stripe holding the new end from
//     before the meta server's truncate to its parity rewrite
//     (stripeguard.go);
//   - a parity cache frame holds it for its life, renewing it as it is
//     written, and releases it once flushed: another client's write of the
//     stripe waits for the flush (at most about ParityFrameAge);
//   - a rebuild holds it too, so that it never decodes a stripe halfway
//     through another client's write; it goes on without it when the
//     lock's store is down (then nobody can write the stripe).
//
// The lock lasts stripeLockTerm at the store unless renewed, so a holder
// that dies blocks the stripe for at most that long. The holder trusts it
// stripeLockMargin less, from when it asked. A frame whose lock lapsed
// between two uses (this client stalled) may hold another client's old
// bytes: its parity is coded afresh from the stores at its flush.

const (
	stripeLockTerm   = 5 * time.Second
	stripeLockMargin = 500 * time.Millisecond
	// stripeLockWait is how long one request waits at the store for the
	// holder's release before the client asks again.
	stripeLockWait = time.Second
	// unlockStripeTimeout bounds handing an UnlockStripe to its
	// connection.
	unlockStripeTimeout = 5 * time.Second
)

// stripeHold is this client's hold of a stripe's lock at its store.
type stripeHold struct {
	seq     uint64
	trusted time.Time // monotonic: until when the client relies on it
}

// Why a stripe's lock is taken: what waits for it and what goes on
// without the store's part of it.
type stripeLockUse int

const (
	// forWrite waits as long as the caller's context lasts, and fails
	// when the store's lock cannot be had.
	forWrite stripeLockUse = iota
	// forRead (a rebuild) waits for another client's write at most
	// 2 × ParityFrameAge (a frame's life, as the wait for stale marks): a
	// holder that keeps the lock longer is dead or stalled (its lock
	// lapses within stripeLockTerm), and the rebuild goes on with this
	// client's lock alone, the stale marks still guarding it against a
	// frame's lagging parity. So it does when the lock's store is down or
	// failed lately (then nobody can write the stripe).
	forRead
	// forFlush (a frame's flush) fails when another client holds the
	// lock (this frame's lapsed): the frame waits for it, and the flush is
	// tried again later. It goes on with this client's lock alone when the
	// lock's store cannot be reached: its writes fail there too, as they
	// did before there were locks.
	forFlush
)

// lockStripe takes stripe's lock in this client and at its store, for
// use. unlock releases both, but keeps the store's while the stripe has a
// parity cache frame.
func (c *Client) lockStripe(ctx context.Context, ino core.Ino, stripe uint64, use stripeLockUse) (unlock func(), err error) {
	local, err := c.ec.lock(ctx, ino, stripe)
	if err != nil {
		return nil, err
	}
	k := stripeKey{ino, stripe}
	hctx := ctx
	if use == forRead {
		if _, s := c.stripeLockUnit(k); c.suspects.suspect(s) {
			return local, nil
		}
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, min(c.cfg.StoreTimeout, 2*c.cfg.ParityFrameAge))
		defer cancel()
	}
	if _, err := c.holdStripe(hctx, k); err != nil {
		fatal := ctx.Err() != nil
		switch use {
		case forWrite:
			fatal = true
		case forRead:
			fatal = fatal || errs.Is(err, errs.Permission)
		case forFlush:
			fatal = fatal || errs.Is(err, errs.Busy)
		}
		if fatal {
			local()
			return nil, err
		}
		return local, nil
	}
	return func() {
		c.letGoStripe(k)
		local()
	}, nil
}

// holdStripe makes sure this client holds k's lock at its store for at
// least half a term. lapsed: this client held it, and the store granted
// it afresh (another client may have written the stripe meanwhile); a
// frame of the stripe is then marked lapsed. The caller holds k's lock in
// this client.
func (c *Client) holdStripe(ctx context.Context, k stripeKey) (lapsed bool, _ error) {
	return c.renewStripe(ctx, k, stripeLockTerm/2)
}

// renewStripe is holdStripe, asking the store unless the lock is trusted
// for at least minLeft.
func (c *Client) renewStripe(ctx context.Context, k stripeKey, minLeft time.Duration) (lapsed bool, _ error) {
	sp := c.ec
	now := time.Now()
	sp.mu.Lock()
	h, had := sp.mu.holds[k]
	sp.mu.Unlock()
	if had && h.trusted.Sub(now) >= minLeft {
		return false, nil
	}
	seq := sp.lockSeq.Add(1)
	renewed, err := c.acquireStripe(ctx, k, seq)
	if err != nil {
		return false, err
	}
	sp.mu.Lock()
	sp.mu.holds[k] = stripeHold{seq: seq, trusted: now.Add(stripeLockTerm - stripeLockMargin)}
	sp.mu.Unlock()
	lapsed = had && !renewed
	if lapsed && sp.cache != nil {
		if f := sp.cache.frame(k); f != nil {
			f.lapsed = true
		}
	}
	if ctx.Err() != nil {
		// Granted after the caller gave up (acquireStripe lets the
		// request finish): a new hold goes back at once; one this
		// client had stays with whoever holds it (a frame).
		if !had {
			c.letGoStripe(k)
		}
		return lapsed, ctxError("lock stripe", ctx)
	}
	return lapsed, nil
}

// stillHeld renews k's lock if less than stripeLockMargin of its trust
// is left, before a writer sends what it coded under it. false: the lock
// had lapsed, and the writer must read the stripe again.
func (c *Client) stillHeld(ctx context.Context, k stripeKey) (bool, error) {
	lapsed, err := c.renewStripe(ctx, k, stripeLockMargin)
	return !lapsed, err
}

// acquireStripe asks k's lock store for the lock, again while another
// client holds it, as long as ctx lasts. renewed: this client held it.
//
// A request sent is waited for even when ctx ends meanwhile (each is
// bounded by StoreTimeout, and waits at the store at most stripeLockWait):
// a caller that gave up on a request the store had just granted would
// leave the lock held there for its term, with nobody to release it, and
// every other client's writes of the stripe and weft repair's pass (which
// gives up after 2 s: raced) waiting for it. A rebuild hedging a read is
// canceled so, as soon as the unit's own store answers
// (TestErasureHedgedReadLeavesNoLock). So a success may come back after
// ctx ended: the caller releases what it did not hold before.
func (c *Client) acquireStripe(ctx context.Context, k stripeKey, seq uint64) (renewed bool, _ error) {
	idx, s := c.stripeLockUnit(k)
	for {
		if ctx.Err() != nil {
			return false, ctxError("lock stripe", ctx)
		}
		c.ec.locks.Add(1)
		var r pb.LockStripeReply
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.StoreTimeout)
		err := c.withCapability(cctx, k.ino, auth.Write, func(tok []byte) error {
			req := &pb.LockStripeRequest{
				Chunk: &pb.ChunkID{Ino: uint64(k.ino), Index: idx}, Owner: c.ec.owner, Seq: seq,
				TermMs: stripeLockTerm.Milliseconds(), WaitMs: stripeLockWait.Milliseconds(), Capability: tok,
			}
			return call(cctx, c.stores[s], pb.MethodLockStripe, req, &r)
		})
		cancel()
		if !errs.Is(err, errs.Busy) {
			return r.GetRenewed(), err
		}
	}
}

// stripeLockUnit is the unit whose store holds k's lock: the first parity
// unit.
func (c *Client) stripeLockUnit(k stripeKey) (uint64, int) {
	sc := c.ec.scheme
	return sc.ParityIndex(k.stripe, 0), sc.Stores(k.ino, k.stripe, len(c.stores))[sc.K]
}

// letGoStripe releases k's lock at its store unless a frame of the stripe
// holds it. The caller holds k's lock in this client; the release is sent
// before that is let go, and names its grant, so a later acquire of this
// client (handled first by the store) is never undone by it.
func (c *Client) letGoStripe(k stripeKey) {
	sp := c.ec
	if sp.cache != nil && sp.cache.frame(k) != nil {
		return
	}
	sp.mu.Lock()
	h, had := sp.mu.holds[k]
	delete(sp.mu.holds, k)
	sp.mu.Unlock()
	if !had {
		return
	}
	idx, s := c.stripeLockUnit(k)
	ctx, cancel := context.WithTimeout(c.life, unlockStripeTimeout)
	defer cancel()
	_ = c.withCapability(ctx, k.ino, auth.Write, func(tok []byte) error {
		return c.stores[s].Send(ctx, pb.MethodUnlockStripe, &pb.UnlockStripe{
			Chunk: &pb.ChunkID{Ino: uint64(k.ino), Index: idx}, Owner: sp.owner, Seq: h.seq, Capability: tok,
		})
	})
}

// newStripeOwner is a client's name at the stripe locks' stores.
func newStripeOwner() uint64 { return rand.Uint64() | 1 }

// forgetHold drops this client's record of k's lock at its store, which
// then lapses there.
func (sp *stripes) forgetHold(k stripeKey) {
	sp.mu.Lock()
	delete(sp.mu.holds, k)
	sp.mu.Unlock()
}

// codeParityFromStores codes the parity of n bytes at off of stripe k from
// its data units as the stores hold them. The caller holds k's lock.
func (c *Client) codeParityFromStores(ctx context.Context, k stripeKey, off, n int64) ([][]byte, error) {
	data, err := c.readStripeRange(ctx, k.ino, k.stripe, off, n, -1)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, d := range data {
			rpc.PutBuffer(d)
		}
	}()
	return c.ec.codec.ParityRange(data, int(n))
}
