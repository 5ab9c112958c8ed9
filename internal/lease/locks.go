package lease

import (
	"context"
	"math"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// File locks (fcntl byte-range locks and flock), arbitrated by the meta
// server that allocated the inode, so that processes on different mounts
// exclude each other. The state is in memory only: a restart forgets every
// lock, as an NFSv4 server without a grace period would (docs/fuse.md,
// "Locks").
//
// A lock belongs to an owner: a client's lock session plus the kernel's lock
// owner (a process's file table for POSIX locks, an open file description
// for flock). POSIX locks and flock locks live side by side and never
// conflict with each other, as on Linux. A session that sends nothing for
// its session's TTL loses all its locks: that is how the locks of a client that
// died (kill -9 of weft mount, a lost machine) go away. Expiry is checked
// lazily, at every lock request, which is when anyone could notice it; a
// waiter blocked by a lock of a silent session wakes when that session
// expires. Sessions are the service's (service.go), shared with leases.

const (
	// maxLockEnd is the largest byte offset a lock may cover (the kernel's
	// OFFSET_MAX); a lock ending there extends to the end of the file.
	maxLockEnd = math.MaxInt64
	// maxLockWait caps how long one SetLock request waits for a conflict to
	// go away; the client asks again to wait longer.
	maxLockWait = time.Minute
	// maxLocksPerSession bounds the memory and time one client can take
	// (a lock per byte of a large file; each change is linear in the
	// locks of its file). Real programs hold a few per file.
	maxLocksPerSession = 10_000
)

// lockOwner is who holds a lock.
type lockOwner struct {
	session uint64
	owner   uint64
	flock   bool // flock(2) lock; POSIX (fcntl) lock otherwise
}

// heldLock is one lock: bytes start..end (inclusive) of a file.
type heldLock struct {
	owner      lockOwner
	write      bool
	start, end uint64
	pid        uint32
}

func (l heldLock) overlaps(start, end uint64) bool { return l.start <= end && start <= l.end }

// conflicts reports whether l stands in the way of owner locking
// start..end for writing (write) or reading.
func (l heldLock) conflicts(owner lockOwner, write bool, start, end uint64) bool {
	return l.owner != owner && l.owner.flock == owner.flock &&
		(write || l.write) && l.overlaps(start, end)
}

// fileLocks are the locks on one file.
type fileLocks struct {
	held []heldLock
	// released is closed (and replaced) whenever a lock goes away or is
	// downgraded: waiters try again.
	released chan struct{}
}

// lockRequest is a validated SetLock or GetLock request.
type lockRequest struct {
	ino        core.Ino
	owner      lockOwner
	typ        weftpb.LockType
	start, end uint64
	pid        uint32
}

func parseLockRequest(op string, ino uint64, o *weftpb.LockOwner, r *weftpb.LockRange) (lockRequest, error) {
	switch {
	case ino == 0:
		return lockRequest{}, errs.New(errs.Invalid, op, "no inode")
	case o == nil || o.Session == 0:
		return lockRequest{}, errs.New(errs.Invalid, op, "no lock session")
	case r == nil:
		return lockRequest{}, errs.New(errs.Invalid, op, "no lock range")
	case r.Type != weftpb.LockType_LOCK_UNLOCK && r.Type != weftpb.LockType_LOCK_READ && r.Type != weftpb.LockType_LOCK_WRITE:
		return lockRequest{}, errs.New(errs.Invalid, op, "unknown lock type %d", r.Type)
	case r.Start > r.End || r.End > maxLockEnd:
		return lockRequest{}, errs.New(errs.Invalid, op, "bad lock range %d..%d", r.Start, r.End)
	}
	return lockRequest{
		ino:   core.Ino(ino),
		owner: lockOwner{session: o.Session, owner: o.Owner, flock: o.Flock},
		typ:   r.Type, start: r.Start, end: r.End, pid: r.Pid,
	}, nil
}

// SetLock sets or removes a lock, waiting up to req.WaitMs for conflicting
// locks to go away.
func (s *Service) SetLock(ctx context.Context, req *weftpb.SetLockRequest) (*weftpb.SetLockReply, error) {
	const op = "setlock"
	r, err := parseLockRequest(op, req.Ino, req.Owner, req.Lock)
	if err != nil {
		return nil, err
	}
	var deadline <-chan time.Time
	if req.WaitMs > 0 {
		timer := time.NewTimer(min(time.Duration(req.WaitMs)*time.Millisecond, maxLockWait))
		defer timer.Stop()
		deadline = timer.C
	}
	for {
		conflict, released, expires, err := s.trySet(r)
		if err != nil {
			return nil, err
		}
		if conflict == nil {
			return &weftpb.SetLockReply{Granted: true}, nil
		}
		if deadline == nil {
			return &weftpb.SetLockReply{Conflict: rangeOf(*conflict)}, nil
		}
		// The holder's session may die without a word: wake when it
		// would expire, and let the next attempt drop it.
		expiry := time.NewTimer(max(expires.Sub(s.now()), time.Millisecond))
		select {
		case <-released:
		case <-expiry.C:
		case <-deadline:
			expiry.Stop()
			return &weftpb.SetLockReply{Conflict: rangeOf(*conflict)}, nil
		case <-ctx.Done():
			expiry.Stop()
			return nil, errs.Wrap(errs.Canceled, op, "", ctx.Err())
		}
		expiry.Stop()
	}
}

// GetLock reports a lock that would stand in the way of req (F_GETLK).
func (s *Service) GetLock(_ context.Context, req *weftpb.GetLockRequest) (*weftpb.GetLockReply, error) {
	r, err := parseLockRequest("getlock", req.Ino, req.Owner, req.Lock)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireLocked(now)
	s.touchLocked(r.owner.session, now)
	if r.typ != weftpb.LockType_LOCK_UNLOCK {
		if fl := s.mu.files[r.ino]; fl != nil {
			if c := fl.conflictLocked(r); c != nil {
				return &weftpb.GetLockReply{Conflict: rangeOf(*c)}, nil
			}
		}
	}
	return &weftpb.GetLockReply{Conflict: &weftpb.LockRange{Type: weftpb.LockType_LOCK_UNLOCK}}, nil
}

// trySet applies r if nothing conflicts. Otherwise it returns a conflicting
// lock, a channel closed when a lock of the file is released, and when the
// conflicting holder's session expires.
func (s *Service) trySet(r lockRequest) (conflict *heldLock, released <-chan struct{}, expires time.Time, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireLocked(now)
	ss := s.touchLocked(r.owner.session, now)
	fl := s.mu.files[r.ino]
	if fl == nil {
		if r.typ == weftpb.LockType_LOCK_UNLOCK {
			return nil, nil, time.Time{}, nil
		}
		fl = &fileLocks{released: make(chan struct{})}
		s.mu.files[r.ino] = fl
	}
	if r.typ != weftpb.LockType_LOCK_UNLOCK {
		if c := fl.conflictLocked(r); c != nil {
			return c, fl.released, s.mu.sessions[c.owner.session].expires, nil
		}
	}
	before := ss.locks
	held, removed := fl.apply(r)
	if after := before + len(held) - len(fl.held); after > s.lockLimit {
		return nil, nil, time.Time{}, errs.New(errs.NoSpace, "setlock", "lock session holds %d locks, the most a session may", s.lockLimit)
	}
	ss.locks += len(held) - len(fl.held)
	fl.held = held
	if fl.holds(r.owner.session) {
		ss.files[r.ino] = struct{}{}
	} else {
		delete(ss.files, r.ino)
	}
	if removed {
		fl.wake()
	}
	if len(fl.held) == 0 {
		delete(s.mu.files, r.ino)
	}
	return nil, nil, time.Time{}, nil
}

// holds reports whether session holds a lock on the file.
func (fl *fileLocks) holds(session uint64) bool {
	for _, l := range fl.held {
		if l.owner.session == session {
			return true
		}
	}
	return false
}

// conflictLocked returns a lock in the way of r, or nil.
func (fl *fileLocks) conflictLocked(r lockRequest) *heldLock {
	write := r.typ == weftpb.LockType_LOCK_WRITE
	for i := range fl.held {
		if fl.held[i].conflicts(r.owner, write, r.start, r.end) {
			c := fl.held[i]
			return &c
		}
	}
	return nil
}

// apply returns the file's locks after r: the owner's locks inside
// r.start..r.end are cut out (split where they stick out on both sides),
// the new lock is added and merged with the owner's adjacent or
// overlapping locks of the same type. removed says whether some lock got
// weaker or went away, which may unblock a waiter.
func (fl *fileLocks) apply(r lockRequest) (held []heldLock, removed bool) {
	held = make([]heldLock, 0, len(fl.held)+2)
	add := r.typ != weftpb.LockType_LOCK_UNLOCK
	nl := heldLock{owner: r.owner, write: r.typ == weftpb.LockType_LOCK_WRITE, start: r.start, end: r.end, pid: r.pid}
	for _, l := range fl.held {
		if l.owner != r.owner || !l.overlaps(r.start, r.end) && !(add && l.write == nl.write && adjacent(l, nl)) {
			held = append(held, l)
			continue
		}
		if add && l.write == nl.write {
			// Same type, overlapping or touching: merge into the new
			// lock, nothing is released.
			nl.start, nl.end = min(nl.start, l.start), max(nl.end, l.end)
			continue
		}
		// A part of l inside the range goes away or changes type.
		if l.write || !add {
			removed = true
		}
		if l.start < r.start {
			left := l
			left.end = r.start - 1
			held = append(held, left)
		}
		if l.end > r.end {
			right := l
			right.start = r.end + 1
			held = append(held, right)
		}
	}
	if add {
		held = append(held, nl)
	}
	return held, removed
}

// adjacent reports whether a and b touch without overlapping.
func adjacent(a, b heldLock) bool {
	return a.end < maxLockEnd && a.end+1 == b.start || b.end < maxLockEnd && b.end+1 == a.start
}

func (fl *fileLocks) wake() {
	close(fl.released)
	fl.released = make(chan struct{})
}

// dropLocksLocked removes every lock of session id (being dropped), waking
// the waiters of their files.
func (s *Service) dropLocksLocked(id uint64, ss *session) {
	for ino := range ss.files {
		fl := s.mu.files[ino]
		if fl == nil {
			continue
		}
		kept := fl.held[:0]
		for _, l := range fl.held {
			if l.owner.session != id {
				kept = append(kept, l)
			}
		}
		if len(kept) < len(fl.held) {
			clear(fl.held[len(kept):])
			fl.held = kept
			fl.wake()
		}
		if len(fl.held) == 0 {
			delete(s.mu.files, ino)
		}
	}
}

func rangeOf(l heldLock) *weftpb.LockRange {
	typ := weftpb.LockType_LOCK_READ
	if l.write {
		typ = weftpb.LockType_LOCK_WRITE
	}
	return &weftpb.LockRange{Type: typ, Start: l.start, End: l.end, Pid: l.pid}
}
