package client_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/repair"
	"github.com/weftfs/weft/internal/waitfor"
)

// writeFile creates path with data, written whole and closed.
func writeFile(t *testing.T, c *client.Client, path string, data []byte) {
	t.Helper()
	f, err := c.Create(context.Background(), path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// smallWrites makes n writes of 4 KiB into path at offsets from next, each
// pushed to the stores by a flush (as a small synchronous writer does), and
// returns the unit transfers they cost per write, and the stripe lock
// requests (which carry no unit).
func smallWrites(t *testing.T, c *client.Client, path string, model []byte, n int, next func() int64) (transfers, locks float64) {
	t.Helper()
	f, err := c.Open(context.Background(), path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	before := c.ErasureStats()
	p := make([]byte, 4096)
	for i := range n {
		off := next()
		for j := range p {
			p[j] = byte(i + j)
		}
		if _, err := f.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		copy(model[off:], p)
		if err := f.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	c.FlushParity(0) // the cache's deferred parity writes count too
	after := c.ErasureStats()
	return float64(after.Reads-before.Reads+after.Writes-before.Writes) / float64(n), float64(after.Locks-before.Locks) / float64(n)
}

// TestParityCacheTransfers measures the unit transfers of a small (4 KiB)
// write on ec:4+1 with and without the parity cache, for writers with
// locality and without, and checks every byte afterwards. Without the
// cache a small write costs k-1 reads and 1+m writes (5); the seed's goal is
// at most 5% more transfers than no redundancy at all (1 per write) with 8
// cached frames, for a writer with locality.
func TestParityCacheTransfers(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 2 × 3 workloads of 256 flushed writes")
	}
	const chunk = 1 << 20
	const writes = 256
	ec := newECCluster(t, "ec:4+1", 5)
	// Frames do not age out during the run: a loaded machine's slow
	// writes would otherwise flush them by the clock, and the count would
	// measure the machine, not the cache.
	cached := ec.clientWith(chunk, func(cc *client.Config) { cc.ParityFrameAge = time.Hour })
	plain := ec.clientWith(chunk, func(cc *client.Config) { cc.ParityFrames = -1 })
	type workload struct {
		name string
		size int64
		next func(r *rand.Rand, i int) int64
	}
	workloads := []workload{
		{"one stripe, random offsets", 4 * chunk, func(r *rand.Rand, _ int) int64 { return r.Int64N(4*chunk/4096) * 4096 }},
		{"sequential (a log)", 4 * chunk, func(_ *rand.Rand, i int) int64 { return int64(i) * 4096 }},
		{"16 stripes, random offsets", 64 * chunk, func(r *rand.Rand, _ int) int64 { return r.Int64N(64*chunk/4096) * 4096 }},
	}
	for wi, w := range workloads {
		var per, locks [2]float64
		for ci, c := range []*client.Client{plain, cached} {
			path := "/t" + string(rune('a'+2*wi+ci))
			model := bytes.Repeat([]byte{byte(wi + 1)}, int(w.size))
			writeFile(t, c, path, model)
			r := rand.New(rand.NewPCG(uint64(wi), 1))
			i := 0
			per[ci], locks[ci] = smallWrites(t, c, path, model, writes, func() int64 { i++; return w.next(r, i-1) })
			got, err := readAll(t, plain, path)
			if err != nil || !bytes.Equal(got, model) {
				t.Fatalf("%s: file differs after the writes (err %v)", w.name, err)
			}
		}
		t.Logf("%-28s transfers per 4 KiB write: %.3f without the cache, %.3f with 8 frames; stripe lock requests %.3f and %.3f",
			w.name, per[0], per[1], locks[0], locks[1])
		if per[0] < 4.9 {
			t.Errorf("%s: %.3f transfers per write without the cache; want k-1 reads + 1+m writes = 5", w.name, per[0])
		}
		if wi < 2 && per[1] > 1.05 {
			t.Errorf("%s: %.3f transfers per write with the cache; the seed's goal is ≤ 1.05", w.name, per[1])
		}
		if per[1] > per[0] {
			t.Errorf("%s: the cache costs more transfers (%.3f) than no cache (%.3f)", w.name, per[1], per[0])
		}
	}
	t.Logf("cache: %+v", cached.ParityCacheStats())
}

// repairMarks runs a repair pass that takes every stale mark as left by a
// dead client.
func repairMarks(t *testing.T, ec *ecCluster) *repair.Report {
	return ec.runRepair(t, repair.Config{MarkGrace: -1})
}

// TestParityCacheClientCrash: a client dies with parity in its cache (the
// data on the stores, the parity behind it). Its marks keep every reader
// from rebuilding with that parity: a store lost before repair gives EIO,
// never the old bytes; repair rewrites the parity from the data, after
// which a store lost reads back every byte.
func TestParityCacheClientCrash(t *testing.T) {
	ec := newECCluster(t, "ec:4+1", 5)
	writer := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrameAge = time.Hour })
	reader := ec.client(ecChunk)
	ctx := context.Background()
	old := bytes.Repeat([]byte("old!"), 4*ecChunk/4) // one whole stripe
	writeFile(t, writer, "/f", old)
	model := bytes.Clone(old)
	f, err := writer.Open(ctx, "/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 { // two writes per stripe admit a frame
		p := bytes.Repeat([]byte{byte('a' + i)}, 1000)
		off := int64(i%2)*4096 + 100
		if _, err := f.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		copy(model[off:], p)
		if err := f.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if st := writer.ParityCacheStats(); st.Frames != 1 || st.Marks != 1 {
		t.Fatalf("want one dirty frame: %+v", st)
	}
	writer.CrashParityCache()

	// The data unit written (chunk 0) is on the store at stripe position 0.
	if got, err := readAll(t, reader, "/f"); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("all stores up: err %v, bytes equal %v", err, bytes.Equal(got, model))
	}
	s0 := ec.storeOf(t, reader, "/f", 0)
	ec.stopStore(s0)
	got, err := readAll(t, reader, "/f")
	if !errs.Is(err, errs.IO) {
		t.Fatalf("unit 0's store down, parity marked stale: want EIO, got err %v (old bytes: %v, new: %v)", err, bytes.Equal(got, old), bytes.Equal(got, model))
	}
	// Back with its bytes gone: repair cannot rebuild unit 0 (the parity
	// is stale) and says so.
	ec.startStore(s0)
	if rep := repairMarks(t, ec); rep.Unrecoverable == 0 || len(rep.Completed) != 1 {
		t.Fatalf("repair after the double failure: want the lost unit reported unrecoverable: %v", rep)
	}

	// The second file: the client dies, then repair runs before any store
	// is lost.
	writer2 := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrameAge = time.Hour })
	writeFile(t, writer2, "/g", old)
	model = bytes.Clone(old)
	g, err := writer2.Open(ctx, "/g", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		p := bytes.Repeat([]byte{byte('A' + i)}, 2000)
		off := int64(i) * 3000
		if _, err := g.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		copy(model[off:], p)
		if err := g.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	writer2.CrashParityCache()
	rep := repairMarks(t, ec)
	if rep.Marked == 0 || rep.Stale == 0 {
		t.Fatalf("repair did not rewrite the marked parity: %v", rep)
	}
	t.Logf("repair: %v", rep)
	g0 := ec.storeOf(t, reader, "/g", 0)
	ec.stopStore(g0)
	if got, err := readAll(t, reader, "/g"); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("after repair, unit 0's store down: err %v, bytes equal %v", err, bytes.Equal(got, model))
	}
}

// storeOf returns the store that holds data chunk index of path.
func (ec *ecCluster) storeOf(t *testing.T, c *client.Client, path string, index uint64) int {
	t.Helper()
	a, err := c.Stat(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	sc := ec.cfg.Erasure()
	stripe, pos := sc.Stripe(index)
	return sc.Stores(a.Ino, stripe, len(ec.cfg.Store))[pos]
}

// TestParityCacheDegradedReadWaitsForFlush: another client's degraded
// read of a stripe whose parity a live client caches waits for that
// client's flush (bounded by its frame age) and reads every byte.
func TestParityCacheDegradedReadWaitsForFlush(t *testing.T) {
	ec := newECCluster(t, "ec:4+1", 5)
	writer := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrameAge = 300 * time.Millisecond })
	reader := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrameAge = 300 * time.Millisecond })
	ctx := context.Background()
	model := bytes.Repeat([]byte("old!"), 4*ecChunk/4)
	writeFile(t, writer, "/f", model)
	f, err := writer.Open(ctx, "/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 3 { // chunk 0 of the stripe: two writes admit a frame
		p := bytes.Repeat([]byte{byte('a' + i)}, 500)
		off := int64(i) * 600
		if _, err := f.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		copy(model[off:], p)
		if err := f.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if st := writer.ParityCacheStats(); st.Frames != 1 {
		t.Fatalf("want a dirty frame: %+v", st)
	}
	// Lose chunk 0's store: the reader must rebuild it from parity that
	// is marked until the writer's frame goes out.
	ec.stopStore(ec.storeOf(t, reader, "/f", 0))
	got, err := readAll(t, reader, "/f")
	if err != nil || !bytes.Equal(got, model) {
		t.Fatalf("degraded read while the writer caches parity: err %v, bytes equal %v", err, bytes.Equal(got, model))
	}
}

// TestParityCacheFlushBeforeTruncate: a truncate waits for a flush of the
// file's cached parity that is already writing (the cache's flusher took
// the frame just before). Otherwise the truncate drops the parity of the
// stripes past the new end, the flush then writes it back, computed from
// the data the truncate cut, and once the file grows into the stripe again
// a degraded read rebuilds wrong bytes from it.
func TestParityCacheFlushBeforeTruncate(t *testing.T) {
	ec := newECCluster(t, "ec:3+2", 5)
	// Frames go out only when flushed here, not by age.
	c := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrameAge = time.Minute })
	ctx := context.Background()
	model := make([]byte, 6*ecChunk) // two stripes
	for i := range model {
		model[i] = byte(i*7 + 1)
	}
	writeFile(t, c, "/f", model)
	f, err := c.Open(ctx, "/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 3 { // chunk 3, stripe 1's first: two writes admit a frame
		p := bytes.Repeat([]byte{byte('a' + i)}, 500)
		off := 3*ecChunk + int64(i)*600
		if _, err := f.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		copy(model[off:], p)
		if err := f.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.ParityCacheStats(); st.Frames != 1 {
		t.Fatalf("want a dirty frame of stripe 1: %+v", st)
	}

	// A flush of stripe 1's frame (as the flusher's) stops just before
	// its writes, until the truncate returned or showed it waits.
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.OnFrameFlushWriting(func(_ core.Ino, stripe uint64) {
		if stripe != 1 {
			return
		}
		once.Do(func() { close(held) })
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
	})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		c.FlushParity(f.Ino())
	}()
	waitClosed(t, held, "the flush of stripe 1 to start writing")
	truncated := make(chan error, 1)
	go func() { truncated <- f.Truncate(3 * ecChunk) }() // stripe 1 goes
	var terr error
	select {
	case terr = <-truncated:
		t.Log("the truncate returned while the flush of the stripe it cut was still writing")
		close(release)
	case <-time.After(300 * time.Millisecond): // it waits for the flush, as it should
		close(release)
		select {
		case terr = <-truncated:
		case <-time.After(10 * time.Second):
			t.Fatal("the truncate did not return once the flush ended")
		}
	}
	if terr != nil {
		t.Fatalf("truncate: %v", terr)
	}
	waitClosed(t, flushed, "the flush to end")
	model = model[:3*ecChunk]

	// The file grows into stripe 1 again: its second data unit gets a few
	// bytes, everything else there is a hole.
	p := bytes.Repeat([]byte{0x5a}, 1000)
	off := int64(4*ecChunk + 30000)
	if _, err := f.WriteAt(p, off); err != nil {
		t.Fatal(err)
	}
	model = append(model, make([]byte, off+int64(len(p))-int64(len(model)))...)
	copy(model[off:], p)
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	ec.stopStore(ec.storeOf(t, c, "/f", 4)) // that unit is rebuilt
	got, err := readAll(t, c, "/f")
	if err != nil {
		t.Fatalf("degraded read: %v", err)
	}
	wantSame(t, "degraded read", got, model)
}

// waitClosed waits for ch to close, at most 10 seconds.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestParityCacheOpenTruncate: an O_TRUNC open of a file whose parity
// this client still caches (written within ParityFrameAge, then closed)
// has that parity written before the meta server cuts the file to
// nothing, parity included: a frame kept past the cut would code the
// parity of new writes from the old data, and a flush that ends after the
// cut (which spares chunks changed since it began) would leave the old
// parity. Either way a degraded read of the file, grown again, would
// rebuild old bytes.
func TestParityCacheOpenTruncate(t *testing.T) {
	t.Run("frame cached", func(t *testing.T) { testOpenTruncate(t, false) })
	t.Run("frame flushing across the open", func(t *testing.T) { testOpenTruncate(t, true) })
}

// testOpenTruncate is TestParityCacheOpenTruncate; with flushing, a flush
// of the frame is held just before its writes when the open starts, and
// let go once the meta server answered the open, unless the open waits
// for it (as it should) first.
func testOpenTruncate(t *testing.T, flushing bool) {
	ec := newECCluster(t, "ec:3+2", 5)
	c := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrameAge = time.Minute })
	ctx := context.Background()
	old := make([]byte, 3*ecChunk)
	for i := range old {
		old[i] = byte(i*7 + 1)
	}
	writeFile(t, c, "/f", old)
	f, err := c.Open(ctx, "/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // chunk 0: two writes admit a frame
		if _, err := f.WriteAt(bytes.Repeat([]byte{byte('a' + i)}, 500), int64(i)*600); err != nil {
			t.Fatal(err)
		}
		if err := f.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if st := c.ParityCacheStats(); st.Frames != 1 {
		t.Fatalf("want a dirty frame of stripe 0 after the close: %+v", st)
	}

	release := make(chan struct{})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	if flushing {
		held := make(chan struct{})
		var heldOnce sync.Once
		c.OnFrameFlushWriting(func(core.Ino, uint64) {
			heldOnce.Do(func() { close(held) })
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		})
		flushed := make(chan struct{})
		go func() {
			defer close(flushed)
			c.FlushParity(f.Ino())
		}()
		waitClosed(t, held, "the flush of stripe 0 to start writing")
		c.SetAfterOpenReply(func() { letGo(); waitClosed(t, flushed, "the flush to end") })
	}
	type opened struct {
		f   *client.File
		err error
	}
	open := make(chan opened, 1)
	go func() {
		g, err := c.Open(ctx, "/f", os.O_RDWR|os.O_TRUNC, 0)
		open <- opened{g, err}
	}()
	var o opened
	select {
	case o = <-open:
	case <-time.After(300 * time.Millisecond): // waiting for the flush
		letGo()
		select {
		case o = <-open:
		case <-time.After(10 * time.Second):
			t.Fatal("the O_TRUNC open did not return once the flush ended")
		}
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	g := o.f
	p := bytes.Repeat([]byte{0x5a}, 1000)
	off := int64(ecChunk + 30000) // chunk 1; chunk 0 and 2 are holes now
	if _, err := g.WriteAt(p, off); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	model := make([]byte, off+int64(len(p)))
	copy(model[off:], p)
	ec.stopStore(ec.storeOf(t, c, "/f", 1)) // chunk 1 is rebuilt
	got, err := readAll(t, c, "/f")
	if err != nil {
		t.Fatalf("degraded read: %v", err)
	}
	wantSame(t, "degraded read after the O_TRUNC open", got, model)
}

// wantSame fails with the first byte where got and want differ.
func wantSame(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("%s: %d bytes, want %d; first wrong byte at %d (chunk %d offset %d): %#x, want %#x",
				what, len(got), len(want), i, i/ecChunk, i%ecChunk, got[i], want[i])
		}
	}
	t.Fatalf("%s: %d bytes, want %d", what, len(got), len(want))
}

// TestParityCacheUnlinkDropsFrames: the frames of a file that is gone are
// dropped unwritten (a flush after the reclaim would leave parity units of
// a freed inode), at the unlink of a file not open here, and at the last
// close of one unlinked while open.
func TestParityCacheUnlinkDropsFrames(t *testing.T) {
	ec := newECCluster(t, "ec:4+1", 5)
	c := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrameAge = time.Hour })
	ctx := context.Background()
	dirty := func(path string) *client.File {
		t.Helper()
		writeFile(t, c, path, bytes.Repeat([]byte("old!"), 4*ecChunk/4))
		f, err := c.Open(ctx, path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 { // two writes of a stripe admit a frame
			if _, err := f.WriteAt([]byte("new"), int64(i)*4096); err != nil {
				t.Fatal(err)
			}
			if err := f.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		if st := c.ParityCacheStats(); st.Frames != 1 {
			t.Fatalf("%s: want one dirty frame: %+v", path, st)
		}
		return f
	}
	f := dirty("/f")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	flushes := c.ParityCacheStats().Flushes
	if err := c.Unlink(ctx, "/f"); err != nil {
		t.Fatal(err)
	}
	if st := c.ParityCacheStats(); st.Frames != 0 || st.Flushes != flushes {
		t.Fatalf("after the unlink of a closed file: %+v, want no frame and no flush", st)
	}

	g := dirty("/g")
	if err := c.Unlink(ctx, "/g"); err != nil {
		t.Fatal(err)
	}
	if st := c.ParityCacheStats(); st.Frames != 1 {
		t.Fatalf("a file unlinked while open lost its frame: %+v", st)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 5*time.Second, "the last close of an unlinked file to drop its frame", func() bool {
		return c.ParityCacheStats().Frames == 0
	})
	if st := c.ParityCacheStats(); st.Flushes != flushes {
		t.Fatalf("the frame of a file gone was flushed: %+v", st)
	}
}
