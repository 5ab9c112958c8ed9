package fusefs

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

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
	op     string // the request answered ESTALE: "getattr", "setattr", "open"
	node   *Node  // the node the thread's lookup returned since (nil: none yet)
	parent core.Ino
	name   string
}

// retries are the threads the mount answered ESTALE, by pid.
type retries struct {
	mu sync.Mutex
	m  map[uint32]*retryWalk
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
	delete(r.m, pid)
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
		if w.node != nil {
			// The retry's walk had reached its node: this is a
			// later walk, of another call.
			delete(r.m, pid)
			return
		}
		if node.IsDir() || node.Mode()&syscall.S_IFMT == syscall.S_IFLNK {
			// The walk goes on below it (or through the link); a
			// thread's walk after ESTALE ends at the node it
			// retries.
			w.node = nil
			return
		}
		w.node, w.parent, w.name = node, parent, name
	}
}

// retry returns the walk of the thread of ctx if its request op about n
// is the retry, through a fresh lookup of n, of one answered ESTALE. The
// retry may make several requests about n (an open's GETATTR, then its
// OPEN), and the walk before it GETATTRs the directories it passes: what
// the mount remembers ends with a request of the kind answered ESTALE, or
// an OPEN or SETATTR (they end their call).
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
	if op == w.op || op != "getattr" {
		delete(r.m, pid)
	}
	return *w, true
}
