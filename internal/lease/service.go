package lease

import (
	"log/slog"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/core"
)

const (
	// DefaultTerm is how long a lease lasts. Two seconds: it bounds how
	// long a writer waits for a holder that died or stopped answering, and
	// how long a restarted server refuses changes (Grace); the cost is one
	// acquire per key and term for a client that keeps using a key (the
	// kernel's cache of an unshared file is refreshed every ~2 s).
	// IndexFS uses one second with no recalls at all.
	DefaultTerm = 2 * time.Second
	// DefaultSessionTTL is how long a session lives without hearing from
	// its client. Clients send a keepalive every SessionTTL/5.
	DefaultSessionTTL = 10 * time.Second
)

// Key names what a lease covers on this server: an inode number (doc.go).
type Key uint64

// Mode is a lease's kind.
type Mode uint8

const (
	Read  Mode = 1 // shared
	Write Mode = 2 // exclusive
)

// Holder is where recalls of a session's leases go (its connection).
// Holders are compared with ==: a change skips the leases of the sessions
// whose holder is the requester's.
type Holder interface {
	// Recall asks the holder to drop keys and release them; seqs are
	// the grants recalled (Grant.Seq), one per key. It must not block:
	// the service calls it under no lock but in the path of a waiting
	// change.
	Recall(session uint64, keys []Key, seqs []uint64)
}

// Config configures a Service.
type Config struct {
	Now        func() time.Time // default time.Now
	Log        *slog.Logger     // default: discard
	Term       time.Duration    // default DefaultTerm
	SessionTTL time.Duration    // default DefaultSessionTTL
	// Grace is how long after New no write lease is granted and no change
	// goes through; default Term, negative none (a server whose clients
	// cannot hold leases from before, tests).
	Grace   time.Duration
	Metrics *Metrics // default: none
}

// Service holds one meta server's sessions, leases and file locks.
type Service struct {
	now        func() time.Time
	log        *slog.Logger
	term       time.Duration
	ttl        time.Duration
	graceEnd   time.Time
	lockLimit  int // locks per session (maxLocksPerSession; tests lower it)
	metrics    *Metrics
	sweepEvery time.Duration

	mu struct {
		sync.Mutex
		sessions map[uint64]*session
		files    map[core.Ino]*fileLocks
		leases   map[Key]*keyLeases
		held     int // grants in leases
		// changed is closed (and replaced) whenever a lease goes away or
		// a change ends: acquires and changes waiting for it try again.
		changed   chan struct{}
		lastSweep time.Time
		seq       uint64 // of the last grant
		// since the start, for weft status
		granted, recalled, expired uint64
	}
}

// session is what the service knows of one client's session.
type session struct {
	expires time.Time
	holder  Holder // nil until the session acquires a lease over a connection
	leases  map[Key]struct{}
	// owed counts the session's grants recalled and not yet released or
	// expired: a change may be waiting for this session.
	owed  int
	files map[core.Ino]struct{} // files where the session may hold locks
	locks int                   // locks held
}

// New returns a service with no sessions.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Term <= 0 {
		cfg.Term = DefaultTerm
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Grace == 0 {
		cfg.Grace = cfg.Term
	}
	s := &Service{now: cfg.Now, log: cfg.Log, term: cfg.Term, ttl: cfg.SessionTTL,
		lockLimit: maxLocksPerSession, metrics: cfg.Metrics, sweepEvery: cfg.Term}
	start := cfg.Now()
	s.graceEnd = start
	if cfg.Grace > 0 {
		s.graceEnd = start.Add(cfg.Grace)
	}
	s.mu.sessions = make(map[uint64]*session)
	s.mu.files = make(map[core.Ino]*fileLocks)
	s.mu.leases = make(map[Key]*keyLeases)
	s.mu.changed = make(chan struct{})
	s.mu.lastSweep = start
	if s.metrics != nil {
		s.metrics.held = s.Held
	}
	return s
}

// Term is how long a lease lasts.
func (s *Service) Term() time.Duration { return s.term }

// SessionTTL is how long a silent session lives.
func (s *Service) SessionTTL() time.Duration { return s.ttl }

// AcquiredOver reports whether session id took its leases here over
// holder h: a session that never acquired one here (an edge's client,
// whose leases the edge grants) did not.
func (s *Service) AcquiredOver(id uint64, h Holder) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.mu.sessions[id]
	return h != nil && ss != nil && ss.holder == h
}

// Held returns how many leases are held.
func (s *Service) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.held
}

// touchLocked extends a session's life, creating it if needed.
func (s *Service) touchLocked(id uint64, now time.Time) *session {
	ss := s.mu.sessions[id]
	if ss == nil {
		ss = &session{leases: make(map[Key]struct{}), files: make(map[core.Ino]struct{})}
		s.mu.sessions[id] = ss
	}
	ss.expires = now.Add(s.ttl)
	return ss
}

// expireLocked drops the sessions whose time is up, with their locks and
// leases, and (once a term) the leases whose term ended.
func (s *Service) expireLocked(now time.Time) {
	for id, ss := range s.mu.sessions {
		if !now.Before(ss.expires) {
			s.dropSessionLocked(id)
		}
	}
	if now.Sub(s.mu.lastSweep) >= s.sweepEvery {
		s.mu.lastSweep = now
		for k, kl := range s.mu.leases {
			s.expireKeyLocked(k, kl, now)
		}
	}
}

// dropSessionLocked removes a session, every lock and every lease it holds.
func (s *Service) dropSessionLocked(id uint64) {
	ss := s.mu.sessions[id]
	if ss == nil {
		return
	}
	delete(s.mu.sessions, id)
	s.dropLocksLocked(id, ss)
	for k := range ss.leases {
		if kl := s.mu.leases[k]; kl != nil {
			s.dropGrantLocked(k, kl, id)
		}
	}
}

// wakeLocked wakes everyone waiting for a lease to go or a change to end.
func (s *Service) wakeLocked() {
	close(s.mu.changed)
	s.mu.changed = make(chan struct{})
}
