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

// TestWriteByOtherClearsSetuid is issue 12 item 9b: a write by a caller
// without CAP_FSETID (here: not root) to a setuid/setgid file clears both
// bits (setgid as it has group-exec) at the write, as fstat and stat show
// at once, before close.
func TestWriteByOtherClearsSetuid(t *testing.T) {
	m, _ := newMountedFS(t)
	const owner, writer = 1000, 2000
	for _, size := range []int{100, 300 << 10} { // inline and chunked
		path := filepath.Join(m.Dir(), "suid")
		if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, owner, owner); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o6777|os.ModeSetuid|os.ModeSetgid); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != os.ModeSetuid|os.ModeSetgid {
			t.Fatalf("size %d: setup: %v, %v", size, fi.Mode(), err)
		}
		err := runAsUser(writer, writer, func() error {
			fd, err := syscall.Open(path, syscall.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer syscall.Close(fd)
			if _, err := syscall.Pwrite(fd, []byte("x"), 10); err != nil {
				return err
			}
			var st syscall.Stat_t
			if err := syscall.Fstat(fd, &st); err != nil {
				return err
			}
			if st.Mode&0o6000 != 0 {
				t.Errorf("size %d: fstat right after the write: mode %#o, want setuid and setgid cleared", size, st.Mode)
			}
			if err := syscall.Stat(path, &st); err != nil {
				return err
			}
			if st.Mode&0o6000 != 0 {
				t.Errorf("size %d: stat right after the write: mode %#o, want setuid and setgid cleared", size, st.Mode)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("size %d: write as uid %d: %v", size, writer, err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o777 {
			t.Errorf("size %d: after close: mode %v, %v; want 0777 without setuid and setgid", size, fi.Mode(), err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}
