package meta

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// Operations that span meta servers (DESIGN: namespace, cross-server
// operations). The server that receives the request coordinates: it runs the
// same operation code as a local one, but a record of another server is read
// there (PeerGet) under that server's stripe lock, taken for the operation
// (PeerLock), and the writes for that server are collected. Locks are taken
// in one global order: the cluster's directory-move lock (server 0's
// renameMu) first, then servers by id, stripes ascending within a server; a
// txn that finds it needs more releases everything and starts again, so two
// coordinators never wait for each other. Local operations never wait on
// another server while they hold a lock.
//
// The commit is a redo intent: the coordinator writes every server's writes
// (its own as a Pebble batch, the others' as KeyOps) in one synced record,
// sends each participant its writes (PeerApply, which also releases that
// participant's locks), then applies its own batch and deletes the intent in
// one synced batch. A coordinator that restarts applies the intents it finds
// again; a participant that cannot be reached keeps its part of the intent,
// retried in the background. Writes are whole-key sets and deletes, so
// applying one twice is applying it once. A participant applies them only
// under the operation's locks, so that a late replay cannot overwrite a
// later operation (fence.go).

const (
	peerTimeout = 10 * time.Second
	// lockLease bounds how long a participant holds locks for a coordinator
	// that neither applies nor releases them (it died mid-operation).
	lockLease = 30 * time.Second
	// replayInterval is how often unfinished intents and splits are retried.
	replayInterval = time.Second
)

type gigaState struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	txSeq     atomic.Uint64
	firstTxid uint64 // of this life of the server
	splits    atomic.Uint64
	redirects atomic.Uint64
	moving    movingSet // partitions splitting now (splitmove.go)

	mu struct {
		sync.Mutex
		held      map[uint64]*heldLocks // locks held for remote coordinators, by txid
		splitting map[core.Ino]bool     // directories with a split queued or running
	}
	kick chan struct{} // wakes the replayer
	// recovered is closed once the server admits writes (recovery.go).
	recovered chan struct{}
	// replayMu makes replays of intents one at a time: the replay loop's
	// and those PeerRelease asks for.
	replayMu sync.Mutex
}

// heldLocks are the locks a participant holds for one coordinator's txn.
type heldLocks struct {
	stripes  []int
	renameMu bool
	timer    *time.Timer
	state    lockState
	applied  bool // the txn's writes are in (fence.go)
}

type lockState int

const (
	lockHeld     lockState = iota
	lockApplying           // a PeerApply is writing under them
	lockExpiring           // being fenced and released (fence.go)
)

// distState marks a txn that runs distributed.
type distState struct {
	txid     uint64
	renameMu bool // holds the cluster's directory-move lock (server 0's)
}

// remoteTx is what a distributed txn holds on one other server.
type remoteTx struct {
	held []int
	ops  []*weftpb.KeyOp
}

func (s *Server) initGiga(crashed bool) {
	g := &s.giga
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.recovered = make(chan struct{})
	if !crashed || s.n == 1 {
		close(g.recovered)
	}
	g.mu.held = map[uint64]*heldLocks{}
	g.mu.splitting = map[core.Ino]bool{}
	g.kick = make(chan struct{}, 1)
	// Transaction ids: server id in the top 16 bits, then a counter that
	// starts from the clock in microseconds (it wraps after 8.9 years), so
	// that a restarted server's ids are above its previous life's: its
	// restart releases the locks below its first (PeerRelease). The real
	// clock, not Config.Now: ids, not times.
	g.txSeq.Store(uint64(time.Now().UnixMicro()) & (1<<48 - 1))
	g.firstTxid = s.txid(g.txSeq.Load() + 1)
	if s.n > 1 {
		for i, addr := range s.cfg.Peers {
			if i == s.cfg.ID {
				s.peers = append(s.peers, nil)
				continue
			}
			s.peers = append(s.peers, rpc.NewPeer(addr, s.dialOptions()))
		}
	}
	g.wg.Add(1)
	go s.replayLoop(crashed && s.n > 1)
}

// txid is this server's transaction id with sequence number seq.
func (s *Server) txid(seq uint64) uint64 { return uint64(s.cfg.ID)<<48 | seq&(1<<48-1) }

func (s *Server) closeGiga() {
	g := &s.giga
	g.cancel()
	g.wg.Wait()
	for _, p := range s.peers {
		if p != nil {
			p.Close()
		}
	}
	// Locks held for coordinators die with this process: fence them.
	lost := map[uint64]*heldLocks{}
	g.mu.Lock()
	for txid, h := range g.mu.held {
		h.state = lockExpiring
		lost[txid] = h
	}
	g.mu.Unlock()
	s.loseLocks("close", lost)
}

// owner is the meta server that holds ino's standalone record (and, for a
// directory, its partition 0).
func (s *Server) owner(op string, ino core.Ino) (int, error) {
	if s.n == 1 {
		return s.cfg.ID, nil
	}
	if ino.Server() >= s.n {
		return 0, errs.New(errs.Stale, op, "inode %d names meta server %d of %d", ino, ino.Server(), s.n)
	}
	return ino.Server(), nil
}

// ownerOf is owner for an ino already known to be valid.
func (s *Server) ownerOf(ino core.Ino) int {
	srv, err := s.owner("", ino)
	if err != nil {
		return s.cfg.ID
	}
	return srv
}

// wrongServer is the answer to a request for a name this server's partition
// does not hold: the message is exactly "bitmap " and the server's bitmap in
// hex, for the client to merge (docs/wire.md).
func wrongServer(bitmap []byte) error {
	return &errs.Error{Kind: errs.WrongServer, Msg: "bitmap " + hex.EncodeToString(bitmap)}
}

// errOwner is the answer to a single-node request routed by an entry whose
// node's attributes live with the node's owner on another server: the
// message is exactly "owner", and the client asks the owner by ino.
var errOwner = &errs.Error{Kind: errs.WrongServer, Msg: "owner"}

func (s *Server) peer(op string, srv int) (*rpc.Peer, error) {
	if srv < 0 || srv >= len(s.peers) || s.peers[srv] == nil {
		return nil, errs.New(errs.Invalid, op, "no meta server %d", srv)
	}
	return s.peers[srv], nil
}

// peerCall calls server srv, bounded by ctx, by peerTimeout and by this
// server's life. ctx is the caller's for what a txn does before it commits
// (locks, reads: a caller that gave up stops them), and the server's own
// (s.giga.ctx) for what must finish once a commit has begun.
func (s *Server) peerCall(ctx context.Context, op string, srv int, method uint16, req, resp proto.Message) error {
	p, err := s.peer(op, srv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	stop := context.AfterFunc(s.giga.ctx, cancel)
	defer stop()
	if err := p.Call(ctx, method, req, resp); err != nil {
		return errs.Wrap(errs.KindOf(err), op, "meta server "+itoa(srv), err)
	}
	return nil
}

// peerGet reads a record of server srv into m; found is false when absent.
func (s *Server) peerGet(ctx context.Context, op string, srv int, kind weftpb.PeerGetRequest_Kind, ino core.Ino, name string, m proto.Message) (bool, error) {
	var r weftpb.PeerGetReply
	if err := s.peerCall(ctx, op, srv, weftpb.MethodPeerGet, &weftpb.PeerGetRequest{Kind: kind, Ino: uint64(ino), Name: name}, &r); err != nil {
		return false, err
	}
	if !r.Found {
		return false, nil
	}
	if err := proto.Unmarshal(r.Record, m); err != nil {
		return false, errs.Wrap(errs.Protocol, op, "meta server "+itoa(srv), err)
	}
	return true, nil
}

// remoteOp queues a write for server srv, whose locks the txn holds.
func (t *txn) remoteOp(srv int, op *weftpb.KeyOp) {
	rt := t.remote[srv]
	if rt == nil {
		// Writes reach another server only through records read there
		// under its locks, which made the txn distributed.
		panic("meta: write for server " + itoa(srv) + " outside a distributed txn: " + string(debug.Stack()))
	}
	rt.ops = append(rt.ops, op)
}

// lockSet is what a distributed txn locks: stripes by server.
type lockSet map[int][]int

func (l lockSet) add(srv, stripe int) { l[srv] = addStripe(l[srv], stripe) }

// distUpdate runs fn as a distributed txn, starting with the locks a local
// attempt found it needs.
func (s *Server) distUpdate(ctx context.Context, op string, locks lockSet, renameMu bool, fn func(t *txn) error) error {
	for attempt, waits := 0, 0; ; attempt++ {
		if attempt-waits > 64 {
			return errs.New(errs.Busy, op, "could not settle the locks it needs")
		}
		t := &txn{s: s, ctx: ctx, op: op, b: s.db.NewBatch(), now: s.nowNs(),
			dist:   &distState{txid: s.txid(s.giga.txSeq.Add(1))},
			remote: map[int]*remoteTx{}}
		err := s.distLock(t, locks, renameMu)
		if err == nil {
			t.now = s.nowNs()
			err = fn(t)
		}
		var rl *relockError
		if err == nil {
			t.flush()
			return s.distCommit(t)
		}
		s.distRelease(t)
		s.release(t.b) // and its read hints: pebble reuses the batch
		switch {
		case isMoving(err):
			// A name it needs is being split away, here or there.
			if err := s.awaitMove(ctx, op, err, waits); err != nil {
				return err
			}
			waits++
		case errors.As(err, &rl) && rl.renameMu:
			renameMu = true
		case errors.As(err, &rl):
			locks.add(rl.srv, stripeOf(rl.ino))
		default:
			return err
		}
	}
}

// distLock takes the txn's locks in the global order. On failure the caller
// releases what was taken.
func (s *Server) distLock(t *txn, locks lockSet, renameMu bool) error {
	if renameMu {
		if s.cfg.ID == 0 {
			s.renameMu.Lock()
			t.renameMu = true
		} else {
			if err := s.peerCall(t.ctx, t.op, 0, weftpb.MethodPeerLock, &weftpb.PeerLockRequest{Txid: t.dist.txid, RenameMu: true}, &weftpb.Empty{}); err != nil {
				return err
			}
			t.remote[0] = &remoteTx{}
		}
		t.dist.renameMu = true
	}
	srvs := make([]int, 0, len(locks))
	for srv := range locks {
		srvs = append(srvs, srv)
	}
	slices.Sort(srvs)
	for _, srv := range srvs {
		stripes := locks[srv]
		if srv == s.cfg.ID {
			for _, st := range stripes {
				s.locks[st].Lock()
			}
			t.held = slices.Clone(stripes)
			continue
		}
		req := &weftpb.PeerLockRequest{Txid: t.dist.txid}
		for _, st := range stripes {
			req.Stripes = append(req.Stripes, uint32(st))
		}
		// Known before the call: a call that fails (its caller gave up)
		// may still have taken the locks there, and the release must
		// reach them.
		rt := t.remote[srv]
		if rt == nil {
			rt = &remoteTx{}
			t.remote[srv] = rt
		}
		if err := s.peerCall(t.ctx, t.op, srv, weftpb.MethodPeerLock, req, &weftpb.Empty{}); err != nil {
			return err
		}
		rt.held = slices.Clone(stripes)
	}
	return nil
}

// distRelease releases every lock of a txn that does not commit.
func (s *Server) distRelease(t *txn) {
	for srv := range t.remote {
		if err := s.peerCall(s.giga.ctx, t.op, srv, weftpb.MethodPeerUnlock, &weftpb.PeerUnlockRequest{Txid: t.dist.txid}, &weftpb.Empty{}); err != nil {
			s.log.Warn("meta: releasing remote locks failed; they expire", "server", srv, "err", err)
		}
	}
	s.releaseLocal(t)
}

func (s *Server) releaseLocal(t *txn) {
	for j := len(t.held) - 1; j >= 0; j-- {
		s.locks[t.held[j]].Unlock()
	}
	t.held = nil
	if t.renameMu {
		s.renameMu.Unlock()
		t.renameMu = false
	}
}

// distCommit commits a distributed txn through its intent.
func (s *Server) distCommit(t *txn) error {
	defer s.release(t.b)
	intent := &weftpb.Intent{Op: t.op, LocalBatch: slices.Clone(t.b.Repr())}
	srvs := make([]int, 0, len(t.remote))
	for srv := range t.remote {
		srvs = append(srvs, srv)
	}
	slices.Sort(srvs)
	for _, srv := range srvs {
		if ops := t.remote[srv].ops; len(ops) > 0 {
			intent.Servers = append(intent.Servers, &weftpb.ServerOps{Server: uint32(srv), Ops: ops})
		}
	}
	key := intentKey(t.dist.txid)
	if len(intent.Servers) > 0 {
		if err := s.setSync(t.op, key, mustMarshal(intent)); err != nil {
			s.distRelease(t)
			return err
		}
		if err := s.failpoint(FailDistIntentWritten); err != nil {
			s.releaseLocal(t)
			return err
		}
	}
	// Every participant keeps its locks until all writes are in, the
	// coordinator's included: server 0's directory-move lock in particular
	// must not let the next move read parent pointers half updated.
	var left []*weftpb.ServerOps
	missing := map[int]bool{} // keep their locks for the replay (fence.go)
	for _, srv := range srvs {
		ops := t.remote[srv].ops
		if len(ops) == 0 {
			continue
		}
		err := s.peerCall(s.giga.ctx, t.op, srv, weftpb.MethodPeerApply, &weftpb.PeerApplyRequest{Txid: t.dist.txid, Ops: ops, KeepLocks: true}, &weftpb.Empty{})
		if errs.KindOf(err) == errs.Stale {
			// This txn outlived its locks there: the replay decides
			// whether it goes on or is abandoned, so it is not
			// acknowledged.
			s.releaseLocal(t)
			s.kickReplay()
			return errs.Wrap(errs.Timeout, t.op, "", err)
		}
		if err != nil {
			s.log.Warn("meta: cross-server write deferred", "op", t.op, "server", srv, "err", err)
			left = append(left, &weftpb.ServerOps{Server: uint32(srv), Ops: ops})
			missing[srv] = true
		}
	}
	if err := s.failpoint(FailDistParticipantsDone); err != nil {
		s.releaseLocal(t)
		return err
	}
	var err error
	defer func() {
		if err != nil && len(intent.Servers) > 0 {
			// The intent stays for a replay, which needs the
			// participants' locks: they expire instead (fence.go).
			return
		}
		for _, srv := range srvs {
			if missing[srv] {
				continue
			}
			if err := s.peerCall(s.giga.ctx, t.op, srv, weftpb.MethodPeerUnlock, &weftpb.PeerUnlockRequest{Txid: t.dist.txid}, &weftpb.Empty{}); err != nil {
				s.log.Warn("meta: releasing remote locks failed; they expire", "server", srv, "err", err)
			}
		}
	}()
	if len(intent.Servers) > 0 {
		if len(left) == 0 {
			t.b.Delete(key, nil)
		} else {
			t.b.Set(key, mustMarshal(&weftpb.Intent{Op: t.op, Servers: left}), nil)
			s.kickReplay()
		}
	}
	err = s.commitFor(t.ctx, t.op, t.b)
	if err == nil {
		s.addCounts(t)
	}
	s.releaseLocal(t)
	if err == nil {
		for _, dir := range t.grown {
			s.queueSplit(dir)
		}
	}
	return err
}

func (s *Server) kickReplay() {
	select {
	case s.giga.kick <- struct{}{}:
	default:
	}
}

// replayLoop finishes intents and splits left by a crash or by a server that
// could not be reached, and on start tells the other servers to drop locks
// this server's previous life held there.
func (s *Server) replayLoop(crashed bool) {
	g := &s.giga
	defer g.wg.Done()
	t := time.NewTicker(replayInterval)
	defer t.Stop()
	for released := false; ; {
		pending, err := s.replayOnce(-1)
		switch {
		case released || s.n == 1:
		case crashed:
			// Only now: the replay needs the locks the previous life
			// of this server still holds elsewhere (fence.go).
			released = true
			s.recover()
		default:
			released = true
			for srv := range s.n {
				if srv != s.cfg.ID {
					_ = s.releaseOn(g.ctx, srv)
				}
			}
		}
		if err != nil && g.ctx.Err() == nil {
			s.log.Warn("meta: replay of unfinished cross-server work failed", "err", err)
		}
		if !pending {
			select {
			case <-g.ctx.Done():
				return
			case <-g.kick:
				continue
			}
		}
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		case <-g.kick:
		}
	}
}

// replayOnce retries every unfinished intent and split once, or with only
// >= 0 the intents that write on server only; pending says whether some are
// left.
func (s *Server) replayOnce(only int) (pending bool, err error) {
	if err := s.enter("replay"); err != nil {
		return false, nil
	}
	defer s.closeMu.RUnlock()
	type rec struct {
		key, val []byte
	}
	var intents, splits []rec
	for _, tag := range []byte{tagIntent, tagSplit} {
		p := []byte{tag}
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
		if err != nil {
			return true, err
		}
		for it.First(); it.Valid(); it.Next() {
			r := rec{slices.Clone(it.Key()), slices.Clone(it.Value())}
			if tag == tagIntent {
				intents = append(intents, r)
			} else {
				splits = append(splits, r)
			}
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return true, err
		}
	}
	s.giga.replayMu.Lock()
	for _, r := range intents {
		if err := s.replayIntent(r.key, r.val, only); err != nil {
			pending = true
			s.log.Warn("meta: intent still unfinished", "err", err)
		}
	}
	s.giga.replayMu.Unlock()
	if only >= 0 {
		return pending, nil
	}
	for _, r := range splits {
		if len(r.key) != 9 {
			continue
		}
		dir := core.Ino(uint64(r.key[1])<<56 | uint64(r.key[2])<<48 | uint64(r.key[3])<<40 | uint64(r.key[4])<<32 |
			uint64(r.key[5])<<24 | uint64(r.key[6])<<16 | uint64(r.key[7])<<8 | uint64(r.key[8]))
		s.queueSplit(dir)
	}
	return pending, nil
}

func (s *Server) replayIntent(key, val []byte, only int) error {
	in := &weftpb.Intent{}
	if err := proto.Unmarshal(val, in); err != nil {
		return errs.Wrap(errs.Corrupt, "replay", "", err)
	}
	if only >= 0 && !slices.ContainsFunc(in.Servers, func(so *weftpb.ServerOps) bool { return int(so.Server) == only }) {
		return nil
	}
	if len(key) != 9 {
		return errs.New(errs.Corrupt, "replay", "intent key %q", key)
	}
	txid := binary.BigEndian.Uint64(key[1:])
	var left []*weftpb.ServerOps
	var applied int
	var refused []uint32
	var firstErr error
	for _, so := range in.Servers {
		err := s.peerCall(s.giga.ctx, "replay", int(so.Server), weftpb.MethodPeerApply, &weftpb.PeerApplyRequest{Txid: txid, Ops: so.Ops}, &weftpb.Empty{})
		switch {
		case err == nil:
			applied++
		case errs.KindOf(err) == errs.Stale:
			refused = append(refused, so.Server) // fenced: fence.go
		default:
			left = append(left, so)
			firstErr = cmp(firstErr, err)
		}
	}
	if err := s.failpoint(FailReplayParticipantsDone); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer s.release(b)
	// The local writes wait while no participant is known to have applied
	// and some may yet refuse: if all refuse, the operation is abandoned.
	local := len(in.LocalBatch) > 0 && (applied > 0 || len(left) == 0 && len(refused) == 0)
	abandon := len(in.LocalBatch) > 0 && applied == 0 && len(left) == 0 && len(refused) > 0
	if local {
		if err := b.SetRepr(slices.Clone(in.LocalBatch)); err != nil {
			return errs.Wrap(errs.Corrupt, "replay", "", err)
		}
	}
	switch {
	case len(left) == 0:
		b.Delete(key, nil)
	case local:
		b.Set(key, mustMarshal(&weftpb.Intent{Op: in.Op, Servers: left}), nil)
	default:
		b.Set(key, mustMarshal(&weftpb.Intent{Op: in.Op, Servers: left, LocalBatch: in.LocalBatch}), nil)
	}
	if err := s.commit("replay", b, true); err != nil {
		return err
	}
	switch {
	case abandon:
		s.log.Warn("meta: abandoned an interrupted cross-server operation: its locks expired before the replay, and nothing of it was applied",
			"op", in.Op, "txid", txid, "servers", refused)
	case len(refused) > 0:
		s.log.Error("meta: an interrupted cross-server operation was finished without the writes of servers whose locks expired before the replay; run weft fsck",
			"op", in.Op, "txid", txid, "servers", refused)
	case len(left) == 0:
		s.log.Info("meta: finished an interrupted cross-server operation", "op", in.Op)
	}
	return firstErr
}

func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// Participant side.

// lockFor takes stripes (and renameMu) for a remote coordinator's txid,
// giving up when ctx ends.
func (s *Server) lockFor(ctx context.Context, txid uint64, stripes []int, renameMu bool) error {
	g := &s.giga
	if err := s.awaitRecovery(ctx, "peer lock"); err != nil {
		return err
	}
	h := &heldLocks{}
	release := func() {
		for j := len(h.stripes) - 1; j >= 0; j-- {
			s.locks[h.stripes[j]].Unlock()
		}
		if h.renameMu {
			s.renameMu.Unlock()
		}
	}
	if renameMu {
		if err := lockCtx(ctx, &s.renameMu); err != nil {
			return err
		}
		h.renameMu = true
	}
	for _, st := range stripes {
		if err := lockCtx(ctx, &s.locks[st]); err != nil {
			release()
			return err
		}
		h.stripes = append(h.stripes, st)
	}
	if err := ctx.Err(); err != nil {
		// The coordinator gave up meanwhile: nobody would release them.
		release()
		return errs.Wrap(errs.Timeout, "peer lock", "", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if old := g.mu.held[txid]; old != nil {
		// A second lock call of one txn (renameMu, then stripes).
		old.stripes = append(old.stripes, h.stripes...)
		old.renameMu = old.renameMu || h.renameMu
		return nil
	}
	h.timer = time.AfterFunc(s.cfg.lockLease, func() { s.expireLocks(txid, h) })
	g.mu.held[txid] = h
	return nil
}

// releaseHeld releases txid's locks, if this server holds any, and says
// whether the txn's writes were applied under them.
func (s *Server) releaseHeld(txid uint64) (applied bool) {
	g := &s.giga
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.mu.held[txid]
	if h == nil {
		return false
	}
	s.releaseHeldLocked(txid, h)
	return h.applied
}

func (s *Server) releaseHeldLocked(txid uint64, h *heldLocks) {
	delete(s.giga.mu.held, txid)
	if h.timer != nil {
		h.timer.Stop()
	}
	slices.Sort(h.stripes)
	for j := len(h.stripes) - 1; j >= 0; j-- {
		s.locks[h.stripes[j]].Unlock()
	}
	if h.renameMu {
		s.renameMu.Unlock()
	}
}

// lockCtx locks mu unless ctx ends first.
func lockCtx(ctx context.Context, mu *sync.Mutex) error {
	wait := 50 * time.Microsecond
	for !mu.TryLock() {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errs.Wrap(errs.Timeout, "peer lock", "", ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Millisecond)
	}
	return nil
}
