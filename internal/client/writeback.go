package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/patchgroup"
	"github.com/weftfs/weft/proto/weftpb"
)

// Metadata write-back (Config.WriteBack; the mount's `--durability
// writeback`). A client that changes a directory takes an exclusive write
// lease on it (its key on every meta server, so that a split directory is
// covered too) and then completes creates, unlinks, renames and setattrs of
// files, mkdirs and rmdirs (writeback_dirs.go) there itself: it checks them against what it knows (the
// directory's attributes, its queued changes, and the server's entries,
// which nobody else can change while the lease is held), answers at once,
// and queues them. Queued changes go to the servers in batches (ApplyBatch),
// each applied as one atomic group, in order. So after a crash of the
// client the servers hold the changes of some prefix of the batches: no
// entry without its inode, no half-applied operation, and what an fsync
// waited for is there.
//
// A directory's queue is sent (and made durable as the servers' mode says)
//   - within Config.WriteBackWindow (default 1 s) of its oldest change;
//   - before any other request about the directory or a name in it (open,
//     write commits, mkdir, readdir, xattrs, a change written back can't
//     express), so the servers never see them out of order;
//   - at fsync of a file in it or of the directory, SyncAll (syncfs) and
//     Close (unmount);
//   - when the lease is recalled (another client wants to read or change
//     the directory), before the lease is released;
//   - before the lease's trusted time runs out.
//
// A batch the servers refuse (only possible when the lease was lost before
// the batch arrived, e.g. the client stalled past its term) is discarded
// with every change queued after it in the directory; the next fsync or
// close of a file in the directory, or fsync of the directory, returns its
// error. Lookups and stats on this client see its queued changes; a
// readdir sends them first.

const (
	// DefaultWriteBackWindow is how long a change may wait in the client.
	DefaultWriteBackWindow = time.Second
	// wbMinTrust: a change is queued only while the lease is trusted for at
	// least this long, so that the flush before the lease's end has time.
	wbMinTrust = 600 * time.Millisecond
	// wbFlushBefore: the queue is sent when the lease has less left.
	wbFlushBefore = 400 * time.Millisecond
	// wbBackoff: after a recall, the client leaves the directory to the
	// others this long before it asks for its write lease again.
	wbBackoff = 5 * time.Second
	// wbMaxBatch bounds a batch (the server takes up to 4096).
	wbMaxBatch = 1024
	// wbSendWait bounds the sending of one batch.
	wbSendWait = 20 * time.Second
	// wbInoRange is how many inode numbers the client reserves at a time.
	wbInoRange = 1024
	// wbMaxAbsent bounds the names remembered as absent per directory.
	wbMaxAbsent = 16384
	// wbMaxListing bounds the listing a client keeps of a directory.
	wbMaxListing = 200_000
	// wbMaxContent bounds the inline content a client keeps of files its
	// batches wrote, over all directories.
	wbMaxContent = 64 << 20
)

// writeBack is the client's write-back state.
type writeBack struct {
	mu struct {
		sync.Mutex
		dirs    map[core.Ino]*wbDir
		backoff map[core.Ino]time.Time // directories recalled lately
		inos    map[int]inoRange       // reserved inode numbers, by server
	}
	started sync.Once
	done    chan struct{} // closed when the flusher ends
	// contentBytes is what the directories' content maps hold, at most
	// wbMaxContent.
	contentBytes atomic.Int64
}

// inoRange is a run of reserved inode numbers: next..end-1.
type inoRange struct{ next, end uint64 }

// wbName is what the client knows of a name in a write-back directory that
// the servers may not: a queued change (pending > 0) or, with no change
// pending, that the servers do not have it (absent).
type wbName struct {
	attr    core.Attr
	absent  bool
	pending int // queued ops naming it, not yet applied by the servers
	// data is the file's whole content, known (dataOK) when its create
	// or its last commit is queued: an open needs no request
	// (writeback_data.go).
	data   []byte
	dataOK bool
	// fresh: a file this client created under write-back, with no
	// extended attributes: nothing about the name went to the servers
	// since (forgetName clears it). The kernel asks each written file for
	// security.capability; the answer needs no request (wbNoXattrs).
	fresh bool
}

// wbDir is one directory under write-back.
type wbDir struct {
	c   *Client
	dir core.Ino
	// sending is the token of the one sender: batches go out in order.
	sending chan struct{}
	// ops serialises the write-back operations in the directory, as the
	// kernel's directory lock does (writeback_ops.go). Held across the
	// lookup an operation may need, never by a flush.
	ops sync.Mutex
	mu  struct {
		sync.Mutex
		seqs    []uint64      // grant of each meta server's key
		trusted time.Time     // monotonic: until when the lease is relied on
		term    time.Duration // of the last grant
		// born is the directory whose queue holds this one's mkdir, until
		// the servers applied it (writeback_dirs.go); partial: the lease
		// is held on the directory's owner only (the server that applied
		// its mkdir), not yet on the other meta servers.
		born    *wbDir
		partial bool
		// kids are the directories the queued mkdirs and rmdirs make and
		// remove, by op.
		kids    map[*weftpb.BatchOp]*wbDir
		lost    bool // recalled, expired or never granted: queue nothing
		retired bool // no longer the directory's state: never granted again
		// gen counts forgetLocked: what a read of the servers learnt is
		// kept only if no request changed the directory meanwhile.
		gen     uint64
		dattr   core.Attr // the directory's attributes, as of the lease
		dattrOK bool      // dattr is what the servers hold (no request since)
		// listing is every name the servers hold in the directory (no
		// queued change of it pending) while the lease has been held
		// since it was read and no request but write-back's went to the
		// directory; nil if unknown. With it, a create or unlink needs
		// no lookup on the servers.
		listing map[string]core.Attr
		// content is the whole content of inline files of listing, as
		// this client's applied batches left it (writeback_data.go).
		content map[string][]byte
		// unknown are names of listing a request to the servers may have
		// changed since (forgetName): asked again.
		unknown map[string]bool
		// listingWanted: a fresh lease asks for the listing
		// (loadListing, by the next operation).
		listingWanted bool
		mtime         time.Time // of the last queued change
		names         map[string]*wbName
		absent        int
		open          []*weftpb.BatchOp // the batch being filled
		used          map[string]bool   // names in open
		// creates are the ops in open that create a file, by name:
		// later changes of their files fold into them
		// (writeback_data.go), and so may a rename of the file into
		// another directory (writeback_move.go).
		creates map[string]*weftpb.BatchOp
		// moves are the queued ops that put a name in another
		// directory (writeback_move.go), until applied or dropped.
		moves map[*weftpb.BatchOp]*wbMove
		// after is the directory whose queue holds the latest rename
		// into this one (afterMove), until it is sent: this
		// directory's own changes go after it (writeback_move.go).
		after     *wbDir
		afterMove *wbMove
		sealed    [][]*weftpb.BatchOp
		oldest    time.Time // of the oldest queued op
		err       error     // a refused batch, for the next fsync or close
	}
}

func (c *Client) startWriteBack() {
	c.wb.started.Do(func() {
		c.wb.done = make(chan struct{})
		go c.wbFlusher()
	})
}

// wbFlusher sends each directory's queue when its window or its lease
// runs out, until the client closes.
func (c *Client) wbFlusher() {
	defer close(c.wb.done)
	// Often enough for the window and for the lease's end (wbFlushBefore).
	tick := time.NewTicker(min(max(c.cfg.WriteBackWindow/8, 10*time.Millisecond), 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-c.life.Done():
			return
		case <-tick.C:
		}
		if c.stalled.Load() {
			continue
		}
		now := time.Now()
		for _, w := range c.wbDirs() {
			if w.due(now, c.cfg.WriteBackWindow) {
				ctx, cancel := context.WithTimeout(c.life, wbSendWait)
				_ = w.flush(ctx) // the error waits in w for an fsync
				cancel()
			}
			c.wbForgetIdle(w, now)
		}
	}
}

// due reports whether w's queue must go now.
func (w *wbDir) due(now time.Time, window time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.mu.open) == 0 && len(w.mu.sealed) == 0 {
		// A rename into the directory queued elsewhere goes with that
		// queue's window, but before this directory's lease ends.
		return w.mu.after != nil && (w.mu.lost || w.mu.trusted.Sub(now) < wbFlushBefore)
	}
	return w.mu.lost || now.Sub(w.mu.oldest) >= window || w.mu.trusted.Sub(now) < wbFlushBefore
}

// wbForgetIdle drops a directory whose lease ran out with nothing queued.
// It is retired under its lock, so that an operation that still holds it
// cannot queue a change nobody would send.
func (c *Client) wbForgetIdle(w *wbDir, now time.Time) {
	c.wb.mu.Lock()
	defer c.wb.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	idle := len(w.mu.open) == 0 && len(w.mu.sealed) == 0 && w.mu.err == nil && w.mu.after == nil &&
		(w.mu.lost || !now.Before(w.mu.trusted))
	if !idle || c.wb.mu.dirs[w.dir] != w {
		return
	}
	w.mu.lost, w.mu.retired = true, true
	w.dropContentLocked()
	delete(c.wb.mu.dirs, w.dir)
}

func (c *Client) wbDirs() []*wbDir {
	c.wb.mu.Lock()
	defer c.wb.mu.Unlock()
	out := make([]*wbDir, 0, len(c.wb.mu.dirs))
	for _, w := range c.wb.mu.dirs {
		out = append(out, w)
	}
	return out
}

// wbLookupDir returns dir's write-back state, if any.
func (c *Client) wbLookupDir(dir core.Ino) *wbDir {
	if !c.cfg.WriteBack {
		return nil
	}
	c.wb.mu.Lock()
	defer c.wb.mu.Unlock()
	return c.wb.mu.dirs[dir]
}

// wbAcquire returns dir's write-back state with a lease trusted long
// enough to queue a change, taking or renewing the lease as needed; nil
// when the change must go to the server now (write-back off, a server in
// this process, a recent recall, a refused lease).
//
// A change made under patchgroups is queued too: the groups' barrier runs
// first (what they depend on is durable before the change is made), and
// the groups note the queue, so that making them durable sends it
// (patchgroup.go). The queue is sent in order, so a group's queued change
// never becomes durable before an earlier change of the queue.
func (c *Client) wbAcquire(ctx context.Context, dir core.Ino) *wbDir {
	if !c.cfg.WriteBack {
		return nil
	}
	w := c.wbAcquireLease(ctx, dir)
	if w == nil {
		return nil
	}
	if groups := c.groupsFor(ctx); len(groups) > 0 {
		if patchgroup.Barrier(ctx, groups) != nil {
			return nil // the server path runs the barrier again and reports it
		}
		patchgroup.NoteDir(groups, dir)
	}
	return w
}

// wbAcquireLease is wbAcquire without the patchgroups.
func (c *Client) wbAcquireLease(ctx context.Context, dir core.Ino) *wbDir {
	for _, a := range c.cfg.MetaAddrs {
		if c.cfg.Local[a] != nil {
			return nil // no connection to recall the lease over
		}
	}
	c.startWriteBack()
	c.wb.mu.Lock()
	if until, ok := c.wb.mu.backoff[dir]; ok {
		if time.Now().Before(until) {
			c.wb.mu.Unlock()
			return nil
		}
		delete(c.wb.mu.backoff, dir)
	}
	if c.wb.mu.dirs == nil {
		c.wb.mu.dirs = make(map[core.Ino]*wbDir)
	}
	w := c.wb.mu.dirs[dir]
	if w == nil {
		w = &wbDir{c: c, dir: dir, sending: make(chan struct{}, 1)}
		w.mu.lost = true
		w.mu.names = make(map[string]*wbName)
		c.wb.mu.dirs[dir] = w
	}
	c.wb.mu.Unlock()
	w.mu.Lock()
	ok := !w.mu.lost && time.Until(w.mu.trusted) >= wbMinTrust && !w.mu.partial
	w.mu.Unlock()
	if ok {
		return w
	}
	if !c.wbGrant(ctx, w) {
		return nil
	}
	return w
}

// wbGrant takes (or renews) w's write lease on every meta server and reads
// the directory's attributes, which the client's permission checks use.
func (c *Client) wbGrant(ctx context.Context, w *wbDir) bool {
	w.mu.Lock()
	// A lease no longer trusted may have ended on the servers: whatever
	// the client learnt under it may have changed since.
	stale := w.mu.lost || !time.Now().Before(w.mu.trusted)
	if stale {
		w.forgetLocked()
	}
	gen0 := w.mu.gen
	w.mu.Unlock()
	dattr, err := c.GetAttr(ctx, Ref{Ino: w.dir})
	if err != nil || !dattr.IsDir() {
		return false
	}
	seqs := make([]uint64, len(c.metas))
	trusted := time.Time{}
	var term time.Duration
	for server := range c.metas {
		seq, until, t, ok := c.acquireWrite(ctx, server, w.dir)
		if !ok {
			c.wbBackoff(w.dir)
			return false
		}
		seqs[server] = seq
		if trusted.IsZero() || until.Before(trusted) {
			trusted, term = until, t
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.retired || w.mu.gen != gen0 {
		return false
	}
	if len(w.mu.sealed) > 0 || len(w.mu.open) > 0 {
		// Changes queued under a lease that was lost: they go first
		// (the caller's barrier sends them); no new ones meanwhile.
		if w.mu.lost {
			return false
		}
	}
	w.mu.seqs, w.mu.trusted, w.mu.lost, w.mu.dattr, w.mu.dattrOK = seqs, trusted, false, dattr, true
	w.mu.term, w.mu.partial = term, false
	if w.mu.mtime.Before(dattr.Mtime) {
		w.mu.mtime = dattr.Mtime
	}
	if stale && c.unsplit(w.dir) {
		w.mu.listingWanted = true
	}
	return time.Until(trusted) >= wbMinTrust
}

// forgetLocked drops what the client learnt of the servers' state under
// the lease (not its queued changes).
func (w *wbDir) forgetLocked() {
	w.mu.gen++
	w.mu.listing, w.mu.unknown, w.mu.dattrOK = nil, nil, false
	w.dropContentLocked()
	for name, n := range w.mu.names {
		if n.pending == 0 {
			delete(w.mu.names, name)
		}
	}
	w.mu.absent = 0
}

// loadListing reads the directory's names under a fresh lease, so that
// creates and unlinks need no lookup; a directory larger than
// wbMaxListing, or a request to it meanwhile, leaves it unknown.
func (c *Client) loadListing(ctx context.Context, w *wbDir) {
	w.mu.Lock()
	want := w.mu.listingWanted && !w.mu.lost
	w.mu.listingWanted = false
	gen := w.mu.gen
	w.mu.Unlock()
	if !want {
		return
	}
	listing := map[string]core.Attr{}
	var cookie []byte
	for {
		page, next, eof, err := c.readDirPage(ctx, w.dir, cookie, 0, true)
		if err != nil {
			return
		}
		for _, e := range page {
			if e.Attr == nil || len(listing) >= wbMaxListing {
				return
			}
			listing[e.Name] = *e.Attr
		}
		if eof {
			break
		}
		if len(page) == 0 && string(next) == string(cookie) {
			return
		}
		cookie = next
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.mu.lost && w.mu.gen == gen {
		// Queued changes are in names, which take precedence.
		w.mu.listing, w.mu.unknown = listing, nil
	}
}

// acquireWrite asks server for the write lease on dir.
func (c *Client) acquireWrite(ctx context.Context, server int, dir core.Ino) (seq uint64, trusted time.Time, term time.Duration, ok bool) {
	session, err := c.lockSessionFor(server)
	if err != nil {
		return 0, time.Time{}, 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTerm+leaseAcquireSlack)
	defer cancel()
	sent := time.Now()
	var reply weftpb.LeaseAcquireReply
	err = c.metas[server].Call(ctx, weftpb.MethodLeaseAcquire, &weftpb.LeaseAcquireRequest{
		Session: session, Mode: weftpb.LeaseMode_LEASE_WRITE, Keys: []uint64{uint64(dir)}}, &reply)
	if err != nil || len(reply.Granted) == 0 {
		return 0, time.Time{}, 0, false
	}
	term = time.Duration(reply.TermMs) * time.Millisecond
	return reply.Seq, sent.Add(term - leaseMargin(term)), term, true
}

func (c *Client) wbBackoff(dir core.Ino) {
	c.wb.mu.Lock()
	defer c.wb.mu.Unlock()
	if c.wb.mu.backoff == nil || len(c.wb.mu.backoff) > 4096 {
		c.wb.mu.backoff = make(map[core.Ino]time.Time)
	}
	c.wb.mu.backoff[dir] = time.Now().Add(wbBackoff)
}

// wbLose marks the write-back directories among recalled keys as lost, at
// once when the recall arrives: nothing more is queued under the lease.
func (c *Client) wbLose(inos []uint64) []*wbDir {
	if !c.cfg.WriteBack {
		return nil
	}
	var out []*wbDir
	for _, ino := range inos {
		w := c.wbLookupDir(core.Ino(ino))
		if w == nil {
			continue
		}
		w.mu.Lock()
		w.mu.lost = true
		w.forgetLocked()
		w.mu.Unlock()
		c.wbBackoff(w.dir)
		out = append(out, w)
	}
	return out
}

// wbFlushRecalled sends the queues of recalled directories before their
// leases are released.
func (c *Client) wbFlushRecalled(ws []*wbDir) {
	for _, w := range ws {
		ctx, cancel := context.WithTimeout(c.life, wbSendWait)
		if err := w.flush(ctx); err != nil {
			c.log.Warn("write-back: queued changes could not be sent at a recall", "dir", w.dir, "err", err)
		}
		cancel()
	}
}

// wbBarrier sends dir's queue, if any, before a request that the servers
// must see after it, and forgets what the client knew of the directory
// beyond its queue (the listing, names it knew absent, the directory's
// attributes): the request may change them. The caller forgets again once
// the request is done (wbForgetDir). A refused batch is not its error (fsync and close
// report it): the request itself goes on.
func (c *Client) wbBarrier(ctx context.Context, dir core.Ino) error {
	w := c.wbLookupDir(dir)
	if w == nil {
		return nil
	}
	w.forget()
	return w.flush(ctx)
}

// wbBarrierName is wbBarrier before a request about name in dir (method):
// what the client knew of the directory's other names stays (forgetName).
func (c *Client) wbBarrierName(ctx context.Context, dir core.Ino, name string, method uint16) error {
	w := c.wbLookupDir(dir)
	if w == nil {
		return nil
	}
	w.forgetName(name, method)
	return w.flush(ctx)
}

// wbForgetName is wbForget after a request about name in dir (method).
func (c *Client) wbForgetName(dir core.Ino, name string, method uint16) {
	if w := c.wbLookupDir(dir); w != nil {
		w.forgetName(name, method)
	}
}

// forgetName forgets what a request about name (method) may change: the
// name and the directory's attributes. A rename or link changes another
// name too, and a change of a file with several links changes what the
// client knows of its other names: then everything goes (forgetLocked).
// Keeping the listing matters to tar, whose mkdir and utimes of each
// subdirectory would otherwise cost every later create in the directory a
// lookup.
func (w *wbDir) forgetName(name string, method uint16) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.mu.listing[name]
	if method == weftpb.MethodRename || method == weftpb.MethodLink || ok && !e.IsDir() && e.Nlink != 1 ||
		len(w.mu.unknown) >= wbMaxAbsent {
		w.forgetLocked()
		return
	}
	w.mu.gen++
	w.mu.dattrOK = false
	if w.mu.listing != nil {
		if w.mu.unknown == nil {
			w.mu.unknown = make(map[string]bool)
		}
		w.mu.unknown[name] = true
	}
	w.setContentLocked(name, nil, false)
	if n := w.mu.names[name]; n != nil && n.pending == 0 {
		if n.absent {
			w.mu.absent--
		}
		delete(w.mu.names, name)
	} else if n != nil {
		n.fresh = false
	}
}

// wbForgetDir forgets, after a request that went to the servers about
// dir, what the client learnt of dir meanwhile (it may predate it).
func (c *Client) wbForgetDir(dir core.Ino) {
	if w := c.wbLookupDir(dir); w != nil {
		w.forget()
	}
}

func (w *wbDir) forget() {
	w.mu.Lock()
	w.forgetLocked()
	w.mu.Unlock()
}

// wbBarrierChild is wbBarrier for the directory name in parent, if it is
// one under write-back (rmdir, a rename over it: the server checks that it
// is empty).
func (c *Client) wbBarrierChild(ctx context.Context, parent core.Ino, name string) error {
	if !c.cfg.WriteBack {
		return nil
	}
	a, err := c.LookupAt(ctx, parent, name)
	if err != nil || !a.IsDir() {
		return nil // the operation itself reports it
	}
	return c.wbBarrier(ctx, a.Ino)
}

// wbFlushDir sends dir's queue before a read that must see it (readdir).
func (c *Client) wbFlushDir(ctx context.Context, dir core.Ino) error {
	w := c.wbLookupDir(dir)
	if w == nil {
		return nil
	}
	return w.flush(ctx)
}

// SyncDir sends dir's queued changes and waits until the servers applied
// them (fsync of the directory, or of a file in it). It returns the error
// of a batch the servers refused since the last SyncDir, once.
func (c *Client) SyncDir(ctx context.Context, dir core.Ino) error {
	w := c.wbLookupDir(dir)
	if w == nil {
		return nil
	}
	err := w.flush(ctx)
	w.mu.Lock()
	refused := w.mu.err
	w.mu.err = nil
	w.mu.Unlock()
	if refused != nil {
		return refused
	}
	return err
}

// SyncAll sends every directory's queued changes (syncfs, unmount).
func (c *Client) SyncAll(ctx context.Context) error {
	var first error
	for _, w := range c.wbDirs() {
		if err := c.SyncDir(ctx, w.dir); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// wbFlushAll sends every directory's queue (refusals wait for fsync).
func (c *Client) wbFlushAll(ctx context.Context) {
	for _, w := range c.wbDirs() {
		if err := w.flush(ctx); err != nil {
			c.log.Warn("write-back: queued changes could not be sent", "dir", w.dir, "err", err)
		}
	}
}

// wbClose sends every queue at Close, bounded.
func (c *Client) wbClose() {
	if !c.cfg.WriteBack {
		return
	}
	ctx, cancel := context.WithTimeout(c.life, wbSendWait)
	defer cancel()
	if err := c.SyncAll(ctx); err != nil {
		c.log.Warn("write-back: queued changes lost at close", "err", err)
	}
}

// wbWait waits for the flusher to end, once the client's life ended.
func (c *Client) wbWait() {
	c.wb.started.Do(func() {}) // none starts from now on
	if c.wb.done != nil {
		<-c.wb.done
	}
}

// wbDirAttr gives a directory with queued changes the times of its latest
// change, which the servers do not have yet.
func (c *Client) wbDirAttr(a core.Attr) core.Attr {
	if !a.IsDir() {
		return a
	}
	w := c.wbLookupDir(a.Ino)
	if w == nil {
		return a
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.mu.open)+len(w.mu.sealed) > 0 && w.mu.mtime.After(a.Mtime) {
		a.Mtime, a.Ctime = w.mu.mtime, w.mu.mtime
	}
	return a
}
