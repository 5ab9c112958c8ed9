package posixtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// tick is longer than the timestamp granularity of the file systems the
// suite runs on (Linux's coarse clock ticks every few milliseconds), so a
// change made after sleeping it gets a later timestamp.
const tick = 20 * time.Millisecond

// wantKind fails t unless err has kind want.
func wantKind(t *testing.T, err error, want errs.Kind, what string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want %s (%d)", what, want, want)
		return
	}
	if got := errs.KindOf(err); got != want {
		t.Errorf("%s: got kind %s (%d) from %v, want %s (%d)", what, got, got, err, want, want)
	}
}

// must fails t now if err is not nil.
func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v (kind %s)", what, err, errs.KindOf(err))
	}
}

// writeFile creates (or truncates) path and writes data.
func writeFile(t *testing.T, fs FS, path string, data []byte, perm uint32) {
	t.Helper()
	f, err := fs.Open(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	must(t, err, "create "+path)
	if len(data) > 0 {
		n, err := f.Write(data)
		must(t, err, "write "+path)
		if n != len(data) {
			t.Fatalf("write %s: wrote %d of %d bytes", path, n, len(data))
		}
	}
	must(t, f.Close(), "close "+path)
}

// touch creates an empty file.
func touch(t *testing.T, fs FS, path string) { t.Helper(); writeFile(t, fs, path, nil, 0o644) }

// readFile returns the content of path.
func readFile(t *testing.T, fs FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path, os.O_RDONLY, 0)
	must(t, err, "open "+path)
	defer f.Close()
	data, err := io.ReadAll(f)
	must(t, err, "read "+path)
	return data
}

// wantContent fails t unless path holds want.
func wantContent(t *testing.T, fs FS, path string, want []byte) {
	t.Helper()
	got := readFile(t, fs, path)
	if !bytes.Equal(got, want) {
		t.Errorf("%s: content %s, want %s", path, describe(got), describe(want))
	}
}

// describe prints short contents whole and long ones by length and the
// first difference-friendly prefix.
func describe(b []byte) string {
	if len(b) <= 32 {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%d bytes %q...", len(b), b[:32])
}

// firstDiff returns the first offset where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func stat(t *testing.T, fs FS, path string) core.Attr {
	t.Helper()
	a, err := fs.Stat(path)
	must(t, err, "stat "+path)
	return a
}

func lstat(t *testing.T, fs FS, path string) core.Attr {
	t.Helper()
	a, err := fs.Lstat(path)
	must(t, err, "lstat "+path)
	return a
}

// wantGone fails t unless path does not exist (even as a dangling symlink).
func wantGone(t *testing.T, fs FS, path string) {
	t.Helper()
	_, err := fs.Lstat(path)
	wantKind(t, err, errs.NotExist, "lstat "+path+" after removal")
}

// names returns the sorted names in dir.
func names(t *testing.T, fs FS, dir string) []string {
	t.Helper()
	ents, err := fs.ReadDir(dir)
	must(t, err, "readdir "+dir)
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name)
	}
	slices.Sort(out)
	return out
}

// wantNames fails t unless dir holds exactly want, each once.
func wantNames(t *testing.T, fs FS, dir string, want ...string) {
	t.Helper()
	got := names(t, fs, dir)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("readdir %s: %q, want %q", dir, got, want)
	}
}

// pattern returns n bytes that differ at every offset modulo a prime, so a
// misplaced range shows up.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i%251) + seed
	}
	return b
}

// writeAt writes p at off through f, all of it.
func writeAt(t *testing.T, f File, p []byte, off int64) {
	t.Helper()
	n, err := f.WriteAt(p, off)
	must(t, err, fmt.Sprintf("write %d bytes at %d", len(p), off))
	if n != len(p) {
		t.Fatalf("write at %d: wrote %d of %d bytes", off, n, len(p))
	}
}

// wantSize fails t unless path's size is want.
func wantSize(t *testing.T, fs FS, path string, want uint64) {
	t.Helper()
	if a := stat(t, fs, path); a.Size != want {
		t.Errorf("%s: size %d, want %d", path, a.Size, want)
	}
}

// wantLater fails t unless after is later than before.
func wantLater(t *testing.T, what string, before, after time.Time) {
	t.Helper()
	if !after.After(before) {
		t.Errorf("%s did not advance: %v then %v", what, before, after)
	}
}

// permFS returns fs acting as creds, or skips t if the adapter cannot.
func permFS(t *testing.T, fs FS, creds core.Creds) FS {
	t.Helper()
	v := fs.As(creds)
	if v == nil {
		t.Skip("adapter cannot act as another user (As returned nil)")
	}
	return v
}

// isEOF reports whether err is the end of a read.
func isEOF(err error) bool { return errors.Is(err, io.EOF) }
