package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteBackMkdirTwoMounts: a tree made under write-back (directories
// and files with content in them, a directory made and removed) without
// any fsync is seen at once by another mount: its read leases recall the
// writer's write leases, the new directories' included, which send the
// queues in order.
func TestWriteBackMkdirTwoMounts(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	file := tc.emb.ClusterFile()
	a, b := newMountPoint(t), newMountPoint(t)
	mountWriteBack(t, file, a)
	mountBackground(t, file, b)
	if err := os.Mkdir(filepath.Join(a, "top"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, "top", "first"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	content := func(i, j int) []byte { return bytes.Repeat(fmt.Appendf(nil, "%d/%d\n", i, j), 1+i+j) }
	for i := range 5 {
		dir := filepath.Join(a, "top", fmt.Sprintf("d%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		for j := range 4 {
			if err := os.WriteFile(filepath.Join(dir, "sub", fmt.Sprintf("f%d", j)), content(i, j), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	gone := filepath.Join(a, "top", "gone")
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gone, "x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(gone); err == nil {
		t.Fatal("rmdir of a directory with a file succeeded")
	}
	if err := os.Remove(filepath.Join(gone, "x")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(gone); err != nil {
		t.Fatalf("rmdir of the emptied directory: %v", err)
	}

	for i := range 5 {
		dir := filepath.Join(b, "top", fmt.Sprintf("d%d", i))
		st, err := os.Stat(filepath.Join(dir, "sub"))
		if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
			t.Errorf("b: stat %s/sub: %v %v", dir, st, err)
			continue
		}
		ents, err := os.ReadDir(filepath.Join(dir, "sub"))
		if err != nil || len(ents) != 4 {
			t.Errorf("b: %s/sub lists %d names (%v), want 4", dir, len(ents), err)
		}
		for j := range 4 {
			got, err := os.ReadFile(filepath.Join(dir, "sub", fmt.Sprintf("f%d", j)))
			if err != nil || !bytes.Equal(got, content(i, j)) {
				t.Errorf("b: %s/sub/f%d holds %q (%v), want %q", dir, j, got, err, content(i, j))
			}
		}
	}
	if _, err := os.Stat(filepath.Join(b, "top", "gone")); !os.IsNotExist(err) {
		t.Errorf("b: stat of the removed directory: %v", err)
	}
	ents, err := os.ReadDir(filepath.Join(b, "top"))
	if err != nil || len(ents) != 6 {
		t.Errorf("b: top lists %d names (%v), want 6", len(ents), err)
	}
}
