package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// Read leases (internal/lease has the server's side). A layer that caches
// what the servers said (the FUSE mount: the kernel's entry and attribute
// caches) asks for read leases on what it is about to read, and caches for
// as long as the lease is trusted. The client trusts a lease until
// leaseMargin before its term ends, measured on its monotonic clock from
// when it sent the acquire, so it stops before the server can grant a
// conflicting one even if the recall is lost. On a recall it drops the
// lease, asks the layer above to drop what it cached (OnRecall), and then
// releases the lease (a one-way message). Leases use the client's lock
// session, kept alive by the same keepalives. A client without an OnRecall
// callback, or whose server is in its own process (no connection to call
// back on), never holds leases.

const (
	// leaseAcquireSlack is what an acquire waits beyond a term
	// (Config.LeaseTerm): the server waits for changes in progress and for
	// conflicting holders, at worst a term. A reader that gives up caches
	// nothing.
	leaseAcquireSlack = time.Second
	// recallNotifyWait bounds how long a recall waits for the layer above
	// before it releases the lease anyway. The kernel can block an
	// invalidation behind a request of this mount that is itself waiting
	// for the change being recalled for; without the bound they would wait
	// for each other until the term ends.
	recallNotifyWait = 500 * time.Millisecond
	// releaseTimeout bounds the sending of a release.
	releaseTimeout = time.Second
)

// maxHeldLeases is how many leases the client remembers before it drops
// the ones no longer trusted.
const maxHeldLeases = 4096

// leaseMargin is how long before its term a lease stops being trusted: a
// tenth of the term, and at least 50 ms (clock rates and the time the
// acquire's reply spends in flight are covered, since the term is measured
// from the send).
func leaseMargin(term time.Duration) time.Duration { return max(term/10, 50*time.Millisecond) }

// LeaseKey names a lease: a key (an inode) on one meta server.
type LeaseKey struct {
	Server int
	Ino    core.Ino
}

// heldLease is a read lease the client holds.
type heldLease struct {
	key      LeaseKey
	seq      uint64        // the server's name for the grant
	trusted  time.Time     // monotonic: until when the client relies on it
	term     time.Duration // the grant's term, as the server said
	recalled atomic.Bool
	// prev is the grant of the same key this one replaced, while that
	// may still be trusted: a reply filled under it may still be on its
	// way, and a recall of this grant recalls it too (the server knows
	// one grant per key and session). Guarded by leaseCache.mu.
	prev *heldLease
}

// Lease is a snapshot of the read leases covering one reply. The zero Lease
// covers nothing.
type Lease struct {
	held []*heldLease
	// denied: a server that grants leases granted none (a change of the
	// key was waiting for this client, or the request failed). What the
	// reply says may be about to change: the caller should not cache it.
	denied bool
}

// Denied reports whether a server that grants leases refused this one, as
// opposed to leases being off (no OnRecall, or a server in this process).
func (l Lease) Denied() bool { return l.denied }

// Remaining is how long what the lease covers may still be cached: zero if
// any of its leases was recalled or is no longer trusted.
func (l Lease) Remaining() time.Duration {
	if len(l.held) == 0 {
		return 0
	}
	now := time.Now()
	rem := time.Duration(1<<63 - 1)
	for _, h := range l.held {
		if h.recalled.Load() {
			return 0
		}
		rem = min(rem, h.trusted.Sub(now))
	}
	return max(rem, 0)
}

// recallMark is the latest grant of a key recalled, and when.
type recallMark struct {
	seq uint64
	at  time.Time
}

// recalledKeep is how long a recall is remembered for the replies it may
// have overtaken: longer than any term (an acquire waits at most a term
// and leaseAcquireSlack).
func (c *Client) recalledKeep() time.Duration { return 2 * (c.cfg.LeaseTerm + leaseAcquireSlack) }

// leaseCache is what the client knows of its leases.
type leaseCache struct {
	onRecall atomic.Pointer[func([]LeaseKey)]
	// slowRecalls counts recalls released after recallNotifyWait, before
	// the layer above had invalidated its cache: each is a stall that the
	// bound ended.
	slowRecalls atomic.Uint64
	// answering counts the recalls not yet released, in all and by
	// key; idle is closed when it comes down to zero (nil: nobody waits
	// for that).
	answering struct {
		sync.Mutex
		n     int
		byKey map[LeaseKey]int
		idle  chan struct{}
	}
	mu struct {
		sync.Mutex
		held map[LeaseKey]*heldLease
		// recalled is the latest grant recalled for each key: a reply
		// that a recall of its own grant overtook (the recall may be
		// handled first) is not trusted. An entry goes when a later
		// grant of the key is stored, or after recalledKeep: a reply
		// that old was sent more than a term ago, so it is trusted for
		// no time at all anyway.
		recalled map[LeaseKey]recallMark
	}
}

// OnRecall makes the client take read leases (ReadLease) and registers fn,
// called with the keys of every recall before the client releases them.
// fn must not block for long (the client waits recallNotifyWait at most).
func (c *Client) OnRecall(fn func([]LeaseKey)) { c.leases.onRecall.Store(&fn) }

// SlowRecalls is how many recalls the client released before the layer
// above (OnRecall) had finished, because it took longer than the bound.
func (c *Client) SlowRecalls() uint64 { return c.leases.slowRecalls.Load() }

// LeasesExpired is how many recalled leases the meta servers took back at
// the end of their term because no release came, summed over the servers
// since they started: a change that waited for one waited out a term.
func (c *Client) LeasesExpired(ctx context.Context) (uint64, error) {
	var n uint64
	for _, m := range c.metas {
		var r weftpb.LeaseStatusReply
		if err := call(ctx, m, weftpb.MethodLeaseStatus, &weftpb.LeaseStatusRequest{}, &r); err != nil {
			return 0, err
		}
		n += r.GetExpired()
	}
	return n, nil
}

// LeasesOn reports whether ReadLease may grant leases: a layer registered
// OnRecall and every meta server is reached over a connection (one in this
// process has none to recall a lease over). A layer that caches under
// leases must then cache nothing that no live lease covers.
func (c *Client) LeasesOn() bool {
	if c.leases.onRecall.Load() == nil {
		return false
	}
	for _, addr := range c.cfg.MetaAddrs {
		if c.cfg.Local[addr] != nil {
			return false
		}
	}
	return true
}

// EntryLease is the key of the lease covering name in dir and, for a file
// with one link, its attributes: dir's key on the server of name's
// partition.
func (c *Client) EntryLease(dir core.Ino, name string) LeaseKey {
	if len(c.metas) == 1 {
		return LeaseKey{Ino: dir}
	}
	return LeaseKey{Server: core.NameServer(dir, name, c.maps.bitmap(dir), len(c.metas)), Ino: dir}
}

// DirLeases are the keys of the leases covering every entry of dir (and
// the attributes they embed): dir's key on every meta server, whichever of
// them hold a partition now or later.
func (c *Client) DirLeases(dir core.Ino) []LeaseKey {
	keys := make([]LeaseKey, len(c.metas))
	for i := range keys {
		keys[i] = LeaseKey{Server: i, Ino: dir}
	}
	return keys
}

// InodeLease is the key of the lease covering ino's own record: the
// attributes of a directory or a hard-linked file, on its owner.
func (c *Client) InodeLease(ino core.Ino) LeaseKey {
	return LeaseKey{Server: ino.Server() % len(c.metas), Ino: ino}
}

// AttrLease is the key of the lease covering the attributes a of the node
// ref names: its entry's when they live in the entry, else its own.
func (c *Client) AttrLease(ref Ref, a core.Attr) LeaseKey {
	if a.Mode&core.ModeType != core.ModeDir && a.Nlink <= 1 && ref.Parent != 0 && ref.Name != "" {
		return c.EntryLease(ref.Parent, ref.Name)
	}
	return c.InodeLease(ref.Ino)
}

// ReadLease returns read leases on keys, acquiring those the client does
// not hold or trusts for less than half their term (so that what a reply lets
// the kernel cache is worth caching). It never fails: without
// leases (an error, a server that could not grant in time, leases not
// enabled) the Lease it returns covers nothing.
func (c *Client) ReadLease(ctx context.Context, keys ...LeaseKey) Lease {
	if c.leases.onRecall.Load() == nil {
		return Lease{}
	}
	if h := c.hooks.refuseLease.Load(); h != nil {
		for _, k := range keys {
			if (*h)(k) {
				return Lease{denied: true}
			}
		}
	}
	var out Lease
	need := map[int][]uint64{}
	c.leases.mu.Lock()
	now := time.Now()
	for _, k := range keys {
		h := c.leases.mu.held[k]
		// Half the grant's own term: an edge server grants shorter
		// terms than the cluster's (internal/edge), and a threshold of
		// half the cluster's would renew such a lease on every use.
		if h != nil && !h.recalled.Load() && h.trusted.Sub(now) > h.term/2 {
			out.held = append(out.held, h)
			continue
		}
		need[k.Server] = append(need[k.Server], uint64(k.Ino))
	}
	c.leases.mu.Unlock()
	for server, inos := range need {
		if c.cfg.Local[c.cfg.MetaAddrs[server]] != nil {
			return Lease{} // in this process: no connection to recall over, so no grant
		}
		got := c.acquire(ctx, server, inos)
		if got == nil {
			return Lease{denied: true}
		}
		out.held = append(out.held, got...)
	}
	return out
}

// SetLeaseRefuseHook makes ReadLease refuse every lease for which fn
// returns true, as a server refuses one to a client that owes a release
// while a change of the key is in progress; nil removes it. For tests
// (fusefs).
func (c *Client) SetLeaseRefuseHook(fn func(LeaseKey) bool) {
	if fn == nil {
		c.hooks.refuseLease.Store(nil)
		return
	}
	c.hooks.refuseLease.Store(&fn)
}

// acquire asks server for read leases on inos; nil if it granted none.
func (c *Client) acquire(ctx context.Context, server int, inos []uint64) []*heldLease {
	session, err := c.lockSessionFor(server)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTerm+leaseAcquireSlack)
	defer cancel()
	sent := time.Now()
	var reply weftpb.LeaseAcquireReply
	err = c.metas[server].Call(ctx, weftpb.MethodLeaseAcquire, &weftpb.LeaseAcquireRequest{
		Session: session, Mode: weftpb.LeaseMode_LEASE_READ, Keys: inos}, &reply)
	if err != nil || len(reply.Granted) == 0 {
		c.log.Debug("lease refused", "meta", server, "inos", inos, "err", err)
		return nil
	}
	c.log.Debug("lease granted", "meta", server, "inos", reply.Granted, "seq", reply.Seq)
	// Not locks.answered: a server that forgets a session holding only
	// leases takes nothing the client relies on past the lease's term.
	term := time.Duration(reply.TermMs) * time.Millisecond
	trusted := sent.Add(term - leaseMargin(term))
	c.leases.mu.Lock()
	defer c.leases.mu.Unlock()
	if c.leases.mu.held == nil {
		c.leases.mu.held = make(map[LeaseKey]*heldLease)
	}
	if len(c.leases.mu.held) > maxHeldLeases {
		// Leases that ran out stay until their key is used again; drop
		// them once there are many.
		now := time.Now()
		for k, h := range c.leases.mu.held {
			if !now.Before(h.trusted) {
				delete(c.leases.mu.held, k)
			}
		}
	}
	now := time.Now()
	got := make([]*heldLease, 0, len(reply.Granted))
	for _, ino := range reply.Granted {
		k := LeaseKey{Server: server, Ino: core.Ino(ino)}
		if r, ok := c.leases.mu.recalled[k]; ok {
			if r.seq >= reply.Seq {
				// Recalled already (and released, or about to be).
				return nil
			}
			delete(c.leases.mu.recalled, k)
		}
		if old := c.leases.mu.held[k]; old != nil && old.seq > reply.Seq {
			got = append(got, old) // a later grant overtook this reply
			continue
		}
		h := &heldLease{key: k, seq: reply.Seq, trusted: trusted, term: term}
		if old := c.leases.mu.held[k]; old != nil && now.Before(old.trusted) {
			h.prev = old
			for p := old; p.prev != nil; p = p.prev {
				if !now.Before(p.prev.trusted) {
					p.prev = nil // no longer trusted: nothing to recall
					break
				}
			}
		}
		c.leases.mu.held[k] = h
		got = append(got, h)
	}
	return got
}

// recallMux serves the recalls of meta server server.
func (c *Client) recallMux(server int) *rpc.Mux {
	mux := rpc.NewMux()
	rpc.HandleOneWay(mux, weftpb.MethodLeaseRecall, func(_ context.Context, req *weftpb.LeaseRecallRequest) {
		if c.stalled.Load() {
			return
		}
		c.recalled(server, req.Session, req.Keys, req.Seqs)
	})
	return mux
}

// recalled drops the recalled leases at once (no reply trusts them from
// now on), then, in the background, lets the layer above drop what it
// cached and releases them.
func (c *Client) recalled(server int, session uint64, inos, seqs []uint64) {
	if len(seqs) != len(inos) {
		c.log.Warn("lease recall: keys and grants do not match; ignored", "meta", server)
		return
	}
	c.log.Debug("lease recall", "meta", server, "inos", inos, "seqs", seqs)
	keys := make([]LeaseKey, len(inos))
	c.leases.mu.Lock()
	now := time.Now()
	if c.leases.mu.recalled == nil {
		c.leases.mu.recalled = make(map[LeaseKey]recallMark)
	}
	if len(c.leases.mu.recalled) > 1024 {
		for k, r := range c.leases.mu.recalled {
			if now.Sub(r.at) > c.recalledKeep() {
				delete(c.leases.mu.recalled, k)
			}
		}
	}
	for i, ino := range inos {
		k := LeaseKey{Server: server, Ino: core.Ino(ino)}
		keys[i] = k
		if h := c.leases.mu.held[k]; h != nil {
			// Older grants of the key, which replies may still carry,
			// go with it.
			for p := h.prev; p != nil; p = p.prev {
				if p.seq <= seqs[i] {
					p.recalled.Store(true)
				}
			}
			if h.seq <= seqs[i] {
				h.recalled.Store(true)
				delete(c.leases.mu.held, k)
			}
		}
		if h := c.leases.mu.held[k]; h == nil {
			r := c.leases.mu.recalled[k]
			c.leases.mu.recalled[k] = recallMark{seq: max(r.seq, seqs[i]), at: now}
		}
	}
	c.leases.mu.Unlock()
	lost := c.wbLose(inos)
	c.leases.answeringAdd(keys, 1)
	go func() {
		defer c.leases.answeringAdd(keys, -1)
		// Queued write-back changes reach the server before the lease
		// goes: whoever the recall is for sees them.
		c.wbFlushRecalled(lost)
		if fn := c.leases.onRecall.Load(); fn != nil {
			done := make(chan struct{})
			go func() {
				defer close(done)
				(*fn)(keys)
			}()
			t := time.NewTimer(recallNotifyWait)
			select {
			case <-done:
			case <-t.C:
				c.leases.slowRecalls.Add(1)
				c.log.Debug("lease recall: the cache's invalidation is slow; releasing anyway", "meta", server)
			}
			t.Stop()
		}
		c.release(server, session, inos, seqs)
	}()
}

func (lc *leaseCache) answeringAdd(keys []LeaseKey, d int) {
	a := &lc.answering
	a.Lock()
	defer a.Unlock()
	if a.byKey == nil {
		a.byKey = make(map[LeaseKey]int)
	}
	for _, k := range keys {
		if a.byKey[k] += d; a.byKey[k] == 0 {
			delete(a.byKey, k)
		}
	}
	if a.n += d; a.n == 0 && a.idle != nil {
		close(a.idle)
		a.idle = nil
	}
}

// WaitRecalls waits, at most d, until the client has released every lease
// recalled from it so far, and reports whether it did; at once false if a
// recall of key is among them. A server refuses a read lease at once to a
// client that owes a release while a change of the key is in progress (the
// caller may be a request the invalidation that release waits for is
// blocked behind: a recall of the very key it asks for); once it owes
// nothing, the server has the acquire wait for the change instead, and
// what the caller then reads is the change's result.
func (c *Client) WaitRecalls(ctx context.Context, d time.Duration, key LeaseKey) bool {
	a := &c.leases.answering
	a.Lock()
	if a.byKey[key] > 0 {
		a.Unlock()
		return false
	}
	if a.n == 0 {
		a.Unlock()
		return true
	}
	if a.idle == nil {
		a.idle = make(chan struct{})
	}
	idle := a.idle
	a.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// release gives the grants seqs of leases inos back to server (one-way).
func (c *Client) release(server int, session uint64, inos, seqs []uint64) {
	ctx, cancel := context.WithTimeout(c.life, releaseTimeout)
	defer cancel()
	err := c.metas[server].Send(ctx, weftpb.MethodLeaseRelease, &weftpb.LeaseReleaseRequest{Session: session, Keys: inos, Seqs: seqs})
	c.log.Debug("lease released", "meta", server, "inos", inos, "seqs", seqs, "err", err)
}
