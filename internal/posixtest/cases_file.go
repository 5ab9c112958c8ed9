package posixtest

import (
	"io"
	"os"
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// fileCases: open flags and handle modes.
var fileCases = []testCase{
	{"OpenCreateExcl", testOpenCreateExcl},
	{"OpenCreateExisting", testOpenCreateExisting},
	{"OpenTrunc", testOpenTrunc},
	{"OpenAppend", testOpenAppend},
	{"OpenMissing", testOpenMissing},
	{"OpenDirectoryFlag", testOpenDirectoryFlag},
	{"OpenDirForWrite", testOpenDirForWrite},
	{"HandleAccessMode", testHandleAccessMode},
	{"FtruncateReadOnly", testFtruncateReadOnly},
	{"SeekAndStat", testSeekAndStat},
}

func testOpenCreateExcl(t *testing.T, fs FS) {
	f, err := fs.Open("/f", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	must(t, err, "create /f exclusively")
	must(t, f.Close(), "close")
	a := stat(t, fs, "/f")
	if a.Mode != core.ModeFile|0o640 || a.Size != 0 || a.Nlink != 1 {
		t.Errorf("new file: mode %o size %d nlink %d, want %o 0 1", a.Mode, a.Size, a.Nlink, core.ModeFile|0o640)
	}
	_, err = fs.Open("/f", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	wantKind(t, err, errs.Exist, "O_CREAT|O_EXCL of an existing file")

	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	_, err = fs.Open("/d", os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o644)
	wantKind(t, err, errs.Exist, "O_CREAT|O_EXCL of an existing directory")
}

func testOpenCreateExisting(t *testing.T, fs FS) {
	writeFile(t, fs, "/f", []byte("keep"), 0o600)
	// O_CREAT without O_EXCL opens the existing file: no truncation, and
	// the mode argument is ignored.
	f, err := fs.Open("/f", os.O_RDWR|os.O_CREATE, 0o777)
	must(t, err, "O_CREAT of an existing file")
	must(t, f.Close(), "close")
	wantContent(t, fs, "/f", []byte("keep"))
	if a := stat(t, fs, "/f"); a.Mode != core.ModeFile|0o600 {
		t.Errorf("mode %o after O_CREAT of an existing file, want %o", a.Mode, core.ModeFile|0o600)
	}
}

func testOpenTrunc(t *testing.T, fs FS) {
	writeFile(t, fs, "/f", []byte("hello world"), 0o644)
	f, err := fs.Open("/f", os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err, "open O_TRUNC")
	if a, err := f.Stat(); err != nil || a.Size != 0 {
		t.Errorf("fstat after O_TRUNC: size %d, %v; want 0", a.Size, err)
	}
	must(t, f.Close(), "close")
	wantSize(t, fs, "/f", 0)
	wantContent(t, fs, "/f", nil)

	// Truncating a large file and writing less must not resurrect old data.
	writeFile(t, fs, "/big", pattern(200<<10, 1), 0o644)
	f, err = fs.Open("/big", os.O_RDWR|os.O_TRUNC, 0)
	must(t, err, "open O_TRUNC")
	writeAt(t, f, []byte("new"), 0)
	writeAt(t, f, []byte("end"), 100<<10)
	must(t, f.Close(), "close")
	want := make([]byte, 100<<10+3)
	copy(want, "new")
	copy(want[100<<10:], "end")
	wantContent(t, fs, "/big", want)
}

func testOpenAppend(t *testing.T, fs FS) {
	writeFile(t, fs, "/f", []byte("abc"), 0o644)
	f, err := fs.Open("/f", os.O_WRONLY|os.O_APPEND, 0)
	must(t, err, "open O_APPEND")
	_, err = f.Write([]byte("def"))
	must(t, err, "append")
	// Seeking does not move where an O_APPEND write goes.
	_, err = f.Seek(0, io.SeekStart)
	must(t, err, "seek")
	_, err = f.Write([]byte("ghi"))
	must(t, err, "append after seek")
	must(t, f.Close(), "close")
	wantContent(t, fs, "/f", []byte("abcdefghi"))

	// Two appending handles interleave without overwriting each other.
	f1, err := fs.Open("/f", os.O_WRONLY|os.O_APPEND, 0)
	must(t, err, "open O_APPEND")
	f2, err := fs.Open("/f", os.O_WRONLY|os.O_APPEND, 0)
	must(t, err, "open O_APPEND")
	_, err = f1.Write([]byte("1"))
	must(t, err, "append 1")
	_, err = f2.Write([]byte("2"))
	must(t, err, "append 2")
	_, err = f1.Write([]byte("3"))
	must(t, err, "append 3")
	must(t, f1.Close(), "close")
	must(t, f2.Close(), "close")
	wantContent(t, fs, "/f", []byte("abcdefghi123"))
}

func testOpenMissing(t *testing.T, fs FS) {
	_, err := fs.Open("/missing", os.O_RDONLY, 0)
	wantKind(t, err, errs.NotExist, "open of a missing file")
	_, err = fs.Open("/missing/f", os.O_RDWR|os.O_CREATE, 0o644)
	wantKind(t, err, errs.NotExist, "create in a missing directory")
	touch(t, fs, "/file")
	_, err = fs.Open("/file/f", os.O_RDWR|os.O_CREATE, 0o644)
	wantKind(t, err, errs.NotDir, "create under a file")
	_, err = fs.Open("/file/", os.O_RDONLY, 0)
	wantKind(t, err, errs.NotDir, "open of a file with a trailing slash")
	_, err = fs.Open("", os.O_RDONLY, 0)
	wantKind(t, err, errs.NotExist, "open of the empty path")
}

func testOpenDirectoryFlag(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	_, err := fs.Open("/f", os.O_RDONLY|syscallODirectory, 0)
	wantKind(t, err, errs.NotDir, "O_DIRECTORY on a file")
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	d, err := fs.Open("/d", os.O_RDONLY|syscallODirectory, 0)
	must(t, err, "O_DIRECTORY on a directory")
	must(t, d.Close(), "close directory")
}

func testOpenDirForWrite(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	_, err := fs.Open("/d", os.O_WRONLY, 0)
	wantKind(t, err, errs.IsDir, "open of a directory for writing")
	_, err = fs.Open("/d", os.O_RDWR|os.O_CREATE, 0o644)
	wantKind(t, err, errs.IsDir, "O_CREAT of a directory")
}

func testHandleAccessMode(t *testing.T, fs FS) {
	writeFile(t, fs, "/f", []byte("data"), 0o644)
	r, err := fs.Open("/f", os.O_RDONLY, 0)
	must(t, err, "open read-only")
	_, err = r.Write([]byte("x"))
	wantKind(t, err, errs.BadHandle, "write on an O_RDONLY handle")
	_, err = r.WriteAt([]byte("x"), 0)
	wantKind(t, err, errs.BadHandle, "pwrite on an O_RDONLY handle")
	must(t, r.Close(), "close")

	w, err := fs.Open("/f", os.O_WRONLY, 0)
	must(t, err, "open write-only")
	_, err = w.Read(make([]byte, 4))
	wantKind(t, err, errs.BadHandle, "read on an O_WRONLY handle")
	_, err = w.ReadAt(make([]byte, 4), 0)
	wantKind(t, err, errs.BadHandle, "pread on an O_WRONLY handle")
	must(t, w.Close(), "close")
	wantContent(t, fs, "/f", []byte("data"))
}

// testFtruncateReadOnly: Linux answers ftruncate on a handle not open for
// writing with EINVAL (do_sys_ftruncate), not EBADF.
func testFtruncateReadOnly(t *testing.T, fs FS) {
	writeFile(t, fs, "/f", []byte("data"), 0o644)
	r, err := fs.Open("/f", os.O_RDONLY, 0)
	must(t, err, "open read-only")
	wantKind(t, r.Truncate(0), errs.Invalid, "ftruncate on an O_RDONLY handle")
	must(t, r.Close(), "close")
	wantContent(t, fs, "/f", []byte("data"))
}

func testSeekAndStat(t *testing.T, fs FS) {
	f, err := fs.Open("/f", os.O_RDWR|os.O_CREATE, 0o644)
	must(t, err, "create")
	defer f.Close()
	_, err = f.Write([]byte("0123456789"))
	must(t, err, "write")
	if a, err := f.Stat(); err != nil || a.Size != 10 {
		t.Errorf("fstat of an open file after writing 10 bytes: size %d, %v", a.Size, err)
	}
	if pos, err := f.Seek(-4, io.SeekEnd); err != nil || pos != 6 {
		t.Errorf("seek -4 from the end: %d, %v; want 6", pos, err)
	}
	buf := make([]byte, 10)
	n, err := f.Read(buf)
	if n != 4 || string(buf[:n]) != "6789" || err != nil && !isEOF(err) {
		t.Errorf("read at 6: %q, %v; want \"6789\"", buf[:n], err)
	}
	if n, err := f.Read(buf); n != 0 || !isEOF(err) {
		t.Errorf("read at the end: %d, %v; want 0, EOF", n, err)
	}
	if pos, err := f.Seek(2, io.SeekStart); err != nil || pos != 2 {
		t.Errorf("seek to 2: %d, %v", pos, err)
	}
	if pos, err := f.Seek(3, io.SeekCurrent); err != nil || pos != 5 {
		t.Errorf("seek +3: %d, %v; want 5", pos, err)
	}
	_, err = f.Seek(-1, io.SeekStart)
	wantKind(t, err, errs.Invalid, "seek before the start")
	must(t, f.Sync(), "fsync")
	wantSize(t, fs, "/f", 10)
}
