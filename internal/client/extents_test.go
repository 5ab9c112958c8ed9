package client_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// TestWholeDiskLostIsEIONotZeros is issue 12 item 1 where no copy is left
// to compare against: R=1, and the store's whole directory is lost (its
// marker too, so it cannot know it replaced anything). Every chunk a write
// reached must read as EIO, never zeros; the holes of a sparse file, which
// no write reached, still read as zeros.
func TestWholeDiskLostIsEIONotZeros(t *testing.T) {
	rc := newReclaimCluster(t, 1)
	whole := bytes.Repeat([]byte("w"), 3*reclaimChunk)
	rc.writeFile("/whole", whole)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sparse, err := rc.c.Create(ctx, "/sparse", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for _, idx := range []int64{0, 4} {
		if _, err := sparse.WriteAt([]byte("data"), idx*reclaimChunk+10); err != nil {
			t.Fatal(err)
		}
	}
	if err := sparse.Close(); err != nil {
		t.Fatal(err)
	}

	rc.stopStore(0)
	if err := os.RemoveAll(rc.cfg.Store[0].Dir); err != nil {
		t.Fatal(err)
	}
	rc.startStore(0, nil)

	read := func(path string, off int64, n int) ([]byte, error) {
		f, err := rc.c.Open(ctx, path, os.O_RDONLY, 0)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		p := make([]byte, n)
		k, err := f.ReadAt(p, off)
		return p[:k], err
	}
	if got, err := read("/whole", 0, len(whole)); !errs.Is(err, errs.IO) {
		t.Errorf("read of a file whose only copy is lost: %d bytes, %v; want EIO", len(got), err)
	}
	for _, idx := range []int64{0, 4} {
		if got, err := read("/sparse", idx*reclaimChunk, 64); !errs.Is(err, errs.IO) {
			t.Errorf("sparse file, written chunk %d lost: %q, %v; want EIO", idx, got, err)
		}
	}
	got, err := read("/sparse", reclaimChunk, 3*reclaimChunk)
	if err != nil || !bytes.Equal(got, make([]byte, 3*reclaimChunk)) {
		t.Errorf("sparse file's holes: %d bytes, %v; want %d zeros", len(got), err, 3*reclaimChunk)
	}
}

// TestManyRunsBecomeUntracked: a file written in more separate runs than a
// record keeps is committed (untracked), not refused, and its holes still
// read as zeros.
func TestManyRunsBecomeUntracked(t *testing.T) {
	rc := newReclaimCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f, err := rc.c.Create(ctx, "/runs", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	const runs = 300
	for i := range int64(runs) {
		if _, err := f.WriteAt([]byte{'r'}, 2*i*reclaimChunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close after %d runs: %v", runs, err)
	}
	g, err := rc.c.Open(ctx, "/runs", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	p := make([]byte, 2*reclaimChunk)
	if _, err := g.ReadAt(p, 2*(runs-2)*reclaimChunk); err != nil {
		t.Fatal(err)
	}
	if p[0] != 'r' || !bytes.Equal(p[1:], make([]byte, len(p)-1)) {
		t.Fatalf("a run and the hole after it read %q...", p[:8])
	}
}
