package fusefs

import (
	"context"
	"sync"

	"github.com/weftfs/weft/internal/core"
)

// One file under two names within one call. A rename looks up its source
// and then its target, and if both hold one inode the kernel returns
// success without asking the file system (a rename of a file onto
// itself). A file with one link is under one name at a time, so if a
// thread's lookup finds it under another name than the thread's previous
// lookup did, another mount moved it in between, and the earlier answer is
// stale: two mounts' renames of b/z to a/z both returned ok, the second
// mount's lookup of b/z having read the name before the first mount's
// rename landed (its lease refused while it owed a release, so it did not
// wait for the change) and its lookup of a/z after (TestLookupsOfOneFileUnderTwoNames).
// Such a second lookup answers ESTALE: the kernel walks the path again
// (LOOKUP_REVAL), and a rename then finds its source gone. The walk again
// looks up the same name, which is then no longer a move, so the kernel's
// one retry goes through; a stat or open of the new name after one of the
// old by the same thread costs one retry. A thread already in the kernel's
// retry of a request answered ESTALE (retry.go) is not answered ESTALE
// again: that would reach the caller.

// threadLookup is what a thread's last lookup found: a file with one link.
type threadLookup struct {
	ino, parent core.Ino
	name        string
}

// lastLookups are the threads' last lookups, by pid (the kernel's task
// id).
type lastLookups struct {
	mu sync.Mutex
	m  map[uint32]threadLookup
}

// found notes that the thread of ctx found file ino (one link) as name in
// parent, and reports whether its previous lookup found the same file
// under another name.
func (l *lastLookups) found(ctx context.Context, ino, parent core.Ino, name string) (moved bool) {
	pid, ok := callerPid(ctx)
	if !ok {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil || len(l.m) > 4096 {
		l.m = make(map[uint32]threadLookup) // threads that are gone
	}
	prev, had := l.m[pid]
	l.m[pid] = threadLookup{ino: ino, parent: parent, name: name}
	return had && prev.ino == ino && (prev.parent != parent || prev.name != name)
}

// other notes that the thread of ctx looked up something else: a
// directory, a link with several names, or a name that holds nothing.
func (l *lastLookups) other(ctx context.Context) {
	pid, ok := callerPid(ctx)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, pid)
}
