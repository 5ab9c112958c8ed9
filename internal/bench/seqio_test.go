package bench

import (
	"context"
	"os"
	"testing"
)

// TestSeqioOnceBatches: a file below seqioSampleBytes is measured over
// enough files to move that much per pass (each written, rewritten and
// read whole), and the sample leaves no file behind.
func TestSeqioOnceBatches(t *testing.T) {
	if got := seqioFiles(1 << 20); got != 16 {
		t.Fatalf("seqioFiles(1 MiB) = %d, want 16", got)
	}
	if got := seqioFiles(4 << 20); got != 4 {
		t.Fatalf("seqioFiles(4 MiB) = %d, want 4", got)
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
	if len(opened) != 16 {
		t.Fatalf("%d files used, want 16", len(opened))
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
