package fusefs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
)

// Kernel caching under read leases. A reply the mount gives under a read
// lease (client.ReadLease, taken before the server is asked) lets the
// kernel keep the entry or attributes for as long as the client trusts the
// lease; one without keeps today's short timeouts (Options). When a meta
// server recalls a lease, because another client is about to change what it
// covers, the client calls recalled before it releases the lease, so that
// the change lands only once this kernel has forgotten the old state.
//
// recalled runs on the client's goroutine for the recall, never inside a
// FUSE request. The kernel may still block an invalidation behind a request
// of this mount: one that changes a directory holds the directory's lock,
// and an entry invalidation needs it. When this mount's own change is what
// the server recalls for (a change that spans meta servers recalls the
// requester's leases on the other servers too), that would wait for the
// change, which waits for the release. So a recall of a directory this
// mount is changing invalidates attributes and pages at once, answers, and
// invalidates the names there once the change is done (the kernel adds a
// rename's new name after the request returns): the kernel's cached names
// there may be served until that change returns (lookups in the directory
// wait for its lock anyway). Any other
// invalidation that blocks is bounded by the client
// (client.recallNotifyWait), which then releases the lease anyway.

// nodeIndex finds the nodes the kernel may cache, by inode, for recalls.
// go-fuse may drop a node newChild made (the kernel already knew the
// inode by another name) without telling it: an inode keeps its last few
// nodes, and a recall notifies them all (the dropped ones were never
// handed to the kernel, so that does nothing).
type nodeIndex struct {
	root *Node
	mu   sync.Mutex
	m    map[core.Ino][]*Node
	busy map[core.Ino]int // directories this mount's requests are changing
	// after are invalidations to run once no request of this mount
	// changes a directory any more.
	after map[core.Ino][]func()
	// started is closed when a request of this mount starts a change
	// (nil: nobody waits for one).
	started chan struct{}
	// moving are the nodes this mount's renames in flight move into a
	// directory: the kernel adds their new names after the requests
	// return.
	moving map[core.Ino][]*Node
}

// maxNodesPerIno bounds the dropped nodes an inode's list keeps.
const maxNodesPerIno = 4

func (x *nodeIndex) add(n *Node) {
	ino := n.ino()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.m == nil {
		x.m = make(map[core.Ino][]*Node)
	}
	l := x.m[ino]
	for _, o := range l {
		if o == n {
			return
		}
	}
	if len(l) == maxNodesPerIno {
		l = l[1:]
	}
	x.m[ino] = append(l, n)
}

func (x *nodeIndex) remove(n *Node) {
	ino := n.ino()
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.m[ino]
	for i, o := range l {
		if o == n {
			l = append(l[:i:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(x.m, ino)
	} else {
		x.m[ino] = l
	}
}

// live returns the node of ino with file type typ that the kernel knows
// (go-fuse's one node for it), if any. The others in the index are nodes
// go-fuse dropped.
func (x *nodeIndex) live(ino core.Ino, typ uint32) *Node {
	for _, n := range x.get(ino) {
		// Forgotten is deprecated for OnForget, which a dropped node
		// never gets: it tells the two apart.
		//lint:ignore SA1019 see above
		if n.StableAttr().Mode == typ && !n.Forgotten() {
			return n
		}
	}
	return nil
}

func (x *nodeIndex) get(ino core.Ino) []*Node {
	if ino == core.RootIno {
		return []*Node{x.root}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]*Node(nil), x.m[ino]...)
}

var _ fs.NodeOnForgetter = (*Node)(nil)

// OnForget is called when the kernel has forgotten the node.
func (n *Node) OnForget() { n.fsys.index.remove(n) }

// recalled makes the kernel forget what the recalled leases covered: for
// a key that is a directory, its attributes, its cached listing, every
// name the kernel knows in it and the attributes those embed (the pages of
// files open here too: their size and times may have changed); for any
// other inode, its attributes and pages.
//
// Files open here through an entry of a recalled directory go too, however
// the kernel knows them: one another mount renamed is addressed by its new
// entry once the client found it again (client.OpenIn), while the kernel
// may still know it under its old parent, or under none.
func (fsys *fileSystem) recalled(keys []client.LeaseKey) {
	for _, k := range keys {
		for _, n := range fsys.index.get(k.Ino) {
			n.forget()
		}
		for _, ino := range fsys.c.OpenIn(k.Ino) {
			fsys.c.MarkStale(ino)
			for _, n := range fsys.index.get(ino) {
				if n.childOf(k.Ino) {
					continue // a child of the directory: forget did it
				}
				n.invalidate(0)
			}
		}
		// A file this mount's rename in flight moves into the
		// directory is addressed by its old name until the rename
		// returns (the client re-points its open state then, and
		// go-fuse moves the node), so neither of the above finds it;
		// the change recalled for may concern it under its new name
		// already (TestRecallDuringOwnRenameOfOpenFile).
		for _, n := range fsys.index.movingInto(k.Ino) {
			off := int64(-1) // attributes only
			if n.isOpen() {
				off = 0
				fsys.c.MarkStale(n.ino())
			}
			n.invalidate(off)
		}
	}
	if h := fsys.hooks.recalled.Load(); h != nil {
		(*h)()
	}
	fsys.waitOpens(keys)
}

// childOf reports whether go-fuse's tree has n as a child of directory
// dir, under the name it links n to. go-fuse does not unlink a node from
// its parent when a new node takes its name there: such a node is no
// child, and the directory's invalidation (forget) does not reach it.
func (n *Node) childOf(dir core.Ino) bool {
	name, p := n.Parent()
	return p != nil && p.StableAttr().Ino == uint64(dir) && p.GetChild(name) == n.EmbeddedInode()
}

// change notes that a request of this mount is changing dirs until the
// returned function is called.
func (fsys *fileSystem) change(dirs ...core.Ino) (done func()) {
	x := &fsys.index
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.busy == nil {
		x.busy = make(map[core.Ino]int)
	}
	for _, d := range dirs {
		x.busy[d]++
	}
	if x.started != nil {
		close(x.started)
		x.started = nil
	}
	return func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		for _, d := range dirs {
			if x.busy[d]--; x.busy[d] == 0 {
				delete(x.busy, d)
				// The kernel finishes the change (a rename's new name)
				// after this request returns, and holds the
				// directory's lock until then: the names go after it.
				for _, fn := range x.after[d] {
					go fn()
				}
				delete(x.after, d)
			}
		}
	}
}

// changeStarted returns a channel closed when a request of this mount
// next starts a change.
func (x *nodeIndex) changeStarted() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.started == nil {
		x.started = make(chan struct{})
	}
	return x.started
}

// afterChanges runs fn once no request of this mount changes dir, in a
// goroutine; it returns false (and does nothing) if none does now.
func (x *nodeIndex) afterChanges(dir core.Ino, fn func()) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.busy[dir] == 0 {
		return false
	}
	if x.after == nil {
		x.after = make(map[core.Ino][]func())
	}
	x.after[dir] = append(x.after[dir], fn)
	return true
}

// forget makes the kernel forget what n's lease covered. Attributes and
// pages go first, and always before the lease is released: the kernel
// drops them without the directory's lock. Names need that lock, which a
// request of this mount changing the directory may hold while it waits for
// the change being recalled for: then they go once that request is done,
// and again once the kernel has finished it (it may add a name: a rename's
// target), which the first invalidation waits for.
func (n *Node) forget() {
	if !n.IsDir() {
		n.fsys.c.MarkStale(n.ino())
	}
	n.invalidate(0)
	if !n.IsDir() {
		return
	}
	children := n.Children()
	// A child whose LOOKUP reply the kernel has not yet taken is not an
	// inode there yet: the invalidation finds nothing (ENOENT), and the
	// reply then installs attributes read under the lease being
	// recalled, for its whole term (linz: a reread returned "" from the
	// size a LOOKUP reported just as the recall came). The lookup holds
	// the directory's lock until the inode is installed, so those go
	// again once the names, which wait for that lock, are done.
	type pending struct {
		n   *Node
		off int64
	}
	var missed []pending
	for _, ch := range children {
		cn, ok := ch.Operations().(*Node)
		if !ok {
			_ = ch.NotifyContent(-1, 0)
			continue
		}
		off := int64(-1) // attributes only
		if cn.isOpen() {
			off = 0
			n.fsys.c.MarkStale(cn.ino())
		}
		if cn.invalidate(off) == syscall.ENOENT {
			missed = append(missed, pending{cn, off})
		}
	}
	// names are listed once the kernel's lock on the directory was free:
	// a listing or lookup in flight when the recall came (it holds the
	// lock, shared) may add names that the recall must drop too. "." is
	// never a cached name, but its invalidation waits for the lock like
	// any other.
	names := func() {
		_ = n.NotifyEntry(".")
		for name := range children {
			_ = n.NotifyEntry(name)
		}
		for name, ch := range n.Children() {
			if old, done := children[name]; !done || old != ch {
				_ = n.NotifyEntry(name)
				// Found by a lookup that the recall may have
				// overtaken (see missed).
				if cn, ok := ch.Operations().(*Node); ok && !ch.IsDir() {
					off := int64(-1)
					if cn.isOpen() {
						off = 0
					}
					_ = cn.notifyContent(off, 0)
				}
			}
		}
		for _, p := range missed {
			_ = p.n.notifyContent(p.off, 0)
		}
	}
	// A recall answered before the names go leaves the kernel names
	// that may no longer hold what they held (staleNames).
	deferNames := func() bool {
		stale := n.staleNamesStart()
		later := func() {
			if h := n.fsys.hooks.deferredNames.Load(); h != nil {
				(*h)()
			}
			names()
			stale.end()
		}
		if n.fsys.index.afterChanges(n.ino(), later) {
			return true
		}
		stale.undo()
		return false
	}
	// The kernel may hold the directory's lock for a change of this mount
	// whose request has not come yet (the lookup before a create): the
	// names wait for the lock, and that change may wait, at a server, for
	// this very recall. So once such a change starts, the names go after
	// it instead. The channel that says a change started is taken before
	// looking for one: a change that starts between the look and the wait
	// must close it (one that did was missed, and the recall waited for
	// the client's 500 ms bound: TestRecallDuringOwnChangeStarting).
	started := n.fsys.index.changeStarted()
	if deferNames() {
		return
	}
	if h := n.fsys.hooks.namesWait.Load(); h != nil {
		(*h)()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		names()
	}()
	for {
		select {
		case <-done:
			return
		case <-started:
			started = n.fsys.index.changeStarted()
			if deferNames() {
				return
			}
		}
	}
}

// Invalidating attributes while the kernel waits for a GETATTR of the node
// makes it drop that reply (its attr_version is older), and a read past the
// kernel's cached end of file that asked for it then ends at the old size
// instead of asking again: a reread of a file another mount grew and closed
// returned nothing. So a recall's invalidation of a node waits for the
// node's Getattr calls in flight (bounded), and a moment more, for the
// reply, written after the handler returns, to be taken by the kernel. A
// GETATTR sent after the invalidation is answered under a new lease. The
// bound is short: a Getattr may itself wait, at the server, for the change
// this recall is for (a lease on another key of it), which waits for this
// release; then nothing helps, and the read ends short (docs/design.md).
const (
	getattrWait  = 20 * time.Millisecond
	getattrReply = time.Millisecond
)

// startGetattr notes a Getattr in flight until the returned function is
// called.
func (n *Node) startGetattr() (done func()) {
	n.mu.Lock()
	if n.mu.getattrs == 0 {
		n.mu.getattrsDone = make(chan struct{})
	}
	n.mu.getattrs++
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		if n.mu.getattrs--; n.mu.getattrs == 0 {
			close(n.mu.getattrsDone)
		}
		n.mu.Unlock()
	}
}

// invalidate makes the kernel forget n's attributes and, from off on, its
// pages (off -1: attributes only), once no Getattr of n is in flight. It
// returns the kernel's answer: ENOENT if it has no such inode (yet).
func (n *Node) invalidate(off int64) syscall.Errno {
	n.mu.Lock()
	busy, done := n.mu.getattrs > 0, n.mu.getattrsDone
	n.mu.Unlock()
	if busy {
		t := time.NewTimer(getattrWait)
		select {
		case <-done:
			t.Reset(getattrReply)
			<-t.C
		case <-t.C:
		}
		t.Stop()
	}
	return n.notifyContent(off, 0)
}

func (n *Node) isOpen() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.opens > 0
}

// cacheFor is how long the kernel may keep what a reply read under l said:
// what is left of the lease; with leases off (the in-process mount), def.
// With leases on, nothing when no live lease covers it: the server refused
// the lease, it was never taken, or it was recalled or ran out since it was
// taken (the reply may then predate the change it was recalled for). The
// kernel's own invalidations cover only what a lease covered.
func (fsys *fileSystem) cacheFor(l client.Lease, def time.Duration) time.Duration {
	if rem := l.Remaining(); rem > 0 {
		return rem
	}
	if fsys.leases {
		return 0
	}
	return def
}

// entryLease takes the read lease that covers name in n, before the server
// is asked about it.
func (n *Node) entryLease(ctx context.Context, name string) client.Lease {
	c := n.fsys.c
	return c.ReadLease(ctx, c.EntryLease(n.ino(), name))
}

// attrLease takes the read lease that covers n's attributes.
func (n *Node) attrLease(ctx context.Context) client.Lease {
	n.mu.Lock()
	a := n.mu.attr
	n.mu.Unlock()
	c := n.fsys.c
	return c.ReadLease(ctx, c.AttrLease(n.ref(), a))
}

// inlineAttrs reports whether a's attributes live in the entry that names
// them (so the entry's lease covers them).
func inlineAttrs(a core.Attr) bool { return a.Mode&core.ModeType != core.ModeDir && a.Nlink <= 1 }

// Names a recall leaves behind. When a recall of a directory comes while
// this mount is changing it, the recall is answered at once and the names
// go once the change is done (forget): until then, and until the kernel
// has taken the invalidation (it waits for the directory's lock, which the
// calling process releases first, and then runs on with its next call),
// the kernel may reach a file through a name another mount has since
// moved or removed. A request by path does not say which name the kernel
// walked, and the mount names a file by where go-fuse's tree saw it last,
// which may be its new, valid name: a chmod of the old name changed the
// file there (linz, cause 4). So a getattr or setattr by path of a file
// that may be reached through such a name answers ESTALE, once per
// deferral: the kernel walks the path again with LOOKUP_REVAL, which asks
// the server for every name, and retries.

// staleNames is one deferral's mark on the files it concerns.
type staleNames struct{ nodes []*Node }

// staleNamesStart marks the files the kernel may know by a name in n:
// those go-fuse's tree has there and those this mount's renames in flight
// move there (the kernel names them there when the rename returns, with
// the timeout of their old name).
func (n *Node) staleNamesStart() staleNames {
	var s staleNames
	for _, ch := range n.Children() {
		if cn, ok := ch.Operations().(*Node); ok && !ch.IsDir() {
			s.nodes = append(s.nodes, cn)
		}
	}
	s.nodes = append(s.nodes, n.fsys.index.movingInto(n.ino())...)
	for _, cn := range s.nodes {
		cn.mu.Lock()
		cn.mu.staleNames++
		cn.mu.staleMarks++
		cn.mu.Unlock()
	}
	return s
}

// end notes that the deferred names are gone from the kernel.
func (s staleNames) end() {
	for _, cn := range s.nodes {
		cn.mu.Lock()
		cn.mu.staleNames--
		cn.mu.Unlock()
	}
}

// undo takes back a mark that was not needed (nothing was deferred).
func (s staleNames) undo() {
	for _, cn := range s.nodes {
		cn.mu.Lock()
		cn.mu.staleNames--
		cn.mu.staleMarks--
		cn.mu.staleChecked = min(cn.mu.staleChecked, cn.mu.staleMarks)
		cn.mu.Unlock()
	}
}

// maybeStaleName reports whether a request by path may have reached n
// through a name a deferral left behind, once per deferral (the kernel's
// retry after ESTALE is a fresh walk).
func (n *Node) maybeStaleName() bool {
	if n.IsDir() {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.staleChecked >= n.mu.staleMarks {
		return false
	}
	n.mu.staleChecked = n.mu.staleMarks
	return true
}

// lookedUp notes that the kernel looked n up afresh: once no deferral of
// a name it may know n by is pending, every name leading to n was walked
// since, and a request by path reached n by a valid one.
func (n *Node) lookedUp() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.staleNames == 0 {
		n.mu.staleChecked = n.mu.staleMarks
	}
}

// moveInto notes that a rename of this mount is moving node into dir
// until the returned function is called.
func (x *nodeIndex) moveInto(dir core.Ino, node *Node) (done func()) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.moving == nil {
		x.moving = make(map[core.Ino][]*Node)
	}
	x.moving[dir] = append(x.moving[dir], node)
	return func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		l := x.moving[dir]
		for i, o := range l {
			if o == node {
				l = append(l[:i:i], l[i+1:]...)
				break
			}
		}
		if len(l) == 0 {
			delete(x.moving, dir)
		} else {
			x.moving[dir] = l
		}
	}
}

func (x *nodeIndex) movingInto(dir core.Ino) []*Node {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]*Node(nil), x.moving[dir]...)
}
