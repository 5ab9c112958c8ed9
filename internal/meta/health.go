package meta

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/errs"
)

// What a meta server does when its storage fails.
//
// Pebble does not survive a failed WAL write: the failing commits get the
// error from SyncWait, but the WAL writer keeps the error, and the next
// commit that fills a WAL block panics inside pebble's commit pipeline while
// holding its commit mutex, so that every later commit (and DB.Close) blocks
// for ever. A commit whose memtable cannot rotate (no space for the next WAL)
// goes to Logger.Fatalf. And a failed commit is already applied to the
// memtable, so readers see it although its writer got an error.
//
// So the server stops writing at the first storage error and never calls
// pebble's commit pipeline again:
//
//   - Every call into the commit pipeline (apply, not the fsync wait) runs
//     under health's mutex, the gate, and recovers pebble's panics. A commit
//     that fails or panics marks the server failed before the gate opens, so
//     no other goroutine can enter a pipeline that a panic left locked.
//     Holding the gate only across the apply keeps group commit: the fsync
//     is awaited outside it, as before.
//   - A failed server refuses every write at once with the failure's kind
//     (errs.NoSpace for ENOSPC and EDQUOT, errs.IO otherwise) and a message
//     that says a restart is needed: even after space comes back, the store's
//     state is known only from disk.
//   - It then reopens its store read-only from disk (degrade), so reads are
//     served from what the WAL holds: the applied-but-failed commits, whose
//     writers got an error, are not served. Reads wait for the reopen (at
//     most degradeWait). If pebble panicked inside its pipeline (wedged) it
//     cannot be closed, so the server refuses reads too.
//   - Close never blocks on a wedged pebble: it leaves it open.
//   - The server hears of a failed write from the file itself (diskwatch.go),
//     not only from pebble. In async mode pebble learns late: its WAL writer
//     flushes full blocks in the background, and if the memtable fills first,
//     the WAL rotation meets the error and pebble aborts the process (a panic
//     with its mutex released, which no recover catches). Hearing of the
//     first failed flush closes the gate at once, so this is left only for a
//     failure that starts within one WAL block (32 KiB) of a memtable's end.
//     The restarted server then refuses to open on a full disk (below).
//
// A restart of a server whose disk is still full fails in Open with one
// error (a synced probe write, and pebble's own errors on open), instead of
// looping on background errors.

// degradeWait bounds how long a read waits for the read-only reopen.
const degradeWait = 10 * time.Second

// failure is why the server stopped writing.
type failure struct {
	kind     errs.Kind
	cause    error
	degraded chan struct{} // closed when degrade is done
}

// gated runs fn, a call into pebble's commit pipeline, under the gate. An
// error or a panic from fn marks the server failed.
func (s *Server) gated(op string, fn func() error) error {
	s.health.Lock()
	defer s.health.Unlock()
	if f := s.failed.Load(); f != nil {
		return s.refusal(op, f)
	}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				s.wedged.Store(true)
				if e, ok := r.(error); ok {
					err = fmt.Errorf("pebble panicked: %w", e)
				} else {
					err = fmt.Errorf("pebble panicked: %v", r)
				}
			}
		}()
		return fn()
	}()
	if err != nil {
		return s.storageFailed(op, err)
	}
	return nil
}

// commit applies b through the gate and, if sync, waits for its WAL fsync
// outside it.
func (s *Server) commit(op string, b *pebble.Batch, sync bool) error {
	// Not a client's request (a peer's writes, a split, a replay): every
	// lease on what b changes is recalled, and the wait is bounded by the
	// term.
	end, err := s.changeLeasesOf(b)
	return s.applyLeased(op, b, sync, end, err)
}

// applyLeased applies b once its leases are recalled (end, err: what
// changeLeases returned), lets them be granted again, and waits for the
// sync.
func (s *Server) applyLeased(op string, b *pebble.Batch, sync bool, end func(), err error) error {
	if err != nil {
		return err
	}
	err = s.apply(op, b, sync)
	end()
	if err != nil {
		return err
	}
	return s.syncWait(op, b, sync)
}

// apply applies b to the store without waiting for its fsync; syncWait
// waits for it. Applied, b is visible to readers.
func (s *Server) apply(op string, b *pebble.Batch, sync bool) error {
	if b.Empty() {
		return nil
	}
	// The index is derived outside the gate, which serialises every
	// commit of the server: the caller's locks keep the keys b writes.
	if err := s.index(b); err != nil {
		return err
	}
	return s.gated(op, func() error {
		if sync {
			return s.db.ApplyNoSyncWait(b, pebble.Sync)
		}
		return b.Commit(pebble.NoSync)
	})
}

func (s *Server) syncWait(op string, b *pebble.Batch, sync bool) error {
	if !sync || b.Empty() {
		return nil
	}
	if err := b.SyncWait(); err != nil {
		return s.storageFailed(op, err)
	}
	return nil
}

// setSync writes one key and waits for its fsync.
func (s *Server) setSync(op string, key, value []byte) error {
	b := s.db.NewBatch()
	defer s.release(b)
	b.Set(key, value, nil)
	return s.commit(op, b, true)
}

// syncWAL forces every commit applied so far to disk.
func (s *Server) syncWAL(op string) error {
	b := s.db.NewBatch()
	defer s.release(b)
	if err := b.LogData(nil, nil); err != nil {
		return errs.Wrap(errs.IO, op, "", err)
	}
	return s.commit(op, b, true)
}

// release closes a batch unless pebble panicked with batches in its
// pipeline: a batch stuck there must not go back to pebble's pool.
func (s *Server) release(b *pebble.Batch) {
	s.hints.drop(b)
	if !s.wedged.Load() {
		b.Close()
	}
}

// storageFailed marks the server failed by err, if it is not already, and
// returns err with its kind. The first failure logs one line and starts the
// read-only reopen.
func (s *Server) storageFailed(op string, err error) error {
	kind := storageKind(err)
	f := &failure{kind: kind, cause: err, degraded: make(chan struct{})}
	if s.failed.CompareAndSwap(nil, f) {
		if !s.serving.Load() {
			return errs.Wrap(kind, op, "", err) // Open fails with it
		}
		s.log.Error("meta server storage failed: refusing writes until restarted", "id", s.cfg.ID, "dir", s.cfg.Dir, "op", op, "err", err)
		go s.degrade(f)
	}
	return errs.Wrap(kind, op, "", err)
}

// storageKind is the kind of a storage error: NoSpace for a full disk or
// quota, IO otherwise.
func storageKind(err error) errs.Kind {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return errs.NoSpace
	}
	return errs.IO
}

// isStorageError reports whether a background error of pebble means the
// disk failed (rather than, say, a cancelled compaction).
func isStorageError(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT, syscall.EIO, syscall.EROFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (s *Server) refusal(op string, f *failure) error {
	return errs.New(f.kind, op, "meta server %d refuses writes: its store failed (%v); restart it once the disk is fixed", s.cfg.ID, f.cause)
}

// readable waits until a failed server serves reads from disk; it returns an
// error if it cannot. Call without closeMu.
func (s *Server) readable(op string) error {
	f := s.failed.Load()
	if f == nil {
		return nil
	}
	t := time.NewTimer(degradeWait)
	defer t.Stop()
	select {
	case <-f.degraded:
	case <-t.C:
		return errs.New(f.kind, op, "meta server %d: its store failed (%v) and is not yet reopened for reads", s.cfg.ID, f.cause)
	}
	if s.wedged.Load() || s.unreadable.Load() {
		return errs.New(f.kind, op, "meta server %d refuses reads and writes: its store failed (%v); restart it once the disk is fixed", s.cfg.ID, f.cause)
	}
	return nil
}

// degrade reopens the store read-only from disk once the operations in
// progress are done (they are: every commit now fails at once).
func (s *Server) degrade(f *failure) {
	defer close(f.degraded)
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return
	}
	if s.wedged.Load() {
		s.unreadable.Store(true)
		s.log.Error("meta server store is wedged by the failure: refusing reads too", "id", s.cfg.ID)
		return
	}
	if s.syncStop != nil {
		close(s.syncStop)
		<-s.syncDone
		s.syncStop = nil
	}
	if err := s.db.Close(); err != nil {
		s.log.Debug("meta: close of the failed store", "err", err)
	}
	db, err := openPebble(s.cfg.Dir, storeOptions{fs: s.cfg.FS, log: s.log, now: s.cfg.Now, readOnly: true})
	if err != nil {
		s.unreadable.Store(true)
		s.db = nil
		s.log.Error("meta server cannot reopen its failed store for reads: refusing reads too", "id", s.cfg.ID, "err", err)
		return
	}
	s.db = db
	s.log.Warn("meta server serves reads from the synced store, refuses writes", "id", s.cfg.ID)
}
