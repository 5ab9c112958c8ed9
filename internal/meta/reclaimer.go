package meta

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/erasure"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// reclaimer carries out the ReclaimRecords of its server (reclaim.go): it
// drops the recorded bytes on every store, retrying each record with backoff
// until all of them confirm, then deletes the record. Each record is worked
// by one goroutine at a time (busy), so that a drop never runs after its
// record was deleted: a late drop could remove bytes written after it.
type reclaimer struct {
	s      *Server
	stores []*rpc.Peer // nil: no store list configured, records wait
	seq    atomic.Uint64
	wake   chan struct{}
	sem    chan struct{} // bounds the records worked at once

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// revokeRetry takes the revocations a store did not take at once
	// (capability.go), for retryRevocations; revokeFailed is, by store,
	// when a push to it last failed (Unix ns).
	revokeRetry  chan storeRevocation
	revokeFailed []atomic.Int64

	recorded atomic.Int64 // records written since start (metrics)
	pending  atomic.Int64 // records found by the last pass
	held     atomic.Int64 // of which held by an open file

	mu struct {
		sync.Mutex
		busy   map[string]bool
		retry  map[string]retryState
		floors map[core.Ino]uint64 // inodes with a pending truncate: its smallest size
	}
}

type retryState struct {
	next    time.Time
	backoff time.Duration
}

const (
	firstReclaimBackoff = 200 * time.Millisecond
	// reclaimIdleScan is how often the reclaimer looks for records nobody
	// woke it for (written by weft gc --release-held, or a peer's apply).
	reclaimIdleScan = 5 * time.Second
)

// initReclaim loads the pending truncates and starts the reclaimer when the
// configuration lists the stores.
func (s *Server) initReclaim() error {
	r := &s.reclaim
	r.s = s
	r.wake = make(chan struct{}, 1)
	r.sem = make(chan struct{}, s.cfg.ReclaimConcurrency)
	r.mu.busy = map[string]bool{}
	r.mu.retry = map[string]retryState{}
	r.mu.floors = map[core.Ino]uint64{}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	seq := uint64(s.nowNs())
	err := s.scanReclaims(func(key []byte, ino core.Ino, rec *weftpb.ReclaimRecord) {
		if _, v, _ := layout.ReclaimKeyParts(key); v >= seq {
			seq = v + 1
		}
		if rec.Truncate {
			r.lowerFloorLocked(ino, rec.Size)
		}
	})
	if err != nil {
		return err
	}
	r.seq.Store(seq)
	for _, addr := range s.cfg.Stores {
		r.stores = append(r.stores, rpc.NewPeer(addr, s.dialOptions()))
	}
	if len(r.stores) == 0 {
		// The reclaimer still runs, to count the records for the metrics.
		s.log.Warn("meta: no store list configured; chunk reclaim records wait until one is")
	}
	r.wg.Add(1)
	go r.run()
	r.revokeRetry = make(chan storeRevocation, maxPendingRevocations)
	r.revokeFailed = make([]atomic.Int64, len(r.stores))
	r.wg.Go(s.retryRevocations)
	return nil
}

func (r *reclaimer) close() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.wg.Wait()
	for _, p := range r.stores {
		p.Close()
	}
}

func (r *reclaimer) nextSeq() uint64 { return r.seq.Add(1) }

// poke wakes the reclaimer for records just committed.
func (r *reclaimer) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *reclaimer) run() {
	defer r.wg.Done()
	for {
		wait := r.pass()
		t := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-r.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// pass starts work on every due record and returns how long to wait before
// the next pass.
func (r *reclaimer) pass() time.Duration {
	wait := min(r.s.cfg.ReclaimRetryMax, reclaimIdleScan)
	now := time.Now()
	var pending, held int64
	type job struct {
		key []byte
		ino core.Ino
		rec *weftpb.ReclaimRecord
	}
	var jobs []job
	err := r.s.scanReclaims(func(key []byte, ino core.Ino, rec *weftpb.ReclaimRecord) {
		pending++
		if rec.Held {
			held++
			return
		}
		if len(r.stores) == 0 {
			return
		}
		r.mu.Lock()
		st, retrying := r.mu.retry[string(key)]
		r.mu.Unlock()
		if retrying && st.next.After(now) {
			wait = min(wait, st.next.Sub(now))
			return
		}
		jobs = append(jobs, job{key, ino, rec})
	})
	r.pending.Store(pending)
	r.held.Store(held)
	if err != nil {
		r.s.log.Warn("meta: reading reclaim records failed", "err", err)
		return firstReclaimBackoff
	}
	for _, j := range jobs {
		if !r.claim(j.key) {
			continue
		}
		select {
		case r.sem <- struct{}{}:
		case <-r.ctx.Done():
			r.unclaim(j.key)
			return wait
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() { <-r.sem }()
			r.work(r.ctx, j.key, j.ino)
		}()
	}
	return wait
}

func (r *reclaimer) claim(key []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.busy[string(key)] {
		return false
	}
	r.mu.busy[string(key)] = true
	return true
}

func (r *reclaimer) unclaim(key []byte) {
	r.mu.Lock()
	delete(r.mu.busy, string(key))
	r.mu.Unlock()
}

// work carries out one claimed record: it reads the record again (another
// worker may have finished it since the pass read it), drops its bytes and
// deletes it, or schedules a retry.
func (r *reclaimer) work(ctx context.Context, key []byte, ino core.Ino) error {
	defer r.unclaim(key)
	rec := &weftpb.ReclaimRecord{}
	found, err := r.s.readReclaim(key, rec)
	if err != nil || !found || rec.Held {
		return err
	}
	err = r.drop(ctx, ino, rec)
	if err == nil {
		err = r.s.deleteReclaim(key, ino, rec)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		delete(r.mu.retry, string(key))
		return nil
	}
	st := r.mu.retry[string(key)]
	st.backoff = min(max(2*st.backoff, firstReclaimBackoff), r.s.cfg.ReclaimRetryMax)
	st.next = time.Now().Add(st.backoff)
	r.mu.retry[string(key)] = st
	r.s.log.Warn("meta: chunk reclaim failed; will retry", "ino", ino, "size", rec.Size, "retry_in", st.backoff, "err", err)
	return err
}

// drop removes ino's bytes at and past rec.Size from every store: the chunks
// past the one holding the new end everywhere, and that chunk's tail on its
// replicas. Every call has its own timeout.
func (r *reclaimer) drop(ctx context.Context, ino core.Ino, rec *weftpb.ReclaimRecord) error {
	if len(r.stores) == 0 {
		return errs.New(errs.Unavailable, "reclaim", "no store list configured")
	}
	cs := rec.ChunkSize
	if cs <= 0 {
		return errs.New(errs.Corrupt, "reclaim", "inode %d: reclaim record without a chunk size", ino)
	}
	from := core.ChunkCount(rec.Size, cs)
	all := make([]int, len(r.stores))
	for i := range all {
		all[i] = i
	}
	// A truncate's drop leaves what was written after the truncate: once the
	// truncate has answered, its writer may fill the file again before a
	// late drop (a store was down) gets through.
	var before int64
	if rec.Truncate {
		before = rec.CreatedNs
	}
	err := r.onStores(all, func(i int) error {
		return r.call(ctx, i, weftpb.MethodDeleteChunks, &weftpb.DeleteChunksRequest{Ino: uint64(ino), From: from, ChangedBeforeNs: before, Capability: r.s.reclaimCapability(ino)}, &weftpb.DeleteChunksReply{})
	})
	if err != nil || rec.Size%uint64(cs) == 0 {
		return err
	}
	idx := rec.Size / uint64(cs)
	req := &weftpb.TruncateChunkRequest{Chunk: &weftpb.ChunkID{Ino: uint64(ino), Index: idx}, Size: int64(rec.Size % uint64(cs)), ChangedBeforeNs: before,
		Capability: r.s.reclaimCapability(ino)}
	reps := erasure.PlacedStores(ino, idx, len(r.stores), rec.Replication)
	return r.onStores(reps, func(i int) error {
		return r.call(ctx, i, weftpb.MethodTruncateChunk, req, &weftpb.TruncateChunkReply{})
	})
}

func (r *reclaimer) call(ctx context.Context, i int, method uint16, req, resp proto.Message) error {
	ctx, cancel := context.WithTimeout(ctx, r.s.cfg.ReclaimTimeout)
	defer cancel()
	if err := r.stores[i].Call(ctx, method, req, resp); err != nil {
		return errs.Wrap(errs.KindOf(err), "reclaim", "store "+r.stores[i].Addr(), err)
	}
	return nil
}

// onStores runs fn on each store in parallel and returns the first error.
func (r *reclaimer) onStores(stores []int, fn func(i int) error) error {
	errc := make(chan error, len(stores))
	for _, i := range stores {
		go func() { errc <- fn(i) }()
	}
	var first error
	for range stores {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// dropTruncated carries out the truncate records of ino now, for a truncate
// that answers only after its bytes are gone (reclaim.go). A record another
// worker holds is left to it; an error leaves the record for the retries.
func (r *reclaimer) dropTruncated(ctx context.Context, ino core.Ino) error {
	var keys [][]byte
	err := r.s.scanReclaimsOf(ino, func(key []byte, rec *weftpb.ReclaimRecord) {
		if rec.Truncate && !rec.Held {
			keys = append(keys, key)
		}
	})
	if err != nil {
		return err
	}
	for _, key := range keys {
		if !r.claim(key) {
			continue
		}
		if err := r.work(ctx, key, ino); err != nil {
			return err
		}
	}
	return nil
}

// truncateFloor returns the smallest size of ino's pending truncates. The
// map answers the common case (none) at once; a floor it holds is checked
// against the records on disk, since a truncate notes its floor after its
// commit and a failed one may have noted one for nothing. The caller holds
// closeMu shared.
func (r *reclaimer) truncateFloor(ino core.Ino) (uint64, bool) {
	r.mu.Lock()
	_, ok := r.mu.floors[ino]
	r.mu.Unlock()
	if !ok {
		return 0, false
	}
	return r.s.refreshFloor(ino)
}

func (r *reclaimer) lowerFloorLocked(ino core.Ino, size uint64) {
	if f, ok := r.mu.floors[ino]; !ok || size < f {
		r.mu.floors[ino] = size
	}
}

// noteTruncated records the floors of truncates this server just committed.
func (r *reclaimer) noteTruncated(ino core.Ino, size uint64) {
	r.mu.Lock()
	r.lowerFloorLocked(ino, size)
	r.mu.Unlock()
}

// scanReclaims calls fn for every reclaim record of this server.
func (s *Server) scanReclaims(fn func(key []byte, ino core.Ino, rec *weftpb.ReclaimRecord)) error {
	return s.scanReclaimRange([]byte{tagReclaim}, []byte{tagReclaim + 1}, func(key []byte, rec *weftpb.ReclaimRecord) {
		ino, _ := reclaimKeyIno(key)
		fn(key, ino, rec)
	})
}

func (s *Server) scanReclaimsOf(ino core.Ino, fn func(key []byte, rec *weftpb.ReclaimRecord)) error {
	p := reclaimPrefix(ino)
	return s.scanReclaimRange(p, prefixEnd(p), fn)
}

func (s *Server) scanReclaimRange(lo, hi []byte, fn func(key []byte, rec *weftpb.ReclaimRecord)) error {
	if err := s.enter("reclaim"); err != nil {
		return err
	}
	defer s.closeMu.RUnlock()
	return s.scanReclaimRangeLocked(lo, hi, fn)
}

// scanReclaimRangeLocked is scanReclaimRange for a caller that holds
// closeMu shared (an operation in progress).
func (s *Server) scanReclaimRangeLocked(lo, hi []byte, fn func(key []byte, rec *weftpb.ReclaimRecord)) error {
	const op = "reclaim"
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return errs.Wrap(errs.IO, op, "", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if _, ok := reclaimKeyIno(it.Key()); !ok {
			continue
		}
		rec := &weftpb.ReclaimRecord{}
		if err := proto.Unmarshal(it.Value(), rec); err != nil {
			s.log.Error("meta: unreadable reclaim record", "key", it.Key(), "err", err)
			continue
		}
		fn(bytes.Clone(it.Key()), rec)
	}
	return errs.Wrap(errs.IO, op, "", it.Error())
}

func (s *Server) readReclaim(key []byte, rec *weftpb.ReclaimRecord) (bool, error) {
	if err := s.enter("reclaim"); err != nil {
		return false, err
	}
	defer s.closeMu.RUnlock()
	return getRecord(s.db, key, rec)
}

// deleteReclaim deletes a finished record with a synced write: were the
// deletion lost in a crash, the drop would run again after writes that came
// later. Then it recomputes ino's truncate floor.
func (s *Server) deleteReclaim(key []byte, ino core.Ino, rec *weftpb.ReclaimRecord) error {
	if err := s.enter("reclaim"); err != nil {
		return err
	}
	defer s.closeMu.RUnlock()
	if err := s.db.Delete(key, pebble.Sync); err != nil {
		return errs.Wrap(errs.IO, "reclaim", "", err)
	}
	if rec.Truncate {
		s.refreshFloor(ino)
	}
	return nil
}

// refreshFloor sets ino's truncate floor from the records on disk. The scan
// and the update happen under reclaim.mu, and a truncate notes its floor
// under it after its commit, so a refresh never erases the floor of a
// record committed before it. The caller holds closeMu shared.
func (s *Server) refreshFloor(ino core.Ino) (uint64, bool) {
	r := &s.reclaim
	r.mu.Lock()
	defer r.mu.Unlock()
	floor, ok := uint64(0), false
	p := reclaimPrefix(ino)
	err := s.scanReclaimRangeLocked(p, prefixEnd(p), func(_ []byte, rec *weftpb.ReclaimRecord) {
		if rec.Truncate && (!ok || rec.Size < floor) {
			floor, ok = rec.Size, true
		}
	})
	switch {
	case err != nil:
		floor, ok = r.mu.floors[ino] // keep the fence while in doubt
	case ok:
		r.mu.floors[ino] = floor
	default:
		delete(r.mu.floors, ino)
	}
	return floor, ok
}

// ReleaseReclaim lets the held reclaim records of an unlinked file go ahead:
// the client that kept it open closed its last handle.
func (s *Server) ReleaseReclaim(ctx context.Context, req *weftpb.ReleaseReclaimRequest) (*weftpb.Empty, error) {
	const op = "release reclaim"
	var keys [][]byte
	var recs []*weftpb.ReclaimRecord
	err := s.scanReclaimsOf(core.Ino(req.Ino), func(key []byte, rec *weftpb.ReclaimRecord) {
		if rec.Held {
			rec.Held = false
			keys, recs = append(keys, key), append(recs, rec)
		}
	})
	if err != nil || len(keys) == 0 {
		return &weftpb.Empty{}, err
	}
	if err := s.enter(op); err != nil {
		return nil, err
	}
	b := s.db.NewBatch()
	for i, k := range keys {
		b.Set(k, mustMarshal(recs[i]), nil)
	}
	err = b.Commit(pebble.Sync)
	b.Close()
	s.closeMu.RUnlock()
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, "", err)
	}
	s.reclaim.poke()
	return &weftpb.Empty{}, nil
}

func (r *reclaimer) registerMetrics(reg *prometheus.Registry, labels prometheus.Labels) {
	reg.MustRegister(
		metaGauge(labels, "reclaims_pending",
			"Chunk reclaim records not yet carried out (as of the reclaimer's last pass).",
			func() float64 { return float64(r.pending.Load()) }),
		metaGauge(labels, "reclaims_held",
			"Pending chunk reclaims held by a client's open-unlinked file.",
			func() float64 { return float64(r.held.Load()) }),
		metaCounter(labels, "reclaims_recorded_total",
			"Chunk reclaim records written.",
			func() float64 { return float64(r.recorded.Load()) }),
	)
}

// metaCounter and metaGauge are a meta server's metrics read from f when
// scraped, labelled with the server.
func metaCounter(labels prometheus.Labels, name, help string, f func() float64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "weft", Subsystem: "meta", Name: name, Help: help, ConstLabels: labels}, f)
}

func metaGauge(labels prometheus.Labels, name, help string, f func() float64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "weft", Subsystem: "meta", Name: name, Help: help, ConstLabels: labels}, f)
}
