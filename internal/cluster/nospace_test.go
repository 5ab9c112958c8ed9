package cluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/fsck"
)

// TestFullStoreIsENOSPC fills a store's disk (a 24 MiB tmpfs under its data
// directory): the put that meets the full disk fails with errs.NoSpace
// (ENOSPC at the mount, not EIO), the file keeps its last committed content,
// and once weft gc has freed what the failed put wrote, writes work again.
func TestFullStoreIsENOSPC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	storeDir := filepath.Join(dir, "store-0")
	if err := os.MkdirAll(storeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", storeDir, "tmpfs", 0, "size=24m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	p := startProcs(t, ProcsOptions{Dir: dir, Meta: 1, Store: 1})
	// Runs before startProcs' cleanup kills the store: unmount after it.
	t.Cleanup(func() { syscall.Unmount(storeDir, syscall.MNT_DETACH) })
	c, err := client.New(ClientConfig(p.Config(), core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	small := bytes.Repeat([]byte("kept "), 100_000) // 500 KB: chunked
	if err := putFile(ctx, c, "/small", small); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 40<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	err = putFile(ctx, c, "/small", big)
	if !errs.Is(err, errs.NoSpace) {
		t.Fatalf("put of 40 MiB into a 24 MiB store: %v (kind %v), want %v", err, errs.KindOf(err), errs.NoSpace)
	}
	// The failed put truncated the file (O_TRUNC committed at open) and
	// committed nothing after: empty, never a size with holes of zeros.
	if got, err := readFile(ctx, c, "/small"); err != nil || len(got) != 0 {
		t.Fatalf("after the failed put: %d bytes, %v; want the truncated, empty file", len(got), err)
	}
	// The chunks the failed put wrote past the committed size belong to no
	// file: weft gc finds them and frees the space.
	fc, err := fsck.Connect(ctx, p.Config(), 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	r, err := fsck.GC(ctx, fc, fsck.GCOptions{ChunkSize: int64(p.Config().ChunkSize), Grace: time.Millisecond})
	if err != nil || r.Reclaimed == 0 {
		t.Fatalf("gc after the failed put: %+v, %v; want its chunks reclaimed", r, err)
	}
	if err := putFile(ctx, c, "/again", small); err != nil {
		t.Fatalf("put after gc freed the space: %v", err)
	}
	if got, err := readFile(ctx, c, "/again"); err != nil || got != string(small) {
		t.Fatalf("read back after space came back: %d bytes, %v", len(got), err)
	}
}
