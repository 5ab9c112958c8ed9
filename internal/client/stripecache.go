package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
)

// The parity cache: the Network RamDisk's parity caching (seed 004), for
// weft's fixed stripes. A partial-stripe write without it costs k-1 range
// reads and 1+m writes (stripewrite.go). With it, the client keeps a
// frame for a few stripes it writes often: one window of the stripe's k
// data units and their m parity units, as the stores hold them plus this
// client's writes. A write inside a frame's window computes the new parity
// from the frame alone and sends only the data unit's range (one
// transfer); the frame's parity goes to the parity units later, once for
// all the writes it covers: when the frame is evicted, when it has lagged
// ParityFrameAge, before a rebuild of its stripe, before a truncate, an
// O_TRUNC open or a full-stripe write of the file, and when the client
// closes. A frame is filled by reading the window of the k data units (k
// transfers), only for a write of at most cachedWriteMax into a stripe
// written again within about as many writes as there are frames, so a
// scattered or large writer pays about what it paid without the cache.
//
// Recoverability. Between a data write and its frame's flush the stores'
// parity does not match the data. Before the first data write under a
// frame the client sets the stale mark of each parity unit (a one-byte
// chunk at erasure.MarkIndex on the parity unit's store) and waits for it;
// the flush writes each parity unit and then clears its mark (cuts it to
// nothing). So at every instant each stripe is either consistent on the
// stores, or its parity units are marked, or both:
//   - the client lives and a store of the stripe dies: the frame holds the
//     right parity; its flush (at once on a rebuild, within
//     ParityFrameAge otherwise) makes the stripe whole again and readers
//     of other clients wait for the marks to clear (rebuildRange);
//   - the client dies: its marks stay. Readers never rebuild from a marked
//     parity unit, so a store of that stripe lost before the parity is
//     rewritten makes the units it held EIO, never wrong bytes. weft repair
//     (and each store's background pass) rewrites a marked stripe's parity
//     from its data and clears its marks once they are older than
//     repair's mark grace (a minute: no live client keeps a frame dirty
//     that long).
//
// What is at risk is thus a double failure: the writing client and a store
// of the stripe, within ParityFrameAge of the writes (a fsync does not
// wait for the frame), loses the units on that store (EIO) until they are
// written again. Replication and writes without the cache lose nothing
// there.
//
// Other clients. A frame holds its stripe's lock at the lock's store
// (stripelock.go) from its fill to its flush, so no other client writes
// the stripe meanwhile: its write waits for the flush, within about
// ParityFrameAge. A frame whose lock lapsed (this client stalled past the
// lock's term) is flushed with parity coded from the stores' data instead
// of its own copy, which another client's write may have made stale.

const (
	defaultParityFrames   = 8
	defaultParityFrameAge = time.Second
	// parityWindow is how many bytes of each unit a frame holds: its
	// memory is (k+m) windows.
	parityWindow = 1 << 20
	// cachedWriteMax is the largest write the cache takes: a larger one
	// carries enough bytes per transfer that k-1 reads and 1+m writes
	// cost less than a frame's fill, mark and flush.
	cachedWriteMax = 128 << 10
	// ghostStripes is how many stripes written lately the cache remembers
	// without a frame, to admit one on its second write.
	ghostStripes = 64
)

// ParityCacheStats counts the parity cache's work since the client
// started.
type ParityCacheStats struct {
	Hits, Fills, Flushes, Marks int64
	Frames                      int // frames held now
}

// parityFrame is one stripe's window in the cache. Its fields are read and
// changed only by a holder of the stripe's lock; dirty, since and used are
// changed under parityCache.mu too, for the flusher.
type parityFrame struct {
	off    int64    // the window's offset in each unit
	data   [][]byte // the k data units' bytes in the window
	parity [][]byte // the m parity units' bytes, the parity of data
	dirty  bool     // the parity units are marked and lag [lo, hi)
	// lapsed: the stripe's lock at its store lapsed while the frame was
	// kept (stripelock.go), so data may be stale: the frame is flushed
	// with parity coded from the stores' data, and not written again.
	lapsed bool
	lo, hi int64 // within the window
	since  time.Time
	used   uint64 // the cache's tick at the last write
}

type parityCache struct {
	frames                      int
	age                         time.Duration
	hits, fills, flushes, marks atomic.Int64
	kick                        chan struct{} // wakes the flusher: a frame to evict
	stop                        chan struct{}
	closed                      sync.Once
	done                        chan struct{}
	mu                          struct {
		sync.Mutex
		frames map[stripeKey]*parityFrame
		ghost  map[stripeKey]uint64 // stripe -> tick of its last write
		tick   uint64
		// writing, if set, runs as a flush starts writing a frame's
		// parity (tests: export_stripecache_test.go).
		writing func(stripeKey)
	}
}

func newParityCache(cfg Config) *parityCache {
	pc := &parityCache{
		frames: cfg.ParityFrames, age: cfg.ParityFrameAge,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	pc.mu.frames = map[stripeKey]*parityFrame{}
	pc.mu.ghost = map[stripeKey]uint64{}
	return pc
}

// ParityCacheStats returns the parity cache's counts (zero without one).
func (c *Client) ParityCacheStats() ParityCacheStats {
	if c.ec == nil || c.ec.cache == nil {
		return ParityCacheStats{}
	}
	pc := c.ec.cache
	pc.mu.Lock()
	frames := len(pc.mu.frames)
	pc.mu.Unlock()
	return ParityCacheStats{Hits: pc.hits.Load(), Fills: pc.fills.Load(), Flushes: pc.flushes.Load(), Marks: pc.marks.Load(), Frames: frames}
}

// frame returns stripe k's frame, nil if none.
func (pc *parityCache) frame(k stripeKey) *parityFrame {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.mu.frames[k]
}

// admit reports whether stripe k was written lately (a frame pays off),
// and remembers this write.
func (pc *parityCache) admit(k stripeKey) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.mu.tick++
	last, seen := pc.mu.ghost[k]
	pc.mu.ghost[k] = pc.mu.tick
	seen = seen && pc.mu.tick-last <= uint64(pc.frames)
	if len(pc.mu.ghost) > ghostStripes {
		for g, t := range pc.mu.ghost {
			if t+ghostStripes < pc.mu.tick {
				delete(pc.mu.ghost, g)
			}
		}
	}
	return seen
}

// put adds f as stripe k's frame and wakes the flusher if the cache holds
// too many.
func (pc *parityCache) put(k stripeKey, f *parityFrame) {
	pc.mu.Lock()
	pc.mu.tick++
	f.used = pc.mu.tick
	pc.mu.frames[k] = f
	over := len(pc.mu.frames) > pc.frames
	pc.mu.Unlock()
	if over {
		select {
		case pc.kick <- struct{}{}:
		default:
		}
	}
}

func (pc *parityCache) touch(f *parityFrame) {
	pc.mu.Lock()
	pc.mu.tick++
	f.used = pc.mu.tick
	pc.mu.Unlock()
}

// setDirty notes that f's parity lags from now on (the flusher reads it
// under pc.mu).
func (pc *parityCache) setDirty(f *parityFrame) {
	pc.mu.Lock()
	f.dirty, f.since = true, time.Now()
	pc.mu.Unlock()
}

// writingHook returns the hook a flush runs before its writes, if any.
func (pc *parityCache) writingHook() func(stripeKey) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.mu.writing
}

func (pc *parityCache) drop(k stripeKey) {
	pc.mu.Lock()
	delete(pc.mu.frames, k)
	pc.mu.Unlock()
}

// due returns the stripes whose frames should be flushed now: those dirty
// for longer than the age bound, and the least recently written beyond
// the cache's size.
func (pc *parityCache) due(now time.Time) []stripeKey {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	var out []stripeKey
	type lru struct {
		k    stripeKey
		used uint64
	}
	var rest []lru
	for k, f := range pc.mu.frames {
		if f.dirty && now.Sub(f.since) >= pc.age {
			out = append(out, k)
			continue
		}
		rest = append(rest, lru{k, f.used})
	}
	for len(rest) > 0 && len(rest)+len(out) > pc.frames {
		oldest := 0
		for i, r := range rest {
			if r.used < rest[oldest].used {
				oldest = i
			}
		}
		out = append(out, rest[oldest].k)
		rest = append(rest[:oldest], rest[oldest+1:]...)
	}
	return out
}

// all returns every stripe with a frame, of ino only unless ino is 0.
func (pc *parityCache) all(ino core.Ino) []stripeKey {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	out := make([]stripeKey, 0, len(pc.mu.frames))
	for k := range pc.mu.frames {
		if ino == 0 || k.ino == ino {
			out = append(out, k)
		}
	}
	return out
}

// FlushParity writes the parity this client caches for ino's stripes (all
// files' with ino 0), so that they are whole on the stores again. A fsync
// that calls it makes the file's last writes survive the loss of the
// client and a store together.
func (c *Client) FlushParity(ino core.Ino) {
	if c.ec != nil && c.ec.cache != nil {
		c.flushFrames(c.ec.cache.all(ino))
	}
}

// syncCachedParity makes the parity this client's cache holds for ino
// durable (fsync): written out, then synced on every store, so that what
// fsync made durable survives this client's crash together with a
// store's loss. Closes do not wait for it: the parity goes out within
// ParityFrameAge, and until then its stripes are marked (see above).
func (c *Client) syncCachedParity(ctx context.Context, ino core.Ino) error {
	if c.ec == nil || c.ec.cache == nil {
		return nil
	}
	frames := c.ec.cache.all(ino)
	if len(frames) == 0 {
		return nil // nothing cached: the file's flush synced what it wrote
	}
	c.flushFrames(frames)
	sc := c.ec.scheme
	parity := map[int]bool{} // the stores the flushed parity went to
	for _, k := range frames {
		for _, s := range sc.Stores(ino, k.stripe, len(c.stores))[sc.K:] {
			parity[s] = true
		}
	}
	return c.syncStores(ctx, ino, parity)
}

// discardFrames drops, unwritten, the frames of ino's stripes from stripe
// from on: a shrink cut the data they were computed from. Their marks stay
// until the shrink rewrites or drops the stripes' parity. It returns the
// stripes whose frames it dropped.
func (c *Client) discardFrames(ctx context.Context, ino core.Ino, from uint64) []uint64 {
	if c.ec.cache == nil {
		return nil
	}
	var dropped []uint64
	for _, k := range c.ec.cache.all(ino) {
		if k.stripe < from {
			continue
		}
		dropped = append(dropped, k.stripe)
		if unlock, err := c.lockStripe(ctx, k.ino, k.stripe, forRead); err == nil {
			c.ec.cache.drop(k)
			unlock()
		} else {
			c.ec.cache.drop(k)
			c.ec.forgetHold(k) // the store's lock lapses by itself
		}
	}
	return dropped
}

// startParityFlusher runs the cache's flusher until closeParityCache.
func (c *Client) startParityFlusher() {
	if c.ec == nil || c.ec.cache == nil {
		return
	}
	pc := c.ec.cache
	go func() {
		defer close(pc.done)
		t := time.NewTicker(pc.age / 4)
		defer t.Stop()
		for {
			select {
			case <-pc.stop:
				return
			case <-t.C:
			case <-pc.kick:
			}
			c.flushFrames(pc.due(time.Now()))
		}
	}()
}

// closeParityCache stops the flusher and flushes every frame.
func (c *Client) closeParityCache() {
	if c.ec == nil || c.ec.cache == nil {
		return
	}
	pc := c.ec.cache
	pc.closed.Do(func() {
		close(pc.stop)
		<-pc.done
	})
	c.flushFrames(pc.all(0))
}

// flushFrames flushes and drops the frames of stripes, each under its
// stripe's lock and bounded by StoreTimeout.
func (c *Client) flushFrames(stripes []stripeKey) {
	for _, k := range stripes {
		ctx, cancel := context.WithTimeout(c.life, c.cfg.StoreTimeout)
		// Another client holding the stripe's lock means this frame's
		// lapsed: it stays (marked) until the lock is had, and its flush
		// then codes the parity afresh.
		if unlock, err := c.lockStripe(ctx, k.ino, k.stripe, forFlush); err == nil {
			c.flushFrameLocked(ctx, k)
			unlock()
		}
		cancel()
	}
}

// flushFrameLocked writes stripe k's cached parity, if it lags, clears
// the stripe's marks and drops the frame. The caller holds the stripe's
// lock. A failure leaves the marks of the units it did not reach set (their
// parity stays unused until repair rewrites it) and is logged, since no caller
// waits for it but a rebuild, which reads the marks anyway.
func (c *Client) flushFrameLocked(ctx context.Context, k stripeKey) {
	pc := c.ec.cache
	f := pc.frame(k)
	if f == nil {
		return
	}
	// The frame leaves the cache once its parity is written, not before:
	// until then FlushParity (before a truncate cuts the data, and in an
	// fsync) finds it and waits for this flush on the stripe's lock. A
	// frame dropped first let a truncate run beside its flush and drop
	// the stripe's parity, which the flush then wrote back, computed from
	// the data the truncate cut: once the file grew into the stripe again,
	// a degraded read rebuilt wrong bytes from it (docs/design.md).
	defer pc.drop(k)
	if !f.dirty {
		return
	}
	pc.flushes.Add(1)
	// The frame goes whatever happens: a flush cut short would leave
	// marks that only repair clears. So it runs to its own bound, not to
	// that of a caller that may stop waiting (a hedged read).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.StoreTimeout)
	defer cancel()
	if hook := pc.writingHook(); hook != nil {
		hook(k)
	}
	sc := c.ec.scheme
	stores := sc.Stores(k.ino, k.stripe, len(c.stores))
	parity := make([][]byte, sc.M)
	for j := range parity {
		parity[j] = f.parity[j][f.lo:f.hi]
	}
	if f.lapsed {
		fresh, err := c.codeParityFromStores(ctx, k, f.off+f.lo, f.hi-f.lo)
		if err != nil {
			c.log.Error("the parity of a stripe whose lock lapsed could not be coded again: the stripe stays marked stale until it is written again or weft repair rewrites it",
				"ino", k.ino, "stripe", k.stripe, "err", err)
			return
		}
		parity = fresh
	}
	// Each parity unit's mark goes once that unit holds the frame's
	// parity, whatever the others' writes do: a unit written is right,
	// and a stripe that lost a parity store keeps the others usable.
	err := c.onStores(allStores(sc.M), func(j int) error {
		c.ec.writes.Add(1)
		if err := c.writeUnitOn(ctx, k.ino, sc.ParityIndex(k.stripe, j), stores[sc.K+j], f.off+f.lo, parity[j], false); err != nil {
			return err
		}
		c.ec.writes.Add(1)
		return c.truncateUnit(ctx, k.ino, sc.MarkIndex(k.stripe, j), 0)
	})
	if err != nil {
		c.log.Error("cached parity could not be written: the stripe stays marked stale until it is written again or weft repair rewrites it",
			"ino", k.ino, "stripe", k.stripe, "err", err)
	}
}

// markStale sets the stale marks of stripe k's parity units.
func (c *Client) markStale(ctx context.Context, k stripeKey) error {
	sc := c.ec.scheme
	stores := sc.Stores(k.ino, k.stripe, len(c.stores))
	c.ec.cache.marks.Add(1)
	return c.onStores(allStores(sc.M), func(j int) error {
		c.ec.writes.Add(1)
		return c.writeUnitOn(ctx, k.ino, sc.MarkIndex(k.stripe, j), stores[sc.K+j], 0, []byte{1}, false)
	})
}

// writeCached is writeStripeUnit through the parity cache: it writes data
// at off of data unit pos of stripe and keeps the parity in the stripe's
// frame. It returns done = false, having written nothing, when the write
// should take the path without the cache; any frame of the stripe is then
// flushed already. The caller holds the stripe's lock.
func (c *Client) writeCached(ctx context.Context, ino core.Ino, stripe uint64, pos int, off int64, data []byte) (stores []int, done bool, err error) {
	pc, sc := c.ec.cache, c.ec.scheme
	k := stripeKey{ino, stripe}
	n := int64(len(data))
	win := off / parityWindow * parityWindow
	f := pc.frame(k)
	all := sc.Stores(ino, stripe, len(c.stores))
	healthy := true
	for _, s := range all {
		if c.suspects.suspect(s) {
			healthy = false
		}
	}
	fits := off+n <= win+parityWindow && n <= cachedWriteMax
	if f != nil && (f.off != win || !healthy || !fits || f.lapsed) {
		c.flushFrameLocked(ctx, k)
		f = nil
	}
	if !healthy || !fits {
		return nil, false, nil
	}
	if f == nil {
		if !pc.admit(k) {
			return nil, false, nil
		}
		if f, err = c.fillFrame(ctx, ino, stripe, win); err != nil {
			return nil, false, nil // the path without the cache decides
		}
		pc.put(k, f)
	} else {
		pc.hits.Add(1)
		pc.touch(f)
	}
	if !f.dirty {
		if err := c.markStale(ctx, k); err != nil {
			pc.drop(k) // clean: nothing to flush; marks set by halves stay
			return nil, false, nil
		}
		f.lo, f.hi = off-win, off-win+n
		pc.setDirty(f)
	}
	a, b := off-win, off-win+n
	old := rpc.GetBuffer(int(n))
	defer rpc.PutBuffer(old)
	copy(old, f.data[pos][a:b])
	copy(f.data[pos][a:b], data)
	shards := make([][]byte, sc.K)
	for q := range sc.K {
		shards[q] = f.data[q][a:b]
	}
	parity, err := c.ec.codec.ParityRange(shards, int(n))
	if err != nil {
		copy(f.data[pos][a:b], old)
		return nil, true, err
	}
	c.ec.writes.Add(1)
	if err := c.writeUnitOn(ctx, ino, sc.DataIndex(stripe, pos), all[pos], off, data, false); err != nil {
		// The store may hold the new bytes or not: put the old ones back
		// if it answers, and flush the frame's parity, which is that of
		// the old bytes. A store that took the write and cannot take the
		// old bytes back leaves the range for repair --verify, as a failed
		// write without the cache does.
		copy(f.data[pos][a:b], old)
		c.ec.writes.Add(1)
		if rerr := c.writeUnitOn(ctx, ino, sc.DataIndex(stripe, pos), all[pos], off, old, false); rerr != nil && !failoverable(rerr) {
			c.log.Error("a failed cached stripe write could not be rolled back", "ino", ino, "stripe", stripe, "err", rerr)
		}
		c.flushFrameLocked(ctx, k)
		return nil, true, err
	}
	for j := range sc.M {
		copy(f.parity[j][a:b], parity[j])
	}
	f.lo, f.hi = min(f.lo, a), max(f.hi, b)
	stores = []int{all[pos]}
	for j := range sc.M {
		stores = append(stores, all[sc.K+j])
	}
	return stores, true, nil
}

// fillFrame reads the window at win of stripe's k data units and computes
// their parity. The caller holds the stripe's lock.
func (c *Client) fillFrame(ctx context.Context, ino core.Ino, stripe uint64, win int64) (*parityFrame, error) {
	sc := c.ec.scheme
	n := min(int64(parityWindow), c.cfg.ChunkSize-win)
	got, err := c.readStripeRange(ctx, ino, stripe, win, n, -1)
	if err != nil {
		return nil, err
	}
	f := &parityFrame{off: win, data: make([][]byte, sc.K)}
	for q, d := range got {
		f.data[q] = make([]byte, n)
		copy(f.data[q], d)
		rpc.PutBuffer(d)
	}
	if f.parity, err = c.ec.codec.ParityRange(f.data, int(n)); err != nil {
		return nil, err
	}
	c.ec.cache.fills.Add(1)
	return f, nil
}

// markedStale reports whether parity unit j of stripe is marked stale on
// store s (a read of its mark).
func (c *Client) markedStale(ctx context.Context, ino core.Ino, stripe uint64, j, s int) (bool, error) {
	c.ec.reads.Add(1)
	d, found, err := c.readUnitOn(ctx, ino, c.ec.scheme.MarkIndex(stripe, j), s, 0, 1)
	if err != nil {
		return false, err
	}
	stale := found && len(d) > 0 && d[0] != 0
	rpc.PutBuffer(d)
	return stale, nil
}

// errStaleParity is a parity unit's answer in a rebuild when it is marked.
var errStaleParity = errs.New(errs.Stale, "rebuild", "the parity unit is marked stale: a client's cached parity has not reached it")
