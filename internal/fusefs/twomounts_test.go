package fusefs

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// TestTwoMountsCloseToOpen checks the consistency two mounts of one cluster
// promise each other: what one writes and closes, the other sees when it
// opens the file next, even if its kernel cached the old content, size or
// name.
func TestTwoMountsCloseToOpen(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	a := mount(t, tc.client(t), Options{}).Dir()
	b := mount(t, tc.client(t), Options{}).Dir()

	write := func(path, data string, flag int) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|flag, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(data); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	want := func(path, data string) {
		t.Helper()
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Errorf("%s: %q, %v; want %q", path, got, err, data)
		}
	}

	// A name B has just looked up in vain appears as soon as A creates it.
	if _, err := os.Stat(b + "/f"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat before create: %v", err)
	}
	write(a+"/f", "first version", os.O_TRUNC)
	want(b+"/f", "first version")

	// B's page cache and attributes hold the old content: a reopen must
	// drop them, for a longer, a shorter and a same-size content.
	for _, v := range []string{"second, longer version", "short", "SHORT"} {
		write(a+"/f", v, os.O_TRUNC)
		want(b+"/f", v)
		if st, err := os.Stat(b + "/f"); err != nil || st.Size() != int64(len(v)) {
			t.Errorf("size seen by the other mount after reopen: %v, %v; want %d", st.Size(), err, len(v))
		}
	}

	// B's kernel has the attributes cached (a stat just now) when it opens
	// the file A grew: open must make it forget them, or B reads up to the
	// old size only.
	if _, err := os.Stat(b + "/f"); err != nil {
		t.Fatal(err)
	}
	write(a+"/f", "much longer content", os.O_TRUNC)
	f, err := os.Open(b + "/f")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	n, _ := f.ReadAt(buf, 0)
	st, _ := f.Stat()
	f.Close()
	if string(buf[:n]) != "much longer content" || st.Size() != int64(n) {
		t.Errorf("other mount after open with cached attributes: read %q, fstat size %d", buf[:n], st.Size())
	}

	// Replacing a file by rename (as editors and rsync do): B's cached
	// name points at the old inode, which ESTALE makes the kernel drop.
	write(a+"/f.tmp", "replaced", os.O_TRUNC)
	if err := os.Rename(a+"/f.tmp", a+"/f"); err != nil {
		t.Fatal(err)
	}
	want(b+"/f", "replaced")

	// Appends from both mounts, each closing before the other opens, land
	// one after the other whatever size the kernels cached.
	write(a+"/log", "a1.", os.O_APPEND)
	write(b+"/log", "b1.", os.O_APPEND)
	write(a+"/log", "a2.", os.O_APPEND)
	write(b+"/log", "b2.", os.O_APPEND)
	want(a+"/log", "a1.b1.a2.b2.")
	want(b+"/log", "a1.b1.a2.b2.")

	// Directory listings are never cached.
	if err := os.Mkdir(a+"/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(b + "/d"); err != nil || len(ents) != 0 {
		t.Fatalf("new directory on the other mount: %v, %v", ents, err)
	}
	write(a+"/d/x", "x", 0)
	ents, err := os.ReadDir(b + "/d")
	if err != nil || len(ents) != 1 || ents[0].Name() != "x" {
		t.Errorf("listing on the other mount after a create: %v, %v", ents, err)
	}

	// A large file, across chunks, written on one mount and read on the
	// other.
	big := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16)
	if err := os.WriteFile(a+"/big", big, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(b + "/big"); err != nil || !bytes.Equal(got, big) {
		t.Errorf("large file on the other mount: %d bytes, %v", len(got), err)
	}
	copy(big[100<<10:], strings.Repeat("X", 1000))
	if err := os.WriteFile(a+"/big", big, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(b + "/big"); err != nil || !bytes.Equal(got, big) {
		t.Errorf("rewritten large file on the other mount differs (%v)", err)
	}

	// Removal is seen at once too.
	if err := os.Remove(a + "/f"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(b + "/f"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read on the other mount after unlink: %v", err)
	}
}
