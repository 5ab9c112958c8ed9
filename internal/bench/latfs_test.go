package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestLatfsSideBySide: each block of files is created on every fs in turn
// (the first fs moving on by one each block), then deleted the same way;
// every file has the size asked for; an fs
// that fails gets its error while the other is still measured; nothing is
// left behind but the directories.
func TestLatfsSideBySide(t *testing.T) {
	var order []string
	logged := func(tag string, fail bool) (latfsOps, string) {
		root := t.TempDir()
		base := dirLatfs(root)
		return latfsOps{
			mkdir: base.mkdir,
			create: func(dir, name string, data []byte) error {
				order = append(order, "c "+tag+name)
				if fail && name == "lat00003" {
					return os.ErrPermission
				}
				if len(data) != 3<<10 {
					t.Errorf("%s: %d bytes, want %d", name, len(data), 3<<10)
				}
				return base.create(dir, name, data)
			},
			remove: func(dir, name string) error {
				order = append(order, "d "+tag+name)
				return base.remove(dir, name)
			},
		}, root
	}
	a, aroot := logged("a/", false)
	b, _ := logged("b/", true)
	create, del, errs := latfsSideBySide(context.Background(), []latfsOps{a, b}, "d", 5, 3<<10, 2)
	want := []string{"c a/lat00000", "c a/lat00001", "c b/lat00000", "c b/lat00001", "c b/lat00002", "c b/lat00003",
		"c a/lat00002", "c a/lat00003", "c a/lat00004", "d a/lat00000", "d a/lat00001", "d a/lat00002", "d a/lat00003", "d a/lat00004"}
	if !slices.Equal(order, want) {
		t.Fatalf("operations ran in the order %v, want %v", order, want)
	}
	if errs[0] != nil || !(create[0] > 0) || !(del[0] > 0) {
		t.Fatalf("the working fs: create %v ms, delete %v ms, err %v", create[0], del[0], errs[0])
	}
	if !errors.Is(errs[1], os.ErrPermission) {
		t.Fatalf("the failing fs: err %v, want its error", errs[1])
	}
	left, err := os.ReadDir(filepath.Join(aroot, "d"))
	if err != nil || len(left) != 0 {
		t.Fatalf("left behind: %v (err %v)", left, err)
	}
}
