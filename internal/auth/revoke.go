package auth

import (
	"sync"
	"time"
)

// Revocation. A chmod, chown, truncate or ACL change bumps the file's
// generation on its meta server, which then tells every store (ino, new
// generation, when). A store refuses a capability of that file with an
// older generation. The store's memory stays bounded:
//
//   - An entry can go MaxLifetime after its revocation: every capability
//     minted before it has expired by then (Verifier refuses a token whose
//     lifetime is longer than MaxLifetime).
//   - At most MaxEntries entries are kept (about 100 bytes each with the
//     map and the queue: 64 Ki entries take about 6 MiB). When the set is
//     full, the oldest entry goes and the floor rises to its revocation
//     time plus FloorSlack: every capability issued before the floor is
//     refused, which covers the dropped entry and costs the holders of old
//     capabilities one refetch each.
//   - A store starts with the floor at its start time, as it forgot
//     whatever was revoked before: capabilities minted before it started
//     are refetched once.
//
// A store that missed a revocation (down, or the push failed for longer
// than its retries) still refuses the old capabilities once they expire:
// MaxLifetime bounds the window.

// RevocationSet is a store's bounded memory of revoked generations.
type RevocationSet struct {
	maxEntries int
	lifetime   int64 // ns
	slack      int64 // ns

	mu struct {
		sync.RWMutex
		gen   map[uint64]revoked // by ino: capabilities below gen are revoked
		queue []queued           // in revocation order, for expiry and eviction
		floor int64              // capabilities issued before it are refused
	}
}

type revoked struct {
	gen uint64
	at  int64 // revocation time, meta server's clock (ns)
}

type queued struct {
	ino uint64
	at  int64
}

// Revocation limits.
const (
	// MaxLifetime is the longest lifetime of a capability (and so how long a
	// store that missed a revocation may accept an old one).
	MaxLifetime = 5 * time.Minute
	// DefaultLifetime is how long a minted capability lasts.
	DefaultLifetime = 2 * time.Minute
	// DefaultMaxRevocations bounds a store's revocation set.
	DefaultMaxRevocations = 64 << 10
	// FloorSlack widens a raised floor: a capability minted from a record
	// read just before the revocation committed carries an issue time a
	// little after the revocation time.
	FloorSlack = time.Second
)

// NewRevocationSet returns an empty set holding at most maxEntries (0:
// DefaultMaxRevocations) whose floor starts at startNs.
func NewRevocationSet(maxEntries int, startNs int64) *RevocationSet {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxRevocations
	}
	r := &RevocationSet{maxEntries: maxEntries, lifetime: int64(MaxLifetime), slack: int64(FloorSlack)}
	r.mu.gen = make(map[uint64]revoked)
	r.mu.floor = startNs
	return r
}

// Revoke records that capabilities of ino below generation gen are void
// since atNs (the meta server's clock). nowNs is the store's clock, to
// drop expired entries.
func (r *RevocationSet) Revoke(ino, gen uint64, atNs, nowNs int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked(nowNs)
	if cur, ok := r.mu.gen[ino]; ok && cur.gen >= gen {
		return
	}
	r.mu.gen[ino] = revoked{gen: gen, at: atNs}
	r.mu.queue = append(r.mu.queue, queued{ino: ino, at: atNs})
	for len(r.mu.gen) > r.maxEntries {
		r.evictOldestLocked()
	}
	if len(r.mu.queue) > 2*r.maxEntries {
		r.compactLocked()
	}
}

// expireLocked drops the entries whose revocation is older than the
// longest capability lifetime.
func (r *RevocationSet) expireLocked(nowNs int64) {
	for len(r.mu.queue) > 0 && r.mu.queue[0].at+r.lifetime < nowNs {
		q := r.mu.queue[0]
		r.mu.queue = r.mu.queue[1:]
		if e, ok := r.mu.gen[q.ino]; ok && e.at == q.at {
			delete(r.mu.gen, q.ino)
		}
	}
}

// evictOldestLocked drops the oldest live entry and raises the floor over it.
func (r *RevocationSet) evictOldestLocked() {
	for len(r.mu.queue) > 0 {
		q := r.mu.queue[0]
		r.mu.queue = r.mu.queue[1:]
		if e, ok := r.mu.gen[q.ino]; ok && e.at == q.at {
			delete(r.mu.gen, q.ino)
			r.mu.floor = max(r.mu.floor, q.at+r.slack)
			return
		}
	}
}

// compactLocked rebuilds the queue without the stale items that repeated
// revocations of the same inodes left.
func (r *RevocationSet) compactLocked() {
	q := make([]queued, 0, len(r.mu.gen))
	for _, x := range r.mu.queue {
		if e, ok := r.mu.gen[x.ino]; ok && e.at == x.at {
			q = append(q, x)
		}
	}
	r.mu.queue = q
}

// Check refuses c if it was revoked.
func (r *RevocationSet) Check(c Capability) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if c.IssuedNs < r.mu.floor {
		return refused(ReasonRevoked, "capability for inode %d issued before this store's revocation floor", c.Ino)
	}
	if e, ok := r.mu.gen[c.Ino]; ok && c.Generation < e.gen {
		return refused(ReasonRevoked, "capability for inode %d at generation %d, revoked at %d", c.Ino, c.Generation, e.gen)
	}
	return nil
}

// Len returns the number of entries (tests, metrics).
func (r *RevocationSet) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.mu.gen)
}

// Floor returns the issue time below which every capability is refused.
func (r *RevocationSet) Floor() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.mu.floor
}
