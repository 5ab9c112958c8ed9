package client_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"
)

// TestOrphanKeepsChunksUntilClose: a chunked file removed while open stays
// readable and writable through its handle, and its chunks are reclaimed
// only when the handle closes. The mem backend reports the bytes it holds
// (a disk store reports its file system's, which other processes change).
func TestOrphanKeepsChunksUntilClose(t *testing.T) {
	c := newTestClientBackend(t, 64<<10, "mem")
	ctx := context.Background()
	want := bytes.Repeat([]byte("orphan!"), 300<<10/7)
	f, err := c.Create(ctx, "/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	used := func() uint64 {
		s, err := c.StatFS(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s.Used
	}
	before := used()
	if err := c.Unlink(ctx, "/f"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // a reclaim, if wrongly started, runs in the background
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read of the removed file: %v (equal %v)", err, bytes.Equal(got, want))
	}
	if _, err := f.WriteAt([]byte("tail"), int64(len(want))); err != nil {
		t.Fatalf("write to the removed file: %v", err)
	}
	if err := f.Truncate(int64(len(want)) + 2); err != nil {
		t.Fatalf("truncate of the removed file: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close of the removed file: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); used() >= before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("store space not reclaimed after the last close: used %d, before the unlink %d", used(), before)
		}
	}
}

// TestRenameOpenFileCommits: a file renamed while open commits its writes
// under the new name at close.
func TestRenameOpenFileCommits(t *testing.T) {
	c := newTestClient(t, 64<<10)
	ctx := context.Background()
	f, err := c.Create(ctx, "/a", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.Rename(ctx, "/a", "/d/b", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("after the rename")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if a, err := c.Stat(ctx, "/d/b"); err != nil || a.Size != 16 {
		t.Errorf("renamed file: size %d, %v; want 16", a.Size, err)
	}
	if _, err := c.Stat(ctx, "/a"); !os.IsNotExist(err) && err == nil {
		t.Errorf("old name still there")
	}
}
