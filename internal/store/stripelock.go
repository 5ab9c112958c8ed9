package store

import (
	"context"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Stripe write locks (LockStripe, UnlockStripe; proto/store.proto). An
// erasure-coded write codes its stripe's parity from the stripe's other
// data units, so two clients writing one stripe at once would each code
// parity from bytes the other is replacing, and a later degraded read
// would rebuild wrong bytes. Each client serialises its own writers of a
// stripe; this table serialises clients. It lives on the store of the
// stripe's first parity unit, which every write of the stripe needs.
//
// The table is soft state, bounded in size and in time: a lock lapses
// after its term unless renewed (a holder that died), at most
// maxStripeLocks are held, and a restarted store grants nothing for
// stripeLockGrace, so that a write in flight under a lock it lost with the
// restart ends before another client's begins.

const (
	maxStripeLocks  = 1 << 16
	maxStripeTerm   = 30 * time.Second
	maxStripeWait   = 2 * time.Second
	stripeLockGrace = time.Second
)

type stripeLock struct {
	owner   uint64
	seq     uint64 // the latest grant or renewal
	expires time.Time
	freed   chan struct{} // closed when the lock is released or taken over
}

type stripeLocks struct {
	now   func() time.Time
	start time.Time
	mu    struct {
		sync.Mutex
		held map[ChunkKey]*stripeLock
	}
}

func newStripeLocks(now func() time.Time) *stripeLocks {
	l := &stripeLocks{now: now, start: now()}
	l.mu.held = map[ChunkKey]*stripeLock{}
	return l
}

// tryLock takes k's lock for owner until now+term, or renews it (renewed).
// It returns ok when taken, else a channel closed when the holder lets go
// (nil: the table is full, or the store is in its grace).
func (l *stripeLocks) tryLock(k ChunkKey, owner, seq uint64, term time.Duration) (wait <-chan struct{}, ok, renewed bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if h := l.mu.held[k]; h != nil {
		if h.owner == owner && now.Before(h.expires) {
			h.expires, h.seq = now.Add(term), seq
			return nil, true, true
		}
		if now.Before(h.expires) {
			return h.freed, false, false
		}
		close(h.freed) // lapsed: its holder died or stopped renewing
		delete(l.mu.held, k)
	}
	if now.Sub(l.start) < stripeLockGrace {
		return nil, false, false
	}
	if len(l.mu.held) >= maxStripeLocks {
		l.sweepLocked(now)
		if len(l.mu.held) >= maxStripeLocks {
			return nil, false, false
		}
	}
	l.mu.held[k] = &stripeLock{owner: owner, seq: seq, expires: now.Add(term), freed: make(chan struct{})}
	return nil, true, false
}

func (l *stripeLocks) sweepLocked(now time.Time) {
	for k, h := range l.mu.held {
		if !now.Before(h.expires) {
			close(h.freed)
			delete(l.mu.held, k)
		}
	}
}

// unlock releases k's lock if owner holds it under grant seq.
func (l *stripeLocks) unlock(k ChunkKey, owner, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h := l.mu.held[k]; h != nil && h.owner == owner && h.seq == seq {
		close(h.freed)
		delete(l.mu.held, k)
	}
}

// count returns how many stripe locks the table holds.
func (l *stripeLocks) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.held)
}

// LockStripe takes or renews a stripe's write lock (proto/store.proto),
// waiting up to the request's wait_ms (at most maxStripeWait, and the
// caller's deadline) for another holder.
func (s *Server) LockStripe(ctx context.Context, req *weftpb.LockStripeRequest) (*weftpb.LockStripeReply, error) {
	const op = "lock stripe"
	k, err := chunkKey(op, req.GetChunk())
	if err != nil {
		return nil, err
	}
	term := time.Duration(req.GetTermMs()) * time.Millisecond
	if term <= 0 || term > maxStripeTerm {
		return nil, errs.New(errs.Invalid, op, "term %d ms: want 1 to %d", req.GetTermMs(), maxStripeTerm.Milliseconds())
	}
	if req.GetOwner() == 0 {
		return nil, errs.New(errs.Invalid, op, "no owner")
	}
	if err := s.checkChunkCap(req.GetCapability(), k, auth.Write); err != nil {
		return nil, err
	}
	done, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer done()
	wait := min(max(time.Duration(req.GetWaitMs())*time.Millisecond, 0), maxStripeWait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		freed, ok, renewed := s.stripes.tryLock(k, req.GetOwner(), req.GetSeq(), term)
		if ok {
			return &weftpb.LockStripeReply{Renewed: renewed}, nil
		}
		var again <-chan time.Time
		if freed == nil { // grace or a full table: ask again shortly
			again = time.After(50 * time.Millisecond)
		}
		select {
		case <-freed:
		case <-again:
		case <-timer.C:
			return nil, errs.New(errs.Busy, op, "chunk %v: another client is writing the stripe", k)
		case <-ctx.Done():
			return nil, errs.Wrap(errs.Timeout, op, "", ctx.Err())
		}
	}
}

// UnlockStripe releases a stripe's write lock (one-way).
func (s *Server) UnlockStripe(_ context.Context, req *weftpb.UnlockStripe) {
	k, err := chunkKey("unlock stripe", req.GetChunk())
	if err != nil || s.checkChunkCap(req.GetCapability(), k, auth.Write) != nil {
		return
	}
	s.stripes.unlock(k, req.GetOwner(), req.GetSeq())
}
