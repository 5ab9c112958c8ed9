package client_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// newLockClients starts one embedded cluster and returns n root clients of
// it, each with its own lock session.
func newLockClients(t *testing.T, n int) []*client.Client {
	t.Helper()
	emb, err := cluster.StartEmbedded(context.Background(), cluster.EmbeddedOptions{Dir: t.TempDir(), Durability: "async"})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() { emb.Close() })
	var cs []*client.Client
	for range n {
		cc := cluster.ClientConfig(emb.Config(), core.Root, nil)
		cc.ChunkSize = 64 << 10
		c, err := client.New(cc)
		if err != nil {
			t.Fatalf("client: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return cs
}

func lockFile(t *testing.T, c *client.Client, path string) core.Ino {
	t.Helper()
	f, err := c.Create(context.Background(), path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	ino := f.Ino()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return ino
}

func wr(start, end uint64) client.Lock {
	return client.Lock{Type: client.WriteLock, Start: start, End: end}
}
func rd(start, end uint64) client.Lock {
	return client.Lock{Type: client.ReadLock, Start: start, End: end}
}
func un(start, end uint64) client.Lock {
	return client.Lock{Type: client.Unlock, Start: start, End: end}
}

func TestLocksBetweenClients(t *testing.T) {
	cs := newLockClients(t, 2)
	a, b := cs[0], cs[1]
	ctx := context.Background()
	ino := lockFile(t, a, "/f")
	pa, pb := client.LockOwner{ID: 1}, client.LockOwner{ID: 1} // same kernel owner, different clients

	held := wr(0, 99)
	held.Pid = 4321
	if err := a.SetLock(ctx, ino, pa, held); err != nil {
		t.Fatal(err)
	}
	if err := b.SetLock(ctx, ino, pb, rd(50, 60)); !errs.Is(err, errs.Busy) {
		t.Fatalf("conflicting lock from another client: %v, want Busy", err)
	}
	got, err := b.GetLock(ctx, ino, pb, wr(99, 200))
	if err != nil || got != held {
		t.Fatalf("getlock: %+v, %v; want %+v", got, err, held)
	}
	if err := b.SetLock(ctx, ino, pb, wr(100, client.MaxLockEnd)); err != nil {
		t.Fatalf("lock next to the other client's: %v", err)
	}
	// flock locks are a world of their own.
	if err := b.SetLock(ctx, ino, client.LockOwner{ID: 5, Flock: true}, wr(0, client.MaxLockEnd)); err != nil {
		t.Fatalf("flock beside POSIX locks: %v", err)
	}
	if err := a.SetLock(ctx, ino, client.LockOwner{ID: 6, Flock: true}, rd(0, client.MaxLockEnd)); !errs.Is(err, errs.Busy) {
		t.Fatalf("flock over another client's flock: %v, want Busy", err)
	}
	if err := a.SetLock(ctx, ino, pa, un(0, client.MaxLockEnd)); err != nil {
		t.Fatal(err)
	}
	if got, err := b.GetLock(ctx, ino, pb, wr(0, 99)); err != nil || got.Type != client.Unlock {
		t.Fatalf("getlock after the unlock: %+v, %v", got, err)
	}
	// Bad ranges are refused before they reach the server.
	if err := a.SetLock(ctx, ino, pa, wr(10, 9)); !errs.Is(err, errs.Invalid) {
		t.Errorf("lock with start > end: %v", err)
	}
}

func TestLockWaitAndCancel(t *testing.T) {
	cs := newLockClients(t, 2)
	a, b := cs[0], cs[1]
	ctx := context.Background()
	ino := lockFile(t, a, "/f")
	o := client.LockOwner{ID: 1}
	if err := a.SetLock(ctx, ino, o, wr(0, 0)); err != nil {
		t.Fatal(err)
	}

	// An interrupted wait returns Canceled at once.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.SetLockWait(cctx, ino, o, wr(0, 0)) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errs.Is(err, errs.Canceled) {
			t.Fatalf("canceled wait: %v, want Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("canceled wait still blocked after 5s")
	}

	// A wait ends when the holder unlocks.
	go func() { done <- b.SetLockWait(ctx, ino, o, wr(0, 0)) }()
	select {
	case err := <-done:
		t.Fatalf("wait returned %v while the lock is held", err)
	case <-time.After(200 * time.Millisecond):
	}
	start := time.Now()
	if err := a.SetLock(ctx, ino, o, un(0, 0)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("granted %v after the unlock", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not granted 5s after the unlock")
	}
	if err := a.SetLock(ctx, ino, o, rd(0, 0)); !errs.Is(err, errs.Busy) {
		t.Errorf("lock held by the waiter: %v, want Busy", err)
	}
}

// Close ends the lock session: what the client held is free at once.
func TestLockCloseReleases(t *testing.T) {
	cs := newLockClients(t, 2)
	a, b := cs[0], cs[1]
	ctx := context.Background()
	ino := lockFile(t, a, "/f")
	if err := a.SetLock(ctx, ino, client.LockOwner{ID: 1}, wr(0, client.MaxLockEnd)); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.SetLock(ctx, ino, client.LockOwner{ID: 1}, wr(0, client.MaxLockEnd)); err != nil {
		t.Fatalf("lock after the holder closed: %v", err)
	}
	if err := a.SetLock(ctx, ino, client.LockOwner{ID: 1}, rd(0, 0)); err == nil {
		t.Error("lock through a closed client succeeded")
	}
}

// A lock holder that revalidates sees what another client wrote under its
// lock, inline or in chunks, with the file open all along.
func TestLockRevalidate(t *testing.T) {
	cs := newLockClients(t, 2)
	a, b := cs[0], cs[1]
	ctx := context.Background()
	for _, size := range []int{100, 200 << 10} {
		lockFile(t, a, "/f")
		fa, err := a.Open(ctx, "/f", os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		fb, err := b.Open(ctx, "/f", os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if changed, err := fb.Revalidate(ctx); err != nil || changed {
			t.Errorf("revalidate of an unchanged file: %v, %v", changed, err)
		}
		want := bytes.Repeat([]byte("x"), size)
		if _, err := fa.WriteAt(want, 0); err != nil {
			t.Fatal(err)
		}
		if err := fa.Flush(); err != nil {
			t.Fatal(err)
		}
		if changed, err := fa.Revalidate(ctx); err != nil || changed {
			t.Errorf("size %d: the writer revalidates its own commit: changed %v, %v", size, changed, err)
		}
		changed, err := fb.Revalidate(ctx)
		if err != nil || !changed {
			t.Errorf("size %d: revalidate after the other client's write: %v, %v", size, changed, err)
		}
		got := make([]byte, size+10)
		n, err := fb.ReadAt(got, 0)
		if err != io.EOF || !bytes.Equal(got[:n], want) {
			t.Errorf("size %d: read after revalidate: %d bytes, %v", size, n, err)
		}
		// Unflushed writes of its own win over the server's view.
		if _, err := fb.WriteAt([]byte("mine"), 0); err != nil {
			t.Fatal(err)
		}
		if changed, err := fb.Revalidate(ctx); err != nil || changed {
			t.Errorf("revalidate with writes pending: %v, %v", changed, err)
		}
		for _, f := range []*client.File{fa, fb} {
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Remove(ctx, "/f"); err != nil {
			t.Fatal(err)
		}
	}
}

// A client keeps its locks for as long as it runs: its keepalives renew
// the session beyond the server's 10 s lifetime.
func TestLockOutlivesSessionTTL(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 12s")
	}
	cs := newLockClients(t, 2)
	a, b := cs[0], cs[1]
	ctx := context.Background()
	ino := lockFile(t, a, "/f")
	if err := a.SetLock(ctx, ino, client.LockOwner{ID: 1}, wr(0, 0)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(12 * time.Second)
	if err := b.SetLock(ctx, ino, client.LockOwner{ID: 1}, wr(0, 0)); !errs.Is(err, errs.Busy) {
		t.Fatalf("lock of a live client after 12s: %v, want Busy", err)
	}
}
