package meta

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/proto/weftpb"
)

// Moving partitions. A split (split.go) holds its directory's stripe only
// to read what moves and to commit: while the new partitions are installed
// on their servers, the names that move are marked here, in memory, and
// the rest of the directory is served as usual (GIGA+ keeps serving the
// half that stays). An operation that would write a moving name waits,
// without holding a lock, until the split commits or fails, then runs
// again: after a commit the name belongs to another server (the client is
// answered WrongServer with the new bitmap, or a cross-server txn goes
// there), after a failure it is still here.
//
// The moving entries are frozen: every write of an entry reads it first
// (txn.entry, or PeerGet for another server's txn) under the directory's
// stripe, and the mark is set and cleared under that stripe too. So reads
// without a lock (lookups, stat, readdir) need not wait: what they see of
// a moving name is what the split copies, and a readdir that crosses the
// commit resumes on every partition at its cookie as for any split.
//
// Another server's txn cannot wait here while it holds this server's
// stripe (the split's commit needs it): PeerGet answers it errMoving, and
// its coordinator releases everything and tries again a little later.

// movingSet is the partitions of directories this server is splitting now.
type movingSet struct {
	mu struct {
		sync.Mutex
		dirs map[core.Ino]*movingPart
	}
	// active is len(mu.dirs): most operations find it zero and skip the
	// mutex.
	active atomic.Int32
	// waits counts the operations that found their name moving.
	waits atomic.Uint64
}

// movingPart is partition part of a directory, splitting from radix from
// to radix to: the names it holds at from and not at to are moving.
type movingPart struct {
	part, from, to uint32
	done           chan struct{} // closed when the split commits or fails
}

func (m *movingPart) moves(h uint64) bool {
	return core.PartitionHolds(m.part, m.from, h) && !core.PartitionHolds(m.part, m.to, h)
}

// begin marks partition part of dir as splitting from radix from to to.
// The caller holds dir's stripe.
func (m *movingSet) begin(dir core.Ino, part, from, to uint32) *movingPart {
	mp := &movingPart{part: part, from: from, to: to, done: make(chan struct{})}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.dirs == nil {
		m.mu.dirs = map[core.Ino]*movingPart{}
	}
	if m.mu.dirs[dir] == nil {
		m.active.Add(1)
	}
	m.mu.dirs[dir] = mp
	return mp
}

// end clears the mark and wakes the waiters; a second call does nothing.
func (m *movingSet) end(dir core.Ino, mp *movingPart) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.dirs[dir] != mp {
		return
	}
	delete(m.mu.dirs, dir)
	m.active.Add(-1)
	close(mp.done)
}

// moving returns a channel closed when the split that moves the names of
// partition part of dir with hash h ends, or nil if no split moves them.
func (m *movingSet) moving(dir core.Ino, part uint32, h uint64) <-chan struct{} {
	if m.active.Load() == 0 {
		// The caller holds dir's stripe (or reads without a lock, as a
		// view may): a mark set meanwhile is ordered by the stripe.
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.mu.dirs[dir]
	if mp == nil || mp.part != part || !mp.moves(h) {
		return nil
	}
	m.waits.Add(1)
	return mp.done
}

// movingError sends a local txn that met a moving name out of its locks to
// wait for the split (update, distUpdate).
type movingError struct{ done <-chan struct{} }

func (e *movingError) Error() string { return "meta: partition moving" }

// Unwrap gives the error a kind in case it ever escapes: a busy resource.
func (e *movingError) Unwrap() error { return errMoving }

// errMoving is PeerGet's and PeerApply's answer for a name whose partition
// is being split here: the message is exactly "partition moving" (as
// WrongServer's are exact), and the caller tries again without its locks.
var errMoving = &errs.Error{Kind: errs.Busy, Msg: "partition moving"}

// isMoving reports whether err says a name's partition is being split,
// here (movingError) or on another server (errMoving over the wire).
func isMoving(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if e, ok := err.(*errs.Error); ok && e.Kind == errs.Busy && e.Msg == errMoving.Msg {
			return true
		}
	}
	return false
}

// Retrying a txn that another server turned away while it splits: the
// first wait is short (a split's commit is one synced batch once its
// installs are in), later ones back off.
const (
	moveRetryFirst = time.Millisecond
	moveRetryMax   = 50 * time.Millisecond
)

// awaitMove waits, holding no lock, for the split that err names to end:
// on its channel for a split here, a backoff for another server's (the
// n-th retry). It gives up when the caller does or the server closes.
func (s *Server) awaitMove(ctx context.Context, op string, err error, n int) error {
	var done <-chan struct{}
	var retry <-chan time.Time
	if mv := (*movingError)(nil); errors.As(err, &mv) {
		done = mv.done
	} else {
		t := time.NewTimer(min(moveRetryFirst<<min(n, 10), moveRetryMax))
		defer t.Stop()
		retry = t.C
	}
	select {
	case <-done:
		return nil
	case <-retry:
		return nil
	case <-ctx.Done():
		return ctxError(op, ctx.Err())
	case <-s.giga.ctx.Done():
		return errs.New(errs.Unavailable, op, "meta server is closing")
	}
}

// refuseMoving refuses remote writes of entries that a split here is
// copying away. A coordinator that holds its locks never sends one (its
// PeerGet of the name was answered errMoving, and no split can mark names
// while it holds their stripe); a replay that found no locks here is told
// to come back after the split.
func (s *Server) refuseMoving(ops []*weftpb.KeyOp) error {
	for _, o := range ops {
		dir, part, h, _, ok := layout.EntryKeyParts(o.Key)
		if !ok {
			continue
		}
		if s.giga.moving.moving(dir, part, h) != nil {
			return errMoving
		}
	}
	return nil
}
