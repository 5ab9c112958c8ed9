package fusefs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
)

// The kernel's one retry after ESTALE. A path call (stat, chmod, open)
// that the mount answers ESTALE is retried once by the kernel, which walks
// the path again with LOOKUP_REVAL, asking the server for every name. If
// the name changes again between that lookup and the retried request (a
// busy directory shared by mounts), a second ESTALE reaches the caller. But
// the retried request then has an answer that is valid: the lookup, made
// within the same call, found the name holding the node, and the mount
// knows which name it was. So the mount remembers, per calling thread, an
// ESTALE it answered and the lookup that followed, and a retried request
// of the node that lookup returned:
//   - getattr of a file gone by then answers what the lookup said;
//   - setattr of a name that holds another file by then changes what the
//     name holds then (the call takes effect at that moment, as a local
//     chmod of a name being renamed over does);
//   - open of a file another mount moved by then opens it where it is
//     (client.OpenMoved: the inode the walk found, as a local open); of a
//     file removed by then fails with ENOENT if the name is gone too (it
//     was removed during the call), else ESTALE: the name held a file
//     throughout the call, so ENOENT would be a wrong answer.
// The thread is the caller's pid in the request (the kernel's task id):
// the retry comes from the thread of the call, with its lookups first.
//
// What the mount remembers serves that call only: it ends with the retried
// request (one of the kind answered ESTALE; an OPEN or SETATTR, which end
// their call; any that fails), or when the thread looks up again after
// its walk reached the node (a new walk). It used to stay until the
// thread's next ESTALE: a later call that reached the node through the
// kernel's cached dentry, without a lookup, was taken for the retry, and
// a stat got the attributes the node had at the old lookup, a chmod went
// to the name the old walk had found (TestRetryEndsWithItsCall).

// retryWalk is what the mount knows of a thread's retry after ESTALE.
type retryWalk struct {
	op   string // the request answered ESTALE: "getattr", "setattr", "open"
	node *Node  // the node the thread's lookup returned since (nil: none yet)
	// answered: the retry's GETATTR of a "getattr" walk was answered;
	// an OPEN may still follow (the GETATTR was an open's permission
	// check), nothing else is part of the call.
	answered bool
	parent   core.Ino
	name     string
	// lookingIn is the directory a lookup of the thread is in (0:
	// none): the walk's node there is not known yet.
	lookingIn core.Ino
	// stepped is when the walk last found its node or had its GETATTR
	// answered: an OPEN that follows comes right after.
	stepped time.Time
}

// retries are the threads the mount answered ESTALE, by pid.
type retries struct {
	mu sync.Mutex
	m  map[uint32]*retryWalk
	// getattrHold and openHold are how long after its last step a walk
	// after a GETATTR's or an OPEN's ESTALE holds recalls (0:
	// getattrWalkHold, retryOpenHold; tests set them).
	getattrHold, openHold time.Duration
	// changed is closed when a walk ends or moves on (nil: nobody
	// waits for that).
	changed chan struct{}
}

// endLocked ends the walk of pid.
func (r *retries) endLocked(pid uint32) {
	if _, ok := r.m[pid]; !ok {
		return
	}
	delete(r.m, pid)
	r.changedLocked()
}

func (r *retries) changedLocked() {
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

func callerPid(ctx context.Context) (uint32, bool) {
	c, ok := fuse.FromContext(ctx)
	if !ok || c.Pid == 0 {
		return 0, false
	}
	return c.Pid, true
}

// estale notes that the request op of ctx is answered ESTALE.
func (r *retries) estale(ctx context.Context, op string) {
	pid, ok := callerPid(ctx)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[uint32]*retryWalk)
	}
	if len(r.m) > 4096 {
		clear(r.m) // threads that never retried (their walk failed)
	}
	r.m[pid] = &retryWalk{op: op}
	r.changedLocked()
}

// forget ends the retry of the thread of ctx (its retried request failed:
// the call is over).
func (r *retries) forget(ctx context.Context) {
	pid, ok := callerPid(ctx)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endLocked(pid)
}

// notFound notes a lookup by the thread of ctx that found nothing: once
// the retry's walk had reached its node, it is a later step (a rename's
// lookup of its target), and the retry is over. A rename's retry left it
// standing, and the thread's next stat of the node was taken for the
// retry and answered by the name the retry had found, gone by then
// (TestLookupsOfOneFileUnderTwoNames).
func (r *retries) notFound(ctx context.Context) {
	pid, ok := callerPid(ctx)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.m[pid]; w != nil && w.node != nil {
		r.endLocked(pid)
	}
}

// pending reports whether the thread of ctx is in the kernel's retry of a
// request the mount answered ESTALE: the walk of the retry uses
// LOOKUP_REVAL, and a second ESTALE would reach the caller.
func (r *retries) pending(ctx context.Context) bool {
	pid, ok := callerPid(ctx)
	if !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[pid] != nil
}

// lookedUp notes a lookup of name in parent that returned node, for a
// thread that is retrying.
func (r *retries) lookedUp(ctx context.Context, parent core.Ino, name string, node *Node) {
	pid, ok := callerPid(ctx)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.m[pid]; w != nil {
		if w.node != nil && w.parent == parent && w.name == name {
			// The walk looked its last name up again (LOOKUP_REVAL
			// revalidates the dentry its first lookup made):
			// still the retry's (TestRetryWalkLooksUpTheNameTwice).
			w.node, w.stepped = node, time.Now()
			r.changedLocked()
			return
		}
		if w.node != nil {
			// The retry's walk had reached its node: this is a
			// later walk, of another call.
			r.endLocked(pid)
			return
		}
		if node.IsDir() || node.Mode()&syscall.S_IFMT == syscall.S_IFLNK {
			// The walk goes on below it (or through the link); a
			// thread's walk after ESTALE ends at the node it
			// retries.
			w.node = nil
			return
		}
		w.node, w.parent, w.name, w.stepped = node, parent, name, time.Now()
	}
}

// looking notes that the thread of ctx, if it is retrying, looks a name
// up in dir until the returned function is called. A recall of dir that
// comes between the server's answer and the walk noting the node it found
// waits for the retried OPEN too (openingIn): it released at once, the
// other mount's change replaced the name, and the OPEN got a second
// ESTALE (TestOpenRetryHoldsTheName/during-lookup).
func (r *retries) looking(ctx context.Context, dir core.Ino) (done func()) {
	pid, ok := callerPid(ctx)
	if !ok {
		return func() {}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.m[pid]
	if w == nil {
		return func() {}
	}
	w.lookingIn = dir
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if w.lookingIn == dir {
			w.lookingIn = 0
			r.changedLocked()
		}
	}
}

// retry returns the walk of the thread of ctx if its request op about n
// is the retry, through a fresh lookup of n, of one answered ESTALE. The
// retry may make several requests about n (an open's GETATTR, then its
// OPEN), and the walk before it GETATTRs the directories it passes: what
// the mount remembers ends with a request of the kind answered ESTALE, or
// an OPEN or SETATTR (they end their call). A retried OPEN's walk ends
// when the handler calls done (openEnds), not before: recalls of the
// directory wait for it until then.
func (r *retries) retry(ctx context.Context, n *Node, op string) (retryWalk, bool) {
	pid, ok := callerPid(ctx)
	if !ok {
		return retryWalk{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.m[pid]
	if w == nil || w.node != n {
		return retryWalk{}, false
	}
	switch {
	case w.answered && op != "open":
		// A later call of the thread, through a dentry the kernel
		// kept: no retry.
		r.endLocked(pid)
		return retryWalk{}, false
	case op == "getattr" && w.op == "getattr":
		// A stat's retry ends here; an open's permission check
		// goes on with the OPEN (TestOpenRetryAfterItsPermissionCheck).
		w.answered, w.stepped = true, time.Now()
	case op != "open" && (op == w.op || op != "getattr"):
		r.endLocked(pid)
	}
	return *w, true
}

// The retry of an open and other mounts' changes. The retried OPEN opens
// the file the retry's lookup found, wherever it is by then; if another
// mount removed it in between and the name holds another file, the OPEN
// can only fail, and ESTALE reached the caller a second time
// (TestOpenRetryHoldsTheName). A local open pins the inode its walk found.
// Here the lookup took a read lease on the name's directory, so the change
// that would remove the file recalls it first: the recall waits, at most
// retryOpenHold, for the retried OPEN whose lookup went through the
// directory, and the change lands after it.

// retryOpenHold bounds how long a recall waits for a retried open: the
// kernel sends the OPEN right after the lookup (and a GETATTR), within a
// millisecond on an idle machine.
const retryOpenHold = 100 * time.Millisecond

// openEnds ends the retry of the thread of ctx once its OPEN is answered.
func (r *retries) openEnds(ctx context.Context) { r.forget(ctx) }

// getattrWalkHold is how long a walk after a GETATTR's ESTALE holds
// recalls after its last step. The GETATTR may have been an open's
// permission check (with default_permissions, when the attributes timed
// out), whose retried OPEN comes right after the retry's lookup or
// GETATTR; or a stat's, whose retry sends nothing more once its lookup
// gave it the attributes, and then a hold until retryOpenHold stalled the
// other mount's change for nothing (make linz, thirteenth session: 211
// changes waited 100 ms in one minute).
const getattrWalkHold = 20 * time.Millisecond

// openingIn reports whether a retried open's lookup went through one of
// dirs and its OPEN has not been answered, and a channel closed when that
// may have changed; for a walk that may be an open's only for a while,
// until when. A walk after a GETATTR's ESTALE may be an open's
// (TestOpenRetryHoldsTheName/getattr) for getattrWalkHold after its last
// step; one after an OPEN's for retryOpenHold after it found its node (a
// walk whose call ended without the OPEN, its lookup having found
// nothing, stays until the thread's next lookups: it held every recall of
// the directory of the file a later call of the thread found, each for
// retryOpenHold, for as long as the thread made no other lookup; make
// linz, thirteenth session, run 35: 67 recalls in a row). A lookup of the
// walk in flight in one of dirs holds too, once the server answered it
// (TestOpenRetryHoldsTheName/during-lookup).
func (r *retries) openingIn(dirs map[core.Ino]bool) (busy bool, changed <-chan struct{}, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hold, openHold := r.getattrHold, r.openHold
	if hold == 0 {
		hold = getattrWalkHold
	}
	if openHold == 0 {
		openHold = retryOpenHold
	}
	now := time.Now()
	for _, w := range r.m {
		if dirs[w.lookingIn] && (w.op == "open" || w.op == "getattr") {
			busy = true
			continue
		}
		if w.node == nil || !dirs[w.parent] {
			continue
		}
		var window time.Duration
		switch w.op {
		case "open":
			window = openHold
		case "getattr":
			window = hold
		}
		if end := w.stepped.Add(window); now.Before(end) {
			busy = true
			if until.IsZero() || end.Before(until) {
				until = end
			}
		}
	}
	if !busy {
		return false, nil, time.Time{}
	}
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return true, r.changed, until
}

// waitOpens waits, at most retryOpenHold, until no retried open's lookup
// went through a directory of keys and its OPEN is not yet answered.
func (fsys *fileSystem) waitOpens(keys []client.LeaseKey) {
	dirs := make(map[core.Ino]bool, len(keys))
	for _, k := range keys {
		dirs[k.Ino] = true
	}
	t := time.NewTimer(retryOpenHold)
	defer t.Stop()
	for {
		busy, changed, until := fsys.retries.openingIn(dirs)
		if !busy {
			return
		}
		if h := fsys.hooks.heldRecall.Load(); h != nil {
			(*h)()
		}
		var expired <-chan time.Time
		var e *time.Timer
		if !until.IsZero() {
			e = time.NewTimer(time.Until(until))
			expired = e.C
		}
		select {
		case <-changed:
		case <-expired:
		case <-t.C:
			return
		}
		if e != nil {
			e.Stop()
		}
	}
}
