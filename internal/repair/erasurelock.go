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
		err = p.call(ctx, func(ctx context.Context) error {
			req := &weftpb.LockStripeRequest{Chunk: id, Owner: p.owner, Seq: seq, TermMs: repairLockTerm.Milliseconds(),
				WaitMs: lockRequestWait.Milliseconds(), Capability: p.capability(ino)}
			return peer.Call(ctx, weftpb.MethodLockStripe, req, &weftpb.LockStripeReply{})
		})
		if !errs.Is(err, errs.Busy) || time.Since(start) >= repairLockWait || ctx.Err() != nil {
			break
		}
	}
	switch {
	case errs.Is(err, errs.Busy):
		return nil, false
	case err != nil:
		return func() {}, true
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.CallTimeout)
		defer cancel()
		_ = peer.Send(ctx, weftpb.MethodUnlockStripe, &weftpb.UnlockStripe{Chunk: id, Owner: p.owner, Seq: seq, Capability: p.capability(ino)})
	}, true
}
