package fusefs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFutimensWhileBuffered is issue 12 item 9a (cp -a, tar x, cp -p): an
// mtime set through the descriptor while its writes are still buffered
// wins over the writes' own mtime, at once (fstat) and after close (stat).
func TestFutimensWhileBuffered(t *testing.T) {
	m, _ := newMountedFS(t)
	want := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
	for _, size := range []int{100, 300 << 10} { // inline and chunked
		path := filepath.Join(m.Dir(), "f")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		tv := []syscall.Timeval{syscall.NsecToTimeval(want.UnixNano()), syscall.NsecToTimeval(want.UnixNano())}
		if err := syscall.Futimes(int(f.Fd()), tv); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		if got := time.Unix(st.Mtim.Unix()); !got.Equal(want) {
			t.Errorf("size %d: fstat after futimens: mtime %v, want %v", size, got, want)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(want) || fi.Size() != int64(size) {
			t.Errorf("size %d: after close: mtime %v size %d, want %v and %d", size, fi.ModTime(), fi.Size(), want, size)
		}
	}
}
