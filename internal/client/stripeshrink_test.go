package client_test

import (
	"bytes"
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// A truncate into the middle of a stripe changes it in two steps: the meta
// server cuts the data units (its reclaim, before it answers, or later
// when a store did not answer), and the client rewrites the parity of the
// stripe holding the new end. A degraded read of the stripe between the
// two (one data unit's store down, rebuilt from the others and parity)
// must never decode from data and parity that do not match: these bytes
// are below the new size, and no one changed them.
func TestErasureShrinkDegradedRead(t *testing.T) {
	for _, r := range []shrinkReaderKind{readerHere, readerThere, readerThereOpenBefore} {
		t.Run("cut first, "+r.String(), func(t *testing.T) { testShrinkCutFirst(t, r, false) })
		t.Run("parity first, "+r.String(), func(t *testing.T) { testShrinkParityFirst(t, r) })
		t.Run("unit's store down across it, "+r.String(), func(t *testing.T) { testShrinkUnitDown(t, r) })
	}
	// A truncate naming the file by its directory and name only: the
	// client learns its inode when it asks its size.
	t.Run("cut first, by name, "+readerHere.String(), func(t *testing.T) { testShrinkCutFirst(t, readerHere, true) })
}

// shrinkReaderKind is who reads the stripe degraded.
type shrinkReaderKind int

const (
	readerHere            shrinkReaderKind = iota // the truncating client, opening the file to read
	readerThere                                   // another client, opening the file to read
	readerThereOpenBefore                         // another client that opened it before the truncate
)

func (r shrinkReaderKind) String() string {
	return [...]string{"reader here", "reader in another client", "reader in another client that opened it before"}[r]
}

// shrinkModel is one ec:4+1 stripe of bytes whose units all differ.
func shrinkModel() []byte {
	model := make([]byte, 4*ecChunk)
	for i := range model {
		model[i] = byte(i*7+1) ^ byte(i/ecChunk*0x3b)
	}
	return model
}

// shrinkSize is the new end: half way into the stripe's second data unit.
const shrinkSize = ecChunk + ecChunk/2

// shrinkReader reads the first shrinkSize bytes of /f: through an open of
// its own when f is nil (a reader opening the file now), else through f
// (a reader that opened it before the truncate and knows the old size and
// which chunks were written then).
func shrinkReader(t *testing.T, c *client.Client, f *client.File) ([]byte, error) {
	if f == nil {
		return readAll(t, c, "/f")
	}
	buf := make([]byte, shrinkSize)
	n, err := f.ReadAt(buf, 0)
	if n == len(buf) {
		err = nil // io.EOF at the new end
	}
	return buf[:n], err
}

// shrinkClients returns the writer and the reader of kind, and the
// reader's file opened before the truncate (nil for a reader that opens it
// when it reads).
func shrinkClients(t *testing.T, ec *ecCluster, kind shrinkReaderKind) (w, r *client.Client, rf *client.File) {
	adjust := func(cc *client.Config) { cc.ParityFrameAge = 200 * time.Millisecond }
	w = ec.clientWith(ecChunk, adjust)
	writeFile(t, w, "/f", shrinkModel())
	if kind == readerHere {
		return w, w, nil
	}
	r = ec.clientWith(ecChunk, adjust)
	if kind == readerThere {
		return w, r, nil
	}
	rf, err := r.Open(context.Background(), "/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rf.Close() })
	return w, r, rf
}

// testShrinkCutFirst holds a truncate once the meta server has cut the
// data, stops the store of data unit 0 (below the new end) and reads the
// stripe degraded: the parity is still that of the old bytes.
func testShrinkCutFirst(t *testing.T, kind shrinkReaderKind, byName bool) {
	ec := newECCluster(t, "ec:4+1", 5)
	w, r, rf := shrinkClients(t, ec, kind)
	want := shrinkModel()[:shrinkSize]
	u0 := ec.storeOf(t, w, "/f", 0)

	held, release := holdAfterTruncateReply(w)
	truncated := make(chan error, 1)
	go func() {
		if !byName {
			truncated <- w.Truncate(context.Background(), "/f", shrinkSize)
			return
		}
		size := uint64(shrinkSize)
		_, err := w.SetAttr(context.Background(), client.Ref{Parent: core.RootIno, Name: "f"}, client.SetAttr{Size: &size})
		truncated <- err
	}()
	waitClosed(t, held, "the meta server's answer to the truncate")
	ec.stopStore(u0)

	type result struct {
		got []byte
		err error
	}
	read := make(chan result, 1)
	go func() {
		got, err := shrinkReader(t, r, rf)
		read <- result{got, err}
	}()
	var res result
	select {
	case res = <-read:
		close(release)
	case <-time.After(500 * time.Millisecond): // it waits for the truncate, as it may
		close(release)
		select {
		case res = <-read:
		case <-time.After(20 * time.Second):
			t.Fatal("the degraded read did not return once the truncate went on")
		}
	}
	switch {
	case res.err == nil:
		wantSame(t, "degraded read racing the truncate", res.got, want)
	case errs.Is(res.err, errs.IO):
		t.Logf("degraded read racing the truncate: %v (EIO, allowed)", res.err)
	default:
		t.Fatalf("degraded read racing the truncate: %v", res.err)
	}
	if err := <-truncated; err != nil {
		t.Fatalf("truncate: %v", err)
	}
	readAfterShrink(t, r, rf, want)
}

// readAfterShrink reads the stripe degraded once the truncate is done:
// every byte. A reader that opened the file before the truncate may get
// EIO instead (without leases its view is the open's, in which the data
// units past the new end were written: gone now, they count as lost), but
// never wrong bytes; once a lease recall would have marked its view stale
// (MarkStale, as the FUSE layer does on a recall), every byte.
func readAfterShrink(t *testing.T, r *client.Client, rf *client.File, want []byte) {
	t.Helper()
	got, err := shrinkReader(t, r, rf)
	if rf != nil && errs.Is(err, errs.IO) {
		t.Logf("degraded read after the truncate, the reader's view older: %v (EIO, allowed)", err)
		r.MarkStale(rf.Ino())
		got, err = shrinkReader(t, r, rf)
	}
	if err != nil {
		t.Fatalf("degraded read after the truncate: %v", err)
	}
	wantSame(t, "degraded read after the truncate", got, want)
}

// testShrinkParityFirst has the meta server's cut of the unit holding the
// new end wait (a store outside the stripe is down, so its reclaim stops
// short and retries later) while the client rewrites the stripe's parity
// for the new end, then stops the store of data unit 0 and reads the
// stripe degraded.
func testShrinkParityFirst(t *testing.T, kind shrinkReaderKind) {
	ec := newECCluster(t, "ec:4+1", 6)
	w, r, rf := shrinkClients(t, ec, kind)
	want := shrinkModel()[:shrinkSize]
	a, err := w.Stat(context.Background(), "/f")
	if err != nil {
		t.Fatal(err)
	}
	stripe := ec.cfg.Erasure().Stores(a.Ino, 0, len(ec.cfg.Store))
	outside := -1
	for s := range ec.cfg.Store {
		if !slices.Contains(stripe, s) {
			outside = s
		}
	}
	ec.stopStore(outside)
	if err := w.Truncate(context.Background(), "/f", shrinkSize); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	ec.stopStore(stripe[0])
	readAfterShrink(t, r, rf, want)
}

// testShrinkUnitDown truncates with the store of data unit 0 (below the
// new end) down: the meta server's reclaim stops short there and cuts
// nothing of the unit holding the new end, and the parity for the new end
// needs unit 0, which only a rebuild from the stripe as it was can give.
// The truncate succeeds, and the stripe reads back degraded.
func testShrinkUnitDown(t *testing.T, kind shrinkReaderKind) {
	ec := newECCluster(t, "ec:4+1", 5)
	w, r, rf := shrinkClients(t, ec, kind)
	want := shrinkModel()[:shrinkSize]
	ec.stopStore(ec.storeOf(t, w, "/f", 0))
	if err := w.Truncate(context.Background(), "/f", shrinkSize); err != nil {
		t.Errorf("truncate: %v", err) // it happened all the same: read on
	}
	readAfterShrink(t, r, rf, want)
}

// TestErasureShrinkRefused: a truncate the meta server refuses (the
// caller may not write the file) has its stripe guarded all the same, since
// the client asks first; the guard's marks go again, and a degraded read
// of the stripe afterwards rebuilds every byte instead of finding its
// parity marked (EIO).
func TestErasureShrinkRefused(t *testing.T) {
	ec := newECCluster(t, "ec:4+1", 5)
	c := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrameAge = 100 * time.Millisecond })
	model := shrinkModel()
	writeFile(t, c, "/f", model)
	other := client.WithCreds(context.Background(), core.Creds{UID: 1000, GID: 1000})
	if err := c.Truncate(other, "/f", shrinkSize); !errs.Is(err, errs.Permission) {
		t.Fatalf("truncate by another user: %v, want a permission error", err)
	}
	ec.stopStore(ec.storeOf(t, c, "/f", 0))
	got, err := readAll(t, c, "/f")
	if err != nil {
		t.Fatalf("degraded read after the refused truncate: %v", err)
	}
	wantSame(t, "degraded read after the refused truncate", got, model)
}

// TestErasureShrinkUnlinked: a file with no name left, still open, is
// cut by the client itself (shrinkStripes), with the same guard. The
// truncate is held after the cut while data unit 0's store is stopped and
// the stripe read through another handle, then read again once done.
func TestErasureShrinkUnlinked(t *testing.T) {
	ec := newECCluster(t, "ec:4+1", 5)
	c := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrameAge = 200 * time.Millisecond })
	ctx := context.Background()
	writeFile(t, c, "/f", shrinkModel())
	want := shrinkModel()[:shrinkSize]
	u0 := ec.storeOf(t, c, "/f", 0)
	f, err := c.Open(ctx, "/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := c.Unlink(ctx, "/f"); err != nil {
		t.Fatal(err)
	}
	held, release := holdAfterTruncateReply(c)
	truncated := make(chan error, 1)
	go func() { truncated <- f.Truncate(shrinkSize) }()
	waitClosed(t, held, "the truncate's cut")
	ec.stopStore(u0)
	racing := make([]byte, shrinkSize)
	read := make(chan error, 1)
	go func() {
		_, err := f.ReadAt(racing, 0)
		read <- err
	}()
	var rerr error
	select {
	case rerr = <-read:
		close(release)
	case <-time.After(500 * time.Millisecond): // it waits for the truncate, as it may
		close(release)
		rerr = <-read
	}
	switch {
	case rerr == nil:
		wantSame(t, "degraded read racing the truncate", racing, want)
	case !errs.Is(rerr, errs.IO):
		t.Fatalf("degraded read racing the truncate: %v", rerr)
	}
	if err := <-truncated; err != nil {
		t.Errorf("truncate: %v", err) // the data was cut all the same: read on
	}
	buf := make([]byte, shrinkSize)
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatalf("degraded read after the truncate: %v", err)
	}
	wantSame(t, "degraded read after the truncate", buf, want)
}

// TestErasureShrinkKeepsLock: a truncate whose meta server takes longer
// than the stripe lock's term (held here after the answer, where the
// guard's renewal still runs) keeps the stripe locked: another client's
// write of the stripe waits for it, instead of writing beside it once
// the lock lapsed (which would leave the truncate's stripe marked stale
// until repair, and fail the truncate).
func TestErasureShrinkKeepsLock(t *testing.T) {
	const term = 5 * time.Second // the lock's term (client/stripelock.go)
	ec := newECCluster(t, "ec:4+1", 5)
	c := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrames = -1 })
	other := ec.clientWith(ecChunk, func(cc *client.Config) {
		cc.ParityFrames = -1
		cc.StoreTimeout = 4 * term // its write waits for the lock this long
	})
	ctx := context.Background()
	writeFile(t, c, "/f", shrinkModel())
	want := shrinkModel()[:shrinkSize]
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.SetAfterTruncateReply(func(core.Ino) {
		once.Do(func() { close(held) })
		select {
		case <-release:
		case <-time.After(4 * term):
		}
	})
	truncated := make(chan error, 1)
	go func() { truncated <- c.Truncate(ctx, "/f", shrinkSize) }()
	waitClosed(t, held, "the meta server's answer to the truncate")

	p := bytes.Repeat([]byte{0x5a}, 1000)
	copy(want[100:], p)
	wrote := make(chan error, 1)
	go func() {
		f, err := other.Open(ctx, "/f", os.O_RDWR, 0)
		if err == nil {
			_, err = f.WriteAt(p, 100)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		wrote <- err
	}()
	select {
	case err := <-wrote:
		close(release)
		t.Fatalf("another client wrote the stripe while the truncate held it (err %v)", err)
	case <-time.After(term + time.Second): // past the term: a lapsed lock would have let it in
		close(release)
	}
	if err := <-truncated; err != nil {
		t.Fatalf("truncate: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the other client's write: %v", err)
	}
	ec.stopStore(ec.storeOf(t, c, "/f", 0))
	got, err := readAll(t, c, "/f")
	if err != nil {
		t.Fatalf("degraded read: %v", err)
	}
	wantSame(t, "degraded read", got, want)
}

// holdAfterTruncateReply holds c's next truncate between the meta server's
// answer and the parity's rewrite: held is closed when it gets there, and
// closing release lets it go on (it goes on by itself after 10 s).
func holdAfterTruncateReply(c *client.Client) (held, release chan struct{}) {
	held, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.SetAfterTruncateReply(func(core.Ino) {
		once.Do(func() { close(held) })
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
	})
	return held, release
}
