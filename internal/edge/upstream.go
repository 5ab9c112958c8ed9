package edge

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

const (
	// acquireWait bounds an upstream lease acquire (as a client's): the
	// upstream waits at most a term for conflicting holders.
	acquireWait = 3 * time.Second
	// releaseTimeout bounds the sending of an upstream release.
	releaseTimeout = time.Second
	// recallSlack is how much longer than the clients' term a recall
	// waits for their releases (their grants end by then anyway).
	recallSlack = 100 * time.Millisecond
	// renewAhead: a lease in use is renewed in the background once it is
	// trusted for less than a client's grant needs and this much more (a
	// round trip upstream, with room).
	renewAhead = 300 * time.Millisecond
	// maxHeld is how many upstream leases the edge remembers before it
	// drops the ones no longer trusted.
	maxHeld = 100_000
)

// margin is how long before its term the edge stops trusting an upstream
// lease, as a client does (internal/client: a tenth of the term, at least
// 50 ms, counted from the acquire's send).
func margin(term time.Duration) time.Duration { return max(term/10, 50*time.Millisecond) }

// upstream is the edge's side of one upstream meta server: the listener's
// handlers, the connections to it, the edge's leases there, the replies
// cached under them and the clients' leases granted on its keys.
type upstream struct {
	index   int
	servers int    // upstream meta servers
	session uint64 // the edge's read leases (cache connection)
	// wsession holds the edge's write leases, on the deleg connection
	// (delegate.go).
	wsession uint64
	log      *slog.Logger
	term     time.Duration // of the clients' leases
	edge     *Server
	// fwd carries the clients' requests; cache carries the edge's lease
	// acquires and releases, and brings the recalls back. Separate, so
	// that a forwarded change (requested over fwd) recalls the edge's
	// leases like anyone's: a server spares only the requester's.
	fwd, cache *rpc.Peer
	// deleg holds the edge's write leases upstream and carries the
	// clients' changes under them (delegate.go): the upstream spares the
	// leases of the connection a change comes on.
	deleg  *rpc.Peer
	grants *lease.Service
	// ignoreRecalls: Config.ignoreRecalls (a broken edge, for a test).
	ignoreRecalls bool

	mu struct {
		sync.Mutex
		held     map[lease.Key]*upLease
		recalled map[lease.Key]recallMark
		replies  map[string]*cachedReply
		byKey    map[lease.Key]map[string]struct{}
		inflight map[lease.Key][]*inflight // clients' changes being forwarded (inflight.go)
		renewing map[lease.Key]bool        // background renewals in flight
		// wpending counts the recalls of write leases being passed to
		// the clients: until the edge releases upstream it is still the
		// writer there, and its clients' flushes go on deleg.
		wpending map[lease.Key]int

		// The edge's own write-back (writeback.go): the queues by
		// directory, changes being forwarded by key, keys recalled
		// lately, the count of forwarded changes and forgets (wbLearn),
		// and the first loss since the last sync_meta.
		wb        map[lease.Key]*wbQueue
		wbBusy    map[lease.Key]int
		wbBackoff map[lease.Key]time.Time
		wbEpoch   uint64
		wbErr     error
		// wbSkip: files found not to be written back (directories,
		// hard-linked files, not regular), so that their setattrs take
		// no write lease. Inode numbers are never reused.
		wbSkip map[core.Ino]struct{}
	}
}

// upLease is a lease the edge holds upstream: a read lease (cache
// session) or a write lease (wsession), never both on one key, since the
// upstream grants a write lease only once every read lease on the key is
// given back. A recall removes it from held; a renewal updates it in
// place, so a pointer still in held means no recall since it was taken. A
// change the edge forwards under its write lease replaces the pointer
// (delegate.go): no recall tells the edge of it.
type upLease struct {
	seq     uint64
	trusted time.Time // monotonic
	since   time.Time // when the edge learnt of the grant: it covers reads sent after
	write   bool
}

// recallMark is the latest grant of a key recalled, and when: an acquire
// reply the recall overtook is not trusted.
type recallMark struct {
	seq uint64
	at  time.Time
}

// recalledKeep is how long a recall mark is kept: longer than an acquire
// may wait.
const recalledKeep = 2 * acquireWait

func newUpstream(s *Server, index int, addr string, session, wsession uint64, cfg Config) *upstream {
	u := &upstream{index: index, servers: len(cfg.Upstream.Meta), session: session, wsession: wsession,
		log: cfg.Log.With("meta", index), term: cfg.Term, edge: s, ignoreRecalls: cfg.ignoreRecalls}
	u.fwd = rpc.NewPeer(addr, cfg.Dial)
	cacheOpts := cfg.Dial
	cacheOpts.Mux = u.recallMux()
	u.cache = rpc.NewPeer(addr, cacheOpts)
	u.deleg = rpc.NewPeer(addr, cacheOpts)
	u.grants = lease.New(lease.Config{Log: u.log, Term: cfg.Term, Grace: -1})
	u.mu.held = make(map[lease.Key]*upLease)
	u.mu.recalled = make(map[lease.Key]recallMark)
	u.mu.replies = make(map[string]*cachedReply)
	u.mu.byKey = make(map[lease.Key]map[string]struct{})
	u.mu.inflight = make(map[lease.Key][]*inflight)
	u.mu.renewing = make(map[lease.Key]bool)
	u.mu.wpending = make(map[lease.Key]int)
	u.mu.wb = make(map[lease.Key]*wbQueue)
	u.mu.wbBusy = make(map[lease.Key]int)
	u.mu.wbBackoff = make(map[lease.Key]time.Time)
	u.mu.wbSkip = make(map[core.Ino]struct{})
	return u
}

func (u *upstream) close() {
	u.fwd.Close()
	u.cache.Close()
	u.deleg.Close()
}

// ensure returns the edge's upstream leases on keys, acquiring those it
// does not hold or trusts for less than need; false if the upstream
// granted not all of them. write asks for write leases; a read is served
// by either. A write lease the edge holds is renewed as one: asking for a
// read lease on the cache session would recall it.
func (u *upstream) ensure(ctx context.Context, keys []lease.Key, need time.Duration, write bool) ([]*upLease, bool) {
	out := make([]*upLease, len(keys))
	var missing, renew []uint64
	u.mu.Lock()
	now := time.Now()
	for i, k := range keys {
		h := u.mu.held[k]
		switch {
		case h != nil && h.trusted.Sub(now) >= need && (h.write || !write):
			out[i] = h
		case write || h != nil && h.write && h.trusted.After(now):
			renew = append(renew, uint64(k))
		default:
			missing = append(missing, uint64(k))
		}
	}
	if len(missing)+len(renew) == 0 {
		u.renewSoonLocked(keys, now)
	}
	u.mu.Unlock()
	if len(missing)+len(renew) == 0 {
		return out, true
	}
	if len(missing) > 0 && !u.acquire(ctx, missing, false) || len(renew) > 0 && !u.acquire(ctx, renew, true) {
		return nil, false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	now = time.Now()
	for i, k := range keys {
		h := u.mu.held[k]
		if h == nil || h.trusted.Sub(now) < need || write && !h.write {
			return nil, false // recalled already, or the acquire waited too long
		}
		out[i] = h
	}
	return out, true
}

// acquire asks the upstream for read leases (on the cache session) or
// write leases (on wsession) on inos; false if it granted none.
func (u *upstream) acquire(ctx context.Context, inos []uint64, write bool) bool {
	ctx, cancel := context.WithTimeout(ctx, acquireWait)
	defer cancel()
	sent := time.Now()
	peer, session, mode := u.cache, u.session, weftpb.LeaseMode_LEASE_READ
	if write {
		peer, session, mode = u.deleg, u.wsession, weftpb.LeaseMode_LEASE_WRITE
	}
	var reply weftpb.LeaseAcquireReply
	err := peer.Call(ctx, weftpb.MethodLeaseAcquire, &weftpb.LeaseAcquireRequest{
		Session: session, Mode: mode, Keys: inos}, &reply)
	if err != nil || len(reply.Granted) == 0 {
		return false
	}
	term := time.Duration(reply.TermMs) * time.Millisecond
	trusted := sent.Add(term - margin(term))
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.mu.held) > maxHeld {
		for k, h := range u.mu.held {
			if !sent.Before(h.trusted) {
				delete(u.mu.held, k)
			}
		}
	}
	for _, ino := range reply.Granted {
		k := lease.Key(ino)
		if r, ok := u.mu.recalled[k]; ok {
			if r.seq >= reply.Seq {
				return false // the recall overtook this reply
			}
			delete(u.mu.recalled, k)
		}
		h := u.mu.held[k]
		switch {
		case h == nil || h.write != write && reply.Seq > h.seq:
			// A write lease is granted only once the read lease is
			// given back, and a read lease once the write lease is: a
			// new lease, and nothing cached under the old one holds.
			u.mu.held[k] = &upLease{seq: reply.Seq, trusted: trusted, since: time.Now(), write: write}
		case h.write != write:
			// A reply older than the lease held (a renewal of a
			// lease since replaced): it changes nothing.
		case reply.Seq > h.seq:
			// A renewal: the same lease goes on, no recall came between.
			h.seq = reply.Seq
			if trusted.After(h.trusted) {
				h.trusted = trusted
			}
		}
	}
	return true
}

// current reports whether each of hs is still the edge's lease on keys[i]
// (no recall since) and trusted until at least until.
func (u *upstream) current(keys []lease.Key, hs []*upLease, until time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.currentLocked(keys, hs, until)
}

func (u *upstream) currentLocked(keys []lease.Key, hs []*upLease, until time.Time) bool {
	for i, k := range keys {
		h := u.mu.held[k]
		if h == nil || h != hs[i] || !until.Before(h.trusted) {
			return false
		}
	}
	return true
}

// renewSoonLocked renews, in the background, the leases on keys in use
// that will soon be trusted for less than a client's grant needs, so that
// a key in steady use is answered here without waiting for the upstream.
// A renewal is the same lease going on (no recall came between), so what
// was cached under it stays valid.
func (u *upstream) renewSoonLocked(keys []lease.Key, now time.Time) {
	var due [2][]uint64 // read, write
	for _, k := range keys {
		h := u.mu.held[k]
		if h == nil || u.mu.renewing[k] || h.trusted.Sub(now) >= u.term+renewMargin+renewAhead {
			continue
		}
		u.mu.renewing[k] = true
		i := 0
		if h.write {
			i = 1
		}
		due[i] = append(due[i], uint64(k))
	}
	for i, inos := range due {
		if len(inos) == 0 {
			continue
		}
		u.edge.spawn(func() {
			ctx, cancel := context.WithTimeout(u.edge.life, acquireWait)
			defer cancel()
			u.acquire(ctx, inos, i == 1)
			u.mu.Lock()
			defer u.mu.Unlock()
			for _, k := range inos {
				delete(u.mu.renewing, lease.Key(k))
			}
		})
	}
}

// heldSince returns the edge's current leases on keys if each was held
// before t (so it covers a read sent at t) and is trusted for need more.
func (u *upstream) heldSince(keys []lease.Key, t time.Time, need time.Duration) ([]*upLease, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]*upLease, len(keys))
	now := time.Now()
	for i, k := range keys {
		h := u.mu.held[k]
		if h == nil || !h.since.Before(t) || h.trusted.Sub(now) < need {
			return nil, false
		}
		out[i] = h
	}
	return out, true
}

// recallMux serves the upstream's recalls on the cache connection.
func (u *upstream) recallMux() *rpc.Mux {
	mux := rpc.NewMux()
	rpc.HandleOneWay(mux, weftpb.MethodLeaseRecall, func(_ context.Context, req *weftpb.LeaseRecallRequest) {
		u.recalled(req.Session, req.Keys, req.Seqs)
	})
	return mux
}

// recalled drops the recalled leases and what was cached under them at
// once, then, in the background, recalls the clients' leases on the keys,
// waits for their releases (at most their term) and releases upstream.
func (u *upstream) recalled(session uint64, inos, seqs []uint64) {
	if session != u.session && session != u.wsession || len(inos) != len(seqs) {
		u.log.Warn("lease recall for another session, or keys and grants that do not match; ignored", "session", session)
		return
	}
	if session == u.wsession {
		u.edge.metrics.writeRecalled.Add(float64(len(inos)))
	}
	if u.ignoreRecalls {
		peer := u.cache
		if session == u.wsession {
			peer = u.deleg
		}
		u.edge.spawn(func() {
			ctx, cancel := context.WithTimeout(u.edge.life, releaseTimeout)
			defer cancel()
			_ = peer.Send(ctx, weftpb.MethodLeaseRelease, &weftpb.LeaseReleaseRequest{Session: session, Keys: inos, Seqs: seqs})
		})
		return
	}
	keys := make([]lease.Key, len(inos))
	u.mu.Lock()
	now := time.Now()
	if len(u.mu.recalled) > 1024 {
		for k, r := range u.mu.recalled {
			if now.Sub(r.at) > recalledKeep {
				delete(u.mu.recalled, k)
			}
		}
	}
	down := keys[:0:0]
	for i, ino := range inos {
		k := lease.Key(ino)
		keys[i] = k
		if h := u.mu.held[k]; h == nil || h.seq <= seqs[i] {
			down = append(down, k)
		}
		if h := u.mu.held[k]; h != nil && h.seq <= seqs[i] {
			delete(u.mu.held, k)
			u.dropRepliesLocked(k)
		}
		if session == u.wsession {
			u.mu.wpending[k]++
		}
		if u.mu.held[k] == nil {
			r := u.mu.recalled[k]
			u.mu.recalled[k] = recallMark{seq: max(r.seq, seqs[i]), at: now}
		}
	}
	// A recall of a lease the edge has since replaced by a newer one (a
	// read lease's, overtaken by the write lease's grant) recalls no
	// client: their grants rest on the newer one.
	var groups map[lease.Holder][]lease.Key
	if session == u.wsession {
		// A write lease is recalled from every client, the one with a
		// change in flight too: the recall may be for another site's
		// change that reads what the holder has queued (an unlink that
		// would find nothing, an exclusive create), and sparing the
		// holder let that change run before the queue reached the
		// upstream (linz_test.go found it). The holder needs no sparing:
		// it answers by sending its queue, which goes on deleg while
		// wpending counts the key, and its own change in flight there
		// takes no lease of the edge.
		groups = map[lease.Holder][]lease.Key{nil: down}
	} else {
		groups = u.spareLocked(down)
	}
	u.mu.Unlock()
	peer := u.cache
	if session == u.wsession {
		peer = u.deleg
	}
	u.edge.spawn(func() {
		// The clients' leases last u.term from their grant: the wait
		// ends by then whatever they do. A client's write lease is
		// given back once its queued changes are sent (through this
		// edge, on deleg while wpending counts the key).
		u.recallAllDownstream(groups)
		if session == u.wsession {
			// The edge's own queued setattrs on the keys go before
			// it gives them back (writeback.go).
			u.wbRecalled(keys)
		}
		ctx, cancel := context.WithTimeout(u.edge.life, releaseTimeout)
		defer cancel()
		_ = peer.Send(ctx, weftpb.MethodLeaseRelease, &weftpb.LeaseReleaseRequest{Session: session, Keys: inos, Seqs: seqs})
		if session != u.wsession {
			return
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, k := range keys {
			if u.mu.wpending[k]--; u.mu.wpending[k] <= 0 {
				delete(u.mu.wpending, k)
			}
		}
	})
}
