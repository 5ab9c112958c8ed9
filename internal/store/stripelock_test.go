package store

import (
	"testing"
	"time"
)

// TestStripeLocks: one owner at a time, renewals by the holder, a lock
// that lapses after its term, nothing granted in the grace after a start,
// and a bounded table.
func TestStripeLocks(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newStripeLocks(func() time.Time { return now })
	k := ChunkKey{Ino: 7, Index: 1 << 62}
	if _, ok, _ := l.tryLock(k, 1, 1, time.Second); ok {
		t.Fatal("granted in the grace after the store started")
	}
	now = now.Add(stripeLockGrace)
	if _, ok, _ := l.tryLock(k, 1, 1, time.Second); !ok {
		t.Fatal("a free lock was refused")
	}
	freed, ok, _ := l.tryLock(k, 2, 2, time.Second)
	if ok || freed == nil {
		t.Fatalf("a held lock was granted to another owner (ok %v)", ok)
	}
	now = now.Add(900 * time.Millisecond)
	if _, ok, renewed := l.tryLock(k, 1, 1, time.Second); !ok || !renewed {
		t.Fatalf("the holder's renewal: granted %v, renewed %v", ok, renewed)
	}
	now = now.Add(900 * time.Millisecond) // within the renewed term
	if _, ok, _ := l.tryLock(k, 2, 2, time.Second); ok {
		t.Fatal("granted within the holder's renewed term")
	}
	l.unlock(k, 2, 2) // not the holder: nothing happens
	if _, ok, _ := l.tryLock(k, 2, 2, time.Second); ok {
		t.Fatal("another owner's unlock released the lock")
	}
	l.unlock(k, 1, 0) // an older grant's release, overtaken by the renewal
	if _, ok, _ := l.tryLock(k, 2, 2, time.Second); ok {
		t.Fatal("a release of an older grant freed the lock")
	}
	l.unlock(k, 1, 1)
	select {
	case <-freed:
	default:
		t.Fatal("the waiter was not told of the release")
	}
	if _, ok, _ := l.tryLock(k, 2, 2, time.Second); !ok {
		t.Fatal("a released lock was refused")
	}
	now = now.Add(time.Second) // owner 2 stalled: its lock lapses
	if _, ok, renewed := l.tryLock(k, 2, 5, time.Second); !ok || renewed {
		t.Fatalf("a lapsed lock asked for again by its old owner: granted %v, renewed %v (want a fresh grant)", ok, renewed)
	}
	now = now.Add(time.Second) // owner 2 died: its lock lapses
	if _, ok, _ := l.tryLock(k, 3, 3, time.Second); !ok {
		t.Fatal("a lapsed lock was refused")
	}

	for i := range maxStripeLocks {
		l.tryLock(ChunkKey{Ino: 8, Index: uint64(i)}, 4, 4, time.Second)
	}
	if n := l.count(); n != maxStripeLocks {
		t.Fatalf("%d locks held, want the bound %d", n, maxStripeLocks)
	}
	if _, ok, _ := l.tryLock(ChunkKey{Ino: 9}, 4, 4, time.Second); ok {
		t.Fatal("a lock past the bound was granted")
	}
	now = now.Add(time.Second) // every lock lapsed: the next one sweeps them
	if _, ok, _ := l.tryLock(ChunkKey{Ino: 9}, 4, 4, time.Second); !ok || l.count() != 1 {
		t.Fatalf("after the locks lapsed: granted %v, %d held", ok, l.count())
	}
}
