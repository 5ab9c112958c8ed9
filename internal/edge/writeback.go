package edge

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/proto/weftpb"
)

// The edge's own write-back (Config.WriteBack, weft edge --durability
// writeback). A synchronous client's chmod or utimes of a one-link
// regular file is completed at the edge, under write leases the edge holds
// upstream on the keys the setattr names (the file's directory and the
// file), and sent upstream later as a write-back batch (ApplyBatch with
// BatchSetAttr ops, checked again and applied atomically by the upstream,
// as a write-back client's are). So a setattr costs the site no round trip
// across the wide-area link once the edge knows the file's attributes.
//
// What the edge answers with it must know: the file's attributes as the
// upstream holds them. It learns them from a setattr it forwarded under its
// write leases (the reply), and keeps them, with what it queued since, in
// the directory's queue (wbQueue.attrs) for as long as nothing else may
// change them: every change forwarded through the edge that names one of
// the queue's keys, every recall of one of them, and every failed send
// forgets them (wbForgetLocked).
//
// Ordering and visibility. Anything the edge forwards upstream that names
// one of a queue's keys (a read included), or names no key at all (it may
// read anything: find, scan, a capability, sync_meta), sends the queue
// first: the upstream always holds a prefix of what the edge answered,
// and a read through the edge sees every setattr it answered. Replies the
// edge cached under the keys are dropped when it queues. Another site sees
// the change once its read lease or change recalls the edge's write lease:
// the recall sends the queue before the edge releases. A client without
// leases reading the upstream directly does not (as with a write-back
// client's queue).
//
// Durability. A queued setattr is durable upstream once a sync_meta to
// the edge has returned (the client sends one at fsync, fsyncdir and close
// when a reply said queued), once a recall sent it, or within the window
// (Config.WriteBackWindow, default 1 s). A kill -9 of the edge loses at
// most what it queued since the last of these; a batch the upstream
// applies is all or nothing. A queue is sent only while the write leases
// it rests on are trusted: past that (a partition longer than the lease's
// remaining term) the upstream may have given them to another client, and
// the edge drops the queue rather than overwrite that client's changes.
// The next sync_meta through the edge then fails (EIO), as a write-back
// client's next fsync does after a refused batch.

const (
	// DefaultWriteBackWindow is how long a setattr waits at the edge
	// before it is sent upstream at the latest.
	DefaultWriteBackWindow = time.Second
	// wbSendSlack: a queue is sent at the latest this long before the
	// write leases it rests on stop being trusted (renewals extend
	// them while the keys are in use), and a setattr is queued only
	// under leases trusted for twice this.
	wbSendSlack = 300 * time.Millisecond
	// wbBackoff: after a recall of its write lease on a key, the edge
	// takes none of its own on it for this long (another site is using
	// the key; a write-back client backs off the same way).
	wbBackoff = 5 * time.Second
	// wbRetry is how soon a send that failed goes again, at the earliest.
	wbRetry = 50 * time.Millisecond
	// wbMaxOps is the most setattrs sent in one batch.
	wbMaxOps = 1024
	// wbMaxDirs bounds the directories whose attributes the edge keeps.
	wbMaxDirs = 10_000
	// wbCloseWait bounds the sending of the queues at Close.
	wbCloseWait = 5 * time.Second
)

// wbSetAttrBits are the setattrs the edge completes itself: mode and times.
const wbSetAttrBits = uint32(weftpb.SetAttrBits_SETATTR_MODE | weftpb.SetAttrBits_SETATTR_ATIME |
	weftpb.SetAttrBits_SETATTR_MTIME | weftpb.SetAttrBits_SETATTR_ATIME_NOW | weftpb.SetAttrBits_SETATTR_MTIME_NOW)

// wbQueue is a directory's setattrs queued at the edge, and the attributes
// of its files as the edge answered them.
type wbQueue struct {
	dir lease.Key
	// until is, per key the queue rests on (the directory and each file
	// it holds attributes of), how long the edge's write lease there is
	// trusted: it is updated from the lease while held, and kept once a
	// recall removed it (the edge stays the writer until it releases).
	until map[lease.Key]time.Time
	ops   []*weftpb.BatchOp
	attrs map[string]*weftpb.Attr
	timer *time.Timer
	send  chan struct{} // one send at a time, in order (cap 1)
}

// wbRequest returns a setattr the edge may complete itself.
func wbRequest(msg []byte) (*weftpb.SetAttrRequest, bool) {
	var req weftpb.SetAttrRequest
	if proto.Unmarshal(msg, &req) != nil || req.Node == nil || req.Creds == nil {
		return nil, false
	}
	n := req.Node
	if req.Valid == 0 || req.Valid&^wbSetAttrBits != 0 || n.Ino == 0 || n.Parent == 0 || n.Name == "" {
		return nil, false
	}
	return &req, true
}

// setAttr serves a client's setattr: completed here under the edge's
// write leases when it can be, else forwarded (and what its reply says
// of the file remembered, so that the next one can be).
func (u *upstream) setAttr(ctx context.Context, msg, data []byte) ([]byte, error) {
	req, ok := wbRequest(msg)
	if !ok || !u.edge.writeBack {
		resp, _, err := u.forward(ctx, weftpb.MethodSetAttr, msg, data)
		return resp, err
	}
	keys := writeKeys(weftpb.MethodSetAttr, msg)
	u.mu.Lock()
	_, skip := u.mu.wbSkip[core.Ino(req.Node.Ino)]
	u.mu.Unlock()
	if skip {
		// A directory or a file with several links: its attributes are
		// not in an entry a batch can change. No write lease for it.
		resp, _, err := u.forward(ctx, weftpb.MethodSetAttr, msg, data)
		return resp, err
	}
	leased := u.wbLeases(ctx, keys)
	if leased {
		if resp, ok := u.wbQueueSetAttr(ctx, req, keys); ok {
			return resp, nil
		}
	}
	u.mu.Lock()
	epoch := u.mu.wbEpoch
	u.mu.Unlock()
	resp, _, err := u.forward(ctx, weftpb.MethodSetAttr, msg, data)
	if err == nil && leased {
		u.wbLearn(req, keys, resp, epoch)
	}
	return resp, err
}

// wbNeed is how long a write lease must still be trusted to queue under it.
func (u *upstream) wbNeed() time.Duration { return 2 * wbSendSlack }

// wbArmLocked makes sure q is sent by the window's end, and before the
// write leases it rests on stop being trusted; not sooner than floor (a
// send that failed is not tried again at once).
func (u *upstream) wbArmLocked(q *wbQueue, floor time.Duration) {
	if q.timer != nil {
		return
	}
	var until time.Time
	for _, t := range q.until {
		if until.IsZero() || t.Before(until) {
			until = t
		}
	}
	delay := max(min(u.edge.wbWindow, time.Until(until)-wbSendSlack), floor)
	q.timer = time.AfterFunc(delay, func() { u.edge.spawn(func() { u.wbSendInBackground(q) }) })
}

// wbLeases makes sure the edge holds write leases upstream on keys for
// its write-back, unless it gave one back lately (wbBackoff).
func (u *upstream) wbLeases(ctx context.Context, keys []lease.Key) bool {
	u.mu.Lock()
	now := time.Now()
	for _, k := range keys {
		h := u.mu.held[k]
		if until, ok := u.mu.wbBackoff[k]; ok && (h == nil || !h.write) {
			if now.Before(until) {
				u.mu.Unlock()
				return false
			}
			delete(u.mu.wbBackoff, k)
		}
	}
	u.mu.Unlock()
	_, ok := u.ensure(ctx, keys, u.wbNeed(), true)
	return ok
}

// writeLeasedLocked reports whether the edge holds write leases on keys
// trusted for need more, and returns the earliest end of their trust.
func (u *upstream) writeLeasedLocked(keys []lease.Key, need time.Duration) (time.Time, bool) {
	now := time.Now()
	var until time.Time
	for _, k := range keys {
		h := u.mu.held[k]
		if h == nil || !h.write || h.trusted.Sub(now) < need {
			return time.Time{}, false
		}
		if until.IsZero() || h.trusted.Before(until) {
			until = h.trusted
		}
	}
	return until, true
}

// wbQueueSetAttr completes req at the edge if it knows the file's
// attributes and nothing else changes them now; false: forward it.
func (u *upstream) wbQueueSetAttr(ctx context.Context, req *weftpb.SetAttrRequest, keys []lease.Key) ([]byte, bool) {
	dir, name := lease.Key(req.Node.Parent), req.Node.Name
	u.mu.Lock()
	q := u.mu.wb[dir]
	var a *weftpb.Attr
	if q != nil {
		a = q.attrs[name]
	}
	busy := u.wbBusyLocked(keys)
	u.mu.Unlock()
	c := req.Creds
	if a == nil || a.Ino != req.Node.Ino || busy || c.Uid != 0 && c.Uid != a.Uid {
		// Unknown, or a change in flight, or a caller whom only the
		// upstream can answer (EPERM, or a write permission check).
		return nil, false
	}
	// The edge's other clients' leases on the keys first, as a meta
	// server recalls them before it commits (the requester's spared).
	bctx, cancel := context.WithTimeout(ctx, u.term+recallSlack)
	end, err := u.grants.BeginChange(bctx, lease.HolderOf(ctx), keys)
	cancel()
	if err != nil {
		return nil, false
	}
	defer end()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.mu.wb[dir] != q || q.attrs[name] != a || u.wbBusyLocked(keys) {
		return nil, false // forgotten or changed meanwhile
	}
	if _, ok := u.writeLeasedLocked(keys, u.wbNeed()); !ok {
		return nil, false
	}
	now := time.Now()
	na := proto.Clone(a).(*weftpb.Attr)
	creds := core.Creds{UID: c.Uid, GID: c.Gid, Groups: c.Groups}
	applyModeTimes(creds, na, req, now.UnixNano())
	q.ops = append(q.ops, &weftpb.BatchOp{Creds: c, Setattr: &weftpb.BatchSetAttr{Name: name, Ino: req.Node.Ino,
		Valid: req.Valid, Mode: req.Mode, AtimeNs: req.AtimeNs, MtimeNs: req.MtimeNs, TimeNs: now.UnixNano()}})
	q.attrs[name] = na
	for _, k := range keys {
		q.until[k] = u.mu.held[k].trusted
	}
	// Nothing cached under the keys, or read while this ran, is served
	// again: a read now goes upstream, after the queue.
	u.renewRecordsLocked(keys)
	u.edge.metrics.wbQueued.Inc()
	if len(q.ops) >= wbMaxOps {
		u.edge.spawn(func() { u.wbSendInBackground(q) })
	} else {
		u.wbArmLocked(q, 0)
	}
	resp, err := proto.Marshal(&weftpb.SetAttrReply{Attr: na, OldSize: a.Size, Queued: true})
	if err != nil {
		return nil, false
	}
	return resp, true
}

// applyModeTimes applies a change of mode and times to a as the meta
// server does (meta's applySetAttr), at the edge's time now (ns).
func applyModeTimes(c core.Creds, a *weftpb.Attr, req *weftpb.SetAttrRequest, now int64) {
	has := func(b weftpb.SetAttrBits) bool { return req.Valid&uint32(b) != 0 }
	if has(weftpb.SetAttrBits_SETATTR_MODE) {
		a.Mode = a.Mode&core.ModeType | req.Mode&core.ModeBits
		if c.UID != 0 && !c.InGroup(a.Gid) {
			a.Mode &^= core.ModeSetgid
		}
	}
	switch {
	case has(weftpb.SetAttrBits_SETATTR_ATIME_NOW):
		a.AtimeNs = now
	case has(weftpb.SetAttrBits_SETATTR_ATIME):
		a.AtimeNs = req.AtimeNs
	}
	switch {
	case has(weftpb.SetAttrBits_SETATTR_MTIME_NOW):
		a.MtimeNs = now
	case has(weftpb.SetAttrBits_SETATTR_MTIME):
		a.MtimeNs = req.MtimeNs
	}
	a.CtimeNs = now
}

// wbLearn remembers the file's attributes from the reply of a setattr the
// edge forwarded under its write leases on keys, if nothing else changed
// through the edge meanwhile (epoch: the forward's own change counts one)
// and the file's attributes live in its entry (one link, regular), where
// a batch can change them.
func (u *upstream) wbLearn(req *weftpb.SetAttrRequest, keys []lease.Key, resp []byte, epoch uint64) {
	var r weftpb.SetAttrReply
	if proto.Unmarshal(resp, &r) != nil || r.Attr == nil || r.Attr.Ino != req.Node.Ino {
		return
	}
	dir := lease.Key(req.Node.Parent)
	u.mu.Lock()
	defer u.mu.Unlock()
	if !core.IsRegular(r.Attr.Mode) || r.Attr.Nlink != 1 {
		if len(u.mu.wbSkip) >= maxHeld {
			clear(u.mu.wbSkip)
		}
		u.mu.wbSkip[core.Ino(r.Attr.Ino)] = struct{}{}
		return
	}
	if u.mu.wbEpoch != epoch+1 {
		return
	}
	if _, ok := u.writeLeasedLocked(keys, u.wbNeed()); !ok {
		return
	}
	q := u.mu.wb[dir]
	if q == nil {
		if len(u.mu.wb) >= wbMaxDirs {
			return
		}
		q = &wbQueue{dir: dir, until: map[lease.Key]time.Time{}, attrs: map[string]*weftpb.Attr{}, send: make(chan struct{}, 1)}
		u.mu.wb[dir] = q
	}
	q.attrs[req.Node.Name] = r.Attr
	for _, k := range keys {
		q.until[k] = u.mu.held[k].trusted
	}
}

// wbBusyLocked reports whether a change naming one of keys is being
// forwarded.
func (u *upstream) wbBusyLocked(keys []lease.Key) bool {
	for _, k := range keys {
		if u.mu.wbBusy[k] > 0 {
			return true
		}
	}
	return false
}

// wbQueuesLocked returns the queues resting on one of keys (every queue
// if keys is empty: a request that names none may read anything).
func (u *upstream) wbQueuesLocked(keys []lease.Key) []*wbQueue {
	var out []*wbQueue
	for _, q := range u.mu.wb {
		if len(keys) == 0 {
			out = append(out, q)
			continue
		}
		for _, k := range keys {
			if _, ok := q.until[k]; ok {
				out = append(out, q)
				break
			}
		}
	}
	return out
}

// wbFlush sends the queues resting on keys (every queue if keys is
// empty) and waits for them.
func (u *upstream) wbFlush(ctx context.Context, keys []lease.Key) error {
	u.mu.Lock()
	if len(u.mu.wb) == 0 {
		u.mu.Unlock()
		return nil
	}
	qs := u.wbQueuesLocked(keys)
	u.mu.Unlock()
	var first error
	for _, q := range qs {
		if err := u.wbSend(ctx, q); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// wbForgetLocked forgets the attributes of the queues resting on keys
// (every queue if keys is empty): something may have changed them. Their
// queued ops must have been sent.
func (u *upstream) wbForgetLocked(keys []lease.Key) {
	u.mu.wbEpoch++
	for _, q := range u.wbQueuesLocked(keys) {
		if len(q.ops) == 0 {
			delete(u.mu.wb, q.dir)
		} else {
			// Ops queued after the send this change waited for, by a
			// setattr that did not see it in flight: they go, and
			// the attributes are learnt again.
			q.attrs = map[string]*weftpb.Attr{}
		}
	}
}

// wbSendInBackground sends q at the window's end or once it is full.
func (u *upstream) wbSendInBackground(q *wbQueue) {
	ctx, cancel := context.WithTimeout(u.edge.life, u.wbNeed()+acquireWait)
	defer cancel()
	if err := u.wbSend(ctx, q); err != nil {
		u.log.Warn("edge write-back: queued setattrs not sent", "dir", q.dir, "err", err)
	}
}

// wbSend sends what q holds upstream as one batch, on deleg (the edge is
// the writer there), and waits for it. A send that fails for a while (a
// link down, the caller's deadline) puts the ops back, in order, to go
// again (a setattr applied twice, with its own times, changes nothing more)
// and returns the error: what comes after must not overtake them. A queue
// whose write leases are no longer trusted is dropped, not sent: the
// upstream may have given them to another client since; and so is a batch
// the upstream refused. Both are reported at the next sync_meta (wbErr),
// not here: nothing of them is left to overtake.
func (u *upstream) wbSend(ctx context.Context, q *wbQueue) error {
	select {
	case q.send <- struct{}{}:
	case <-ctx.Done():
		return errs.Wrap(errs.Timeout, "edge write-back", "waiting for the send before", ctx.Err())
	}
	defer func() { <-q.send }()
	u.mu.Lock()
	ops := q.ops
	q.ops = nil
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	var until time.Time
	for k, t := range q.until {
		if h := u.mu.held[k]; h != nil && h.write && h.trusted.After(t) {
			t = h.trusted
			q.until[k] = t
		}
		if until.IsZero() || t.Before(until) {
			until = t
		}
	}
	u.mu.Unlock()
	if len(ops) == 0 {
		return nil
	}
	var err error
	if !time.Now().Before(until) {
		err = errs.New(errs.IO, "edge write-back", "%d setattrs in directory %d not sent before the edge's write lease ended: dropped", len(ops), q.dir)
	} else {
		sctx, cancel := context.WithDeadline(ctx, until)
		var reply weftpb.ApplyBatchReply
		err = u.deleg.Call(sctx, weftpb.MethodApplyBatch, &weftpb.ApplyBatchRequest{Dir: uint64(q.dir), Ops: ops}, &reply)
		cancel()
		if err == nil {
			u.edge.metrics.wbBatches.Inc()
			return nil
		}
		if transient(err) && time.Now().Before(until) {
			u.mu.Lock()
			defer u.mu.Unlock()
			q.ops = append(ops, q.ops...)
			u.wbArmLocked(q, wbRetry)
			return errs.Wrap(errs.Unavailable, "edge write-back", "queued setattrs not sent yet", err)
		}
		err = errs.Wrap(errs.IO, "edge write-back", "a batch of setattrs was not applied upstream", err)
	}
	u.edge.metrics.wbLost.Add(float64(len(ops)))
	u.log.Warn("edge write-back: setattrs the edge answered are lost", "dir", q.dir, "ops", len(ops), "err", err)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.mu.wbErr == nil {
		u.mu.wbErr = err
	}
	u.wbForgetLocked([]lease.Key{q.dir})
	return nil
}

// transient reports whether a send may succeed if tried again.
func transient(err error) bool {
	return errs.Is(err, errs.Unavailable) || errs.Is(err, errs.Timeout) || errs.Is(err, errs.Canceled) || errs.Is(err, errs.Busy)
}

// syncMeta serves a client's sync_meta: the edge's queues go upstream
// first, then the upstream makes everything durable (an async meta
// server syncs its log). A setattr the edge answered and then lost since
// the last sync_meta is reported once, here.
func (u *upstream) syncMeta(ctx context.Context, msg, data []byte) ([]byte, error) {
	if err := u.wbFlush(ctx, nil); err != nil {
		return nil, err
	}
	resp, _, err := u.forward(ctx, weftpb.MethodSyncMeta, msg, data)
	u.mu.Lock()
	lost := u.mu.wbErr
	u.mu.wbErr = nil
	u.mu.Unlock()
	if lost != nil {
		return nil, lost
	}
	return resp, err
}

// wbBeforeForward sends the queues a forwarded request may read or
// change, and marks a change in flight (no setattr is queued on its keys
// until it returns). It returns what to call once the reply is in.
func (u *upstream) wbBeforeForward(ctx context.Context, method uint16, msg []byte, keys []lease.Key) (func(), error) {
	if !u.edge.writeBack {
		return func() {}, nil
	}
	switch method {
	case weftpb.MethodLookup, weftpb.MethodGetAttr, weftpb.MethodReadDir:
		rk, _ := readKeys(method, msg)
		return func() {}, u.wbFlush(ctx, rk)
	}
	if !changes[method] {
		return func() {}, u.wbFlush(ctx, keys)
	}
	u.mu.Lock()
	for _, k := range keys {
		u.mu.wbBusy[k]++
	}
	u.mu.Unlock()
	done := func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, k := range keys {
			if u.mu.wbBusy[k]--; u.mu.wbBusy[k] <= 0 {
				delete(u.mu.wbBusy, k)
			}
		}
		u.wbForgetLocked(keys)
	}
	if err := u.wbFlush(ctx, keys); err != nil {
		done()
		return nil, err
	}
	return done, nil
}

// changes are the forwarded methods that may change what a setattr's
// queue knows of its files.
var changes = map[uint16]bool{
	weftpb.MethodCreate: true, weftpb.MethodMkdir: true, weftpb.MethodSymlink: true,
	weftpb.MethodSetAttr: true, weftpb.MethodCommit: true, weftpb.MethodOpen: true,
	weftpb.MethodSetXattr: true, weftpb.MethodRemoveXattr: true, weftpb.MethodApplyBatch: true,
	weftpb.MethodUnlink: true, weftpb.MethodLink: true, weftpb.MethodRmdir: true, weftpb.MethodRename: true,
}

// wbRecalled sends the queues resting on keys whose write leases the
// upstream recalls, before the edge releases them, forgets what they
// knew, and backs off the keys.
func (u *upstream) wbRecalled(keys []lease.Key) {
	if !u.edge.writeBack {
		return
	}
	ctx, cancel := context.WithTimeout(u.edge.life, u.term+acquireWait)
	defer cancel()
	if err := u.wbFlush(ctx, keys); err != nil {
		u.log.Warn("edge write-back: queued setattrs not sent at a recall", "err", err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	until := time.Now().Add(wbBackoff)
	for _, k := range keys {
		u.mu.wbBackoff[k] = until
	}
	if len(u.mu.wbBackoff) > maxHeld {
		now := time.Now()
		for k, t := range u.mu.wbBackoff {
			if !now.Before(t) {
				delete(u.mu.wbBackoff, k)
			}
		}
	}
	u.wbForgetLocked(keys)
}

// wbClose sends every queue at Close, bounded.
func (u *upstream) wbClose(ctx context.Context) {
	if !u.edge.writeBack {
		return
	}
	if err := u.wbFlush(ctx, nil); err != nil {
		u.log.Warn("edge write-back: setattrs lost at close", "err", err)
	}
}
