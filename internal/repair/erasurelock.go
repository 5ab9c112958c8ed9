package repair

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// A pass holds a stripe's write lock (the one clients take at the store of
// the stripe's first parity unit; store/stripelock.go) while it rebuilds,
// verifies or rewrites the stripe, so that no client's write is between
// its data and its parity while the pass reads the stripe. A stripe whose
// lock a client holds past repairLockWait is left to the next pass
// (Raced): longer than a client's lock term, so that a lock its holder
// forgot (a client that died, a release lost with its connection) has
// lapsed by then, and a parity cache frame (about a second) has been
// flushed. When the lock's store cannot be asked (it is down, or it is
// the store being rebuilt and predates the lock), the pass goes on without:
// nobody can write the stripe then.

const (
	repairLockTerm = 15 * time.Second
	repairLockWait = 6 * time.Second
	// lockRequestWait is how long one request waits at the store (which
	// waits at most 2 s).
	lockRequestWait = 2 * time.Second
)

// lockStripe takes stripe st's lock at lockStore, the store of its first
// parity unit (index: that unit). It returns the release, and false when a
// client holds the lock.
func (p *pass) lockStripe(ctx context.Context, ino, index uint64, lockStore int) (release func(), ok bool) {
	if p.owner == 0 {
		p.owner = rand.Uint64() | 1
	}
	p.lockSeq++
	seq := p.lockSeq
	id := &weftpb.ChunkID{Ino: ino, Index: index}
	peer := p.cfg.Stores[lockStore]
	var err error
	for start := time.Now(); ; {
		req := &weftpb.LockStripeRequest{Chunk: id, Owner: p.owner, Seq: seq, TermMs: repairLockTerm.Milliseconds(),
			WaitMs: lockRequestWait.Milliseconds(), Capability: p.capability(ino)}
		err = p.askLock(ctx, peer, req)
		if !errs.Is(err, errs.Busy) || time.Since(start) >= repairLockWait || ctx.Err() != nil {
			break
		}
	}
	release = func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.CallTimeout)
		defer cancel()
		_ = peer.Send(ctx, weftpb.MethodUnlockStripe, &weftpb.UnlockStripe{Chunk: id, Owner: p.owner, Seq: seq, Capability: p.capability(ino)})
	}
	switch {
	case ctx.Err() != nil:
		// The pass was stopped, maybe after the store granted the
		// request it gave up on: released, or it would hold the stripe
		// for repairLockTerm (a release naming a grant the store never
		// made frees nothing).
		release()
		return nil, false
	case errs.Is(err, errs.Busy):
		return nil, false
	case err != nil:
		return func() {}, true
	}
	return release, true
}

// askLock sends one lock request and waits for its answer even when ctx
// ends meanwhile, at most lockRequestWait and a second more (the store
// answers within lockRequestWait): a request the pass gave up on could
// still be granted at the store, and only a release sent after the answer
// frees it (TestCanceledRepairLeavesNoLock).
func (p *pass) askLock(ctx context.Context, peer Store, req *weftpb.LockStripeRequest) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.CallTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(lockRequestWait+time.Second, cancel) })
	defer stop()
	return peer.Call(cctx, weftpb.MethodLockStripe, req, &weftpb.LockStripeReply{})
}
