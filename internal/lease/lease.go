package lease

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// maxLeasesPerSession bounds the leases one client session may hold on a
// server at once, and so the memory a client can make the server keep (a
// term's worth of acquires); past it, acquires are refused and the client
// reads without a lease.
const maxLeasesPerSession = 100_000

// newKeys counts the keys a session does not hold yet.
func newKeys(held map[Key]struct{}, keys []Key) int {
	n := 0
	for _, k := range keys {
		if _, ok := held[k]; !ok {
			n++
		}
	}
	return n
}

// keyLeases are the leases on one key.
type keyLeases struct {
	grants map[uint64]*grant // by session
	// changes counts the changes in progress on the key (BeginChange): no
	// lease is granted while one runs.
	changes int
}

// grant is one session's lease on a key.
type grant struct {
	seq      uint64 // names the grant (Acquire's result)
	mode     Mode
	expires  time.Time
	recalled time.Time // when a recall was sent; zero if none
}

// conflicts reports whether g, another session's lease, stands in the way of
// a lease in mode m (0: a change, which conflicts with every lease).
func (g *grant) conflicts(m Mode) bool { return m != Read || g.mode == Write }

// Grant is what Acquire granted: Seq names the grant (its recalls carry
// it, and a release names it), Term is how long it lasts from the grant.
type Grant struct {
	Seq  uint64
	Term time.Duration
}

// Acquire grants session leases in mode on keys, all of them or none. It
// recalls conflicting leases of other sessions and waits, bounded by ctx,
// for them to go, for changes on the keys to end and (for write leases)
// for the grace period to end. holder is where recalls of the session's
// leases go from now on (nil keeps the previous one).
//
// A read acquire fails at once with errs.Busy when a change on a key is
// in progress and the session owes a release (a change recalled a lease of
// it, on any key, and it has not answered): the holder may be asking while
// it handles the recall, from a FUSE request the kernel sends holding a
// directory's lock (a lookup before a rename), while the invalidation the
// recall needs waits for that lock; the change may wait for that release,
// and waiting would have each wait for the other until the holder's bound.
// The caller reads without a lease. A session that owes nothing waits, so
// that it reads the change's result: a rename's two lookups must not see
// the two sides of another client's rename.
func (s *Service) Acquire(ctx context.Context, id uint64, holder Holder, mode Mode, keys []Key) (Grant, error) {
	const op = "lease acquire"
	switch {
	case id == 0:
		return Grant{}, errs.New(errs.Invalid, op, "no session")
	case mode != Read && mode != Write:
		return Grant{}, errs.New(errs.Invalid, op, "unknown lease mode %d", mode)
	case len(keys) == 0:
		return Grant{}, errs.New(errs.Invalid, op, "no keys")
	case len(keys) > maxLeasesPerSession:
		return Grant{}, errs.New(errs.Invalid, op, "%d keys in one request, more than a session may hold (%d)", len(keys), maxLeasesPerSession)
	}
	for {
		seq, wait, recalls, err := s.tryAcquire(id, holder, mode, keys)
		if err != nil {
			return Grant{}, err
		}
		if wait == nil {
			return Grant{Seq: seq, Term: s.term}, nil
		}
		sendRecalls(recalls)
		if err := wait.wait(ctx, op); err != nil {
			return Grant{}, err
		}
	}
}

// tryAcquire grants the leases if nothing stands in the way; otherwise it
// returns what to wait for and the recalls to send.
func (s *Service) tryAcquire(id uint64, holder Holder, mode Mode, keys []Key) (uint64, *waiter, []recall, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireLocked(now)
	ss := s.touchLocked(id, now)
	if holder != nil {
		ss.holder = holder
	}
	w := &waiter{changed: s.mu.changed}
	if mode == Write && now.Before(s.graceEnd) {
		w.until(s.graceEnd)
	}
	var recalls []recall
	for _, k := range keys {
		kl := s.mu.leases[k]
		if kl == nil {
			continue
		}
		s.expireKeyLocked(k, kl, now)
		if kl.changes > 0 {
			if mode == Read && ss.owed > 0 {
				return 0, nil, nil, errs.New(errs.Busy, "lease acquire", "a change is in progress, and may wait for this session's release")
			}
			w.blocked = true
		}
		recalls = s.recallLocked(k, kl, id, nil, mode, now, w, recalls)
	}
	if w.blocked || !w.deadline.IsZero() {
		w.from(now)
		return 0, w, recalls, nil
	}
	if fresh := newKeys(ss.leases, keys); len(ss.leases)+fresh > maxLeasesPerSession {
		// Bounded memory per client: it reads without a lease instead.
		return 0, nil, nil, errs.New(errs.Busy, "lease acquire", "the session holds %d leases, the most a session may (%d)", len(ss.leases), maxLeasesPerSession)
	}
	s.mu.seq++
	for _, k := range keys {
		kl := s.mu.leases[k]
		if kl == nil {
			kl = &keyLeases{grants: make(map[uint64]*grant)}
			s.mu.leases[k] = kl
		}
		g := kl.grants[id]
		if g == nil {
			g = &grant{}
			kl.grants[id] = g
			ss.leases[k] = struct{}{}
			s.mu.held++
		}
		// A new grant replaces the old one: a fresh term, and a recall
		// of the old grant is answered by asking again. A read acquire
		// over the session's own write lease keeps it a write lease
		// (the holder may have queued changes under it).
		m := mode
		if g.mode == Write {
			m = Write
		}
		if !g.recalled.IsZero() && ss.owed > 0 {
			ss.owed--
		}
		g.seq, g.mode, g.expires, g.recalled = s.mu.seq, m, now.Add(s.term), time.Time{}
	}
	s.metrics.granted(len(keys))
	s.mu.granted += uint64(len(keys))
	return s.mu.seq, nil, nil, nil
}

// recallLocked looks at the leases on k that stand in the way of session id
// wanting mode (0 for a change), skipping sessions whose holder is skip. It
// marks the ones not yet recalled, adds their recalls to recalls, and makes
// w wait for the earliest of their ends.
func (s *Service) recallLocked(k Key, kl *keyLeases, id uint64, skip Holder, mode Mode, now time.Time, w *waiter, recalls []recall) []recall {
	for sid, g := range kl.grants {
		if sid == id || !g.conflicts(mode) {
			continue
		}
		ss := s.mu.sessions[sid]
		if skip != nil && ss != nil && ss.holder == skip {
			continue
		}
		w.blocked = true
		w.until(g.expires)
		if !g.recalled.IsZero() {
			continue
		}
		g.recalled = now
		if ss != nil {
			ss.owed++
		}
		s.metrics.recalled()
		s.mu.recalled++
		if ss != nil && ss.holder != nil {
			recalls = append(recalls, recall{holder: ss.holder, session: sid, key: k, seq: g.seq})
		}
		s.log.Debug("lease recall", "session", sid, "key", k, "seq", g.seq, "for", id, "mode", mode, "holder", ss != nil && ss.holder != nil)
	}
	return recalls
}

// Release gives up session id's leases on keys: for each key, the grant
// seqs names, or whichever the session holds if seqs is shorter or names
// 0. A lease that is not held, or held under a later grant, stays as it
// is: it may have expired, or been acquired again after the recall that
// this release answers.
func (s *Service) Release(id uint64, keys []Key, seqs []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireLocked(now)
	if ss := s.mu.sessions[id]; ss != nil {
		ss.expires = now.Add(s.ttl)
	}
	for i, k := range keys {
		kl := s.mu.leases[k]
		if kl == nil {
			continue
		}
		g := kl.grants[id]
		if g == nil || i < len(seqs) && seqs[i] != 0 && seqs[i] != g.seq {
			s.log.Debug("lease release of a grant not held (expired, or acquired again)", "session", id, "key", k, "seqs", seqs)
			continue
		}
		if !g.recalled.IsZero() {
			s.metrics.recallLatency(now.Sub(g.recalled))
		}
		s.log.Debug("lease released", "session", id, "key", k, "seq", g.seq, "recalled", !g.recalled.IsZero())
		s.dropGrantLocked(k, kl, id)
	}
}

// BeginChange is called before a commit that changes records under keys.
// It recalls every lease other sessions hold on them, except those of
// sessions whose holder is requester (the client that asked for the
// change; nil: none), and waits until each is released or its term ends,
// and until the grace period is over. Until end is called, no lease on the
// keys is granted. It fails only when ctx ends first.
func (s *Service) BeginChange(ctx context.Context, requester Holder, keys []Key) (end func(), err error) {
	if len(keys) == 0 {
		return func() {}, nil
	}
	s.mu.Lock()
	for _, k := range keys {
		kl := s.mu.leases[k]
		if kl == nil {
			kl = &keyLeases{grants: make(map[uint64]*grant)}
			s.mu.leases[k] = kl
		}
		kl.changes++
	}
	s.mu.Unlock()
	end = func() { s.endChange(keys) }
	start := time.Now()
	for {
		wait, recalls := s.tryChange(requester, keys)
		if wait == nil {
			if d := time.Since(start); d > 100*time.Millisecond {
				s.log.Debug("lease change waited", "keys", keys, "for", d)
			}
			return end, nil
		}
		sendRecalls(recalls)
		if err := wait.wait(ctx, "lease recall"); err != nil {
			end()
			return nil, err
		}
	}
}

func (s *Service) tryChange(requester Holder, keys []Key) (*waiter, []recall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireLocked(now)
	w := &waiter{changed: s.mu.changed}
	if now.Before(s.graceEnd) {
		w.until(s.graceEnd)
	}
	var recalls []recall
	for _, k := range keys {
		kl := s.mu.leases[k]
		s.expireKeyLocked(k, kl, now)
		recalls = s.recallLocked(k, kl, 0, requester, 0, now, w, recalls)
	}
	if w.blocked || !w.deadline.IsZero() {
		w.from(now)
		return w, recalls
	}
	return nil, nil
}

func (s *Service) endChange(keys []Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		kl := s.mu.leases[k]
		kl.changes--
		if kl.changes == 0 && len(kl.grants) == 0 {
			delete(s.mu.leases, k)
		}
	}
	s.wakeLocked()
}

// expireKeyLocked drops the grants on k whose term has ended.
func (s *Service) expireKeyLocked(k Key, kl *keyLeases, now time.Time) {
	for sid, g := range kl.grants {
		if now.Before(g.expires) {
			continue
		}
		if !g.recalled.IsZero() {
			s.metrics.expired()
			s.mu.expired++
			s.log.Debug("lease expired after a recall", "session", sid, "key", k, "seq", g.seq, "recalled", g.recalled)
		}
		s.dropGrantLocked(k, kl, sid)
	}
}

// dropGrantLocked removes session sid's lease on k and wakes waiters.
func (s *Service) dropGrantLocked(k Key, kl *keyLeases, sid uint64) {
	g, ok := kl.grants[sid]
	if !ok {
		return
	}
	delete(kl.grants, sid)
	s.mu.held--
	if ss := s.mu.sessions[sid]; ss != nil {
		delete(ss.leases, k)
		if !g.recalled.IsZero() && ss.owed > 0 {
			ss.owed--
		}
	}
	if len(kl.grants) == 0 && kl.changes == 0 {
		delete(s.mu.leases, k)
	}
	s.wakeLocked()
}

// recall is one recall to send.
type recall struct {
	holder  Holder
	session uint64
	key     Key
	seq     uint64
}

// sendRecalls sends recalls, one message per holder and session.
func sendRecalls(rs []recall) {
	type dest struct {
		h  Holder
		id uint64
	}
	type batch struct {
		keys []Key
		seqs []uint64
	}
	byDest := map[dest]*batch{}
	var order []dest
	for _, r := range rs {
		d := dest{r.holder, r.session}
		b := byDest[d]
		if b == nil {
			b = &batch{}
			byDest[d] = b
			order = append(order, d)
		}
		b.keys, b.seqs = append(b.keys, r.key), append(b.seqs, r.seq)
	}
	for _, d := range order {
		d.h.Recall(d.id, byDest[d].keys, byDest[d].seqs)
	}
}

// waiter is what an acquire or a change waits for: a lease to go or a
// change to end (changed), or a deadline (the earliest term end, the end of
// the grace period).
type waiter struct {
	changed  <-chan struct{}
	blocked  bool
	deadline time.Time     // on the service's clock
	after    time.Duration // deadline - now, set by from
}

// from fixes how long the wait lasts at most, from now on the service's
// clock.
func (w *waiter) from(now time.Time) {
	if !w.deadline.IsZero() {
		w.after = max(w.deadline.Sub(now), time.Millisecond)
	}
}

func (w *waiter) until(t time.Time) {
	if w.deadline.IsZero() || t.Before(w.deadline) {
		w.deadline = t
	}
}

// wait blocks until something changed, the deadline passed (timed on the
// real clock; the service's clock decides again when it wakes), or ctx
// ended.
func (w *waiter) wait(ctx context.Context, op string) error {
	var timeout <-chan time.Time
	if !w.deadline.IsZero() {
		t := time.NewTimer(w.after)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-w.changed:
	case <-timeout:
	case <-ctx.Done():
		kind := errs.Canceled
		if ctx.Err() == context.DeadlineExceeded {
			kind = errs.Timeout
		}
		return errs.Wrap(kind, op, "waiting for leases", ctx.Err())
	}
	return nil
}
