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
//
// Unless the ESTALE went to the kernel's revalidation of a dentry it
// holds: the kernel then drops the dentry and looks the name up afresh,
// in the same call, and that lookup found the file under the new name with
// no ESTALE (the thread was in a retry by then): a rename of z to x saw both
// names holding one inode, z's dentry still from its own lookup, and
// returned success without a RENAME, another mount having renamed z to x
// in between (make linz run 29 of the twelfth session: rename(a/z a/x) ->
// ok on two mounts, the log: LOOKUP z, LOOKUP x ESTALE, LOOKUP x OK, no
// RENAME). So when the name held another file in go-fuse's tree (the
// kernel's dentry, being revalidated), the thread's next lookup, if it is
// of the same name and finds the same file, is answered ESTALE too, once:
// the call fails with ESTALE, and the kernel's retry walks the path from
// its start (a directory's lookup comes first and clears the mark) and
// finds z gone (TestRevalidationOfNameThatMovedHere).

// threadLookup is what a thread's last lookup found: a file with one link.
type threadLookup struct {
	ino, parent core.Ino
	name        string
	// again: answered ESTALE as a revalidation; the fresh lookup that
	// follows, of the same name and file, is answered ESTALE too.
	again bool
}

// lastLookups are the threads' last lookups, by pid (the kernel's task
// id).
type lastLookups struct {
	mu sync.Mutex
	m  map[uint32]threadLookup
}

// found notes that the thread of ctx found file ino (one link) as name in
// parent, and reports whether its previous lookup found the same file
// under another name (moved), or was this lookup's, answered ESTALE as a
// revalidation (again).
func (l *lastLookups) found(ctx context.Context, ino, parent core.Ino, name string) (moved, again bool) {
	pid, ok := callerPid(ctx)
	if !ok {
		return false, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil || len(l.m) > 4096 {
		l.m = make(map[uint32]threadLookup) // threads that are gone
	}
	prev, had := l.m[pid]
	l.m[pid] = threadLookup{ino: ino, parent: parent, name: name}
	if !had || prev.ino != ino {
		return false, false
	}
	if prev.parent != parent || prev.name != name {
		return true, false
	}
	return false, prev.again
}

// answeredStale notes that the thread's last lookup (found: moved) was
// answered ESTALE; revalidation says the kernel held a dentry of that
// name for another file, which that lookup was revalidating.
func (l *lastLookups) answeredStale(ctx context.Context, revalidation bool) {
	pid, ok := callerPid(ctx)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.m[pid]; ok {
		r.again = revalidation
		l.m[pid] = r
	}
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
