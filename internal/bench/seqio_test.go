package bench

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
)

// TestSeqioOnceBatches: a file below seqioSampleBytes is measured over
// enough files to move that much per pass (each written, rewritten and
// read whole), and the sample leaves no file behind.
func TestSeqioOnceBatches(t *testing.T) {
	if got := seqioFiles(1 << 20); got != 32 {
		t.Fatalf("seqioFiles(1 MiB) = %d, want 32", got)
	}
	if got := seqioFiles(4 << 20); got != 8 {
		t.Fatalf("seqioFiles(4 MiB) = %d, want 8", got)
	}
	if got := seqioFiles(64 << 20); got != 1 {
		t.Fatalf("seqioFiles(64 MiB) = %d, want 1", got)
	}
	dir := t.TempDir()
	base := dirSeqio(dir)
	opened := map[string]int{}
	fs := seqioFS{
		open: func(name string, flags int) (seqioFile, error) {
			opened[name]++
			return base.open(name, flags)
		},
		remove: base.remove,
	}
	rates, err := seqioOnce(context.Background(), fs, "s", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(rates) != len(seqioOps) {
		t.Fatalf("%d rates, want %d", len(rates), len(seqioOps))
	}
	for i, r := range rates {
		if !(r > 0) {
			t.Fatalf("%s: rate %v", seqioOps[i], r)
		}
	}
	if len(opened) != 32 {
		t.Fatalf("%d files used, want 32", len(opened))
	}
	for name, n := range opened {
		if n != 4 {
			t.Fatalf("%s opened %d times, want 4 (write, rewrite, read, reread)", name, n)
		}
	}
	left, err := os.ReadDir(dir)
	if err != nil || len(left) != 0 {
		t.Fatalf("left behind: %v (err %v)", left, err)
	}
}

// TestSeqioSideBySide: each file's operation runs on every fs in turn
// (write of file 0 on a, then on b, then file 1...), and an fs that fails
// gets its error and no rates while the other is still measured.
func TestSeqioSideBySide(t *testing.T) {
	var order []string
	logged := func(tag string, fail bool) seqioFS {
		base := dirSeqio(t.TempDir())
		return seqioFS{
			open: func(name string, flags int) (seqioFile, error) {
				order = append(order, tag+name)
				if fail && flags&os.O_CREATE == 0 {
					return nil, os.ErrPermission // the rewrite fails
				}
				return base.open(name, flags)
			},
			remove: base.remove,
		}
	}
	rates, errs := seqioSideBySide(context.Background(), []seqioFS{logged("a/", false), logged("b/", true)}, "s", 16<<20)
	if want := []string{"a/s-0", "b/s-0", "a/s-1", "b/s-1", "a/s-0"}; len(order) < len(want) || !slices.Equal(order[:len(want)], want) {
		t.Fatalf("operations ran in the order %v, want it to start %v", order, want)
	}
	if errs[0] != nil || len(rates[0]) != len(seqioOps) {
		t.Fatalf("the working fs: rates %v, err %v", rates[0], errs[0])
	}
	if !errors.Is(errs[1], os.ErrPermission) || rates[1] != nil {
		t.Fatalf("the failing fs: rates %v, err %v; want no rates and its error", rates[1], errs[1])
	}
}
