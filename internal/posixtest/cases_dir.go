package posixtest

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// dirCases: creating, removing and listing directories and files.
var dirCases = []testCase{
	{"Mkdir", testMkdir},
	{"MkdirNlink", testMkdirNlink},
	{"Rmdir", testRmdir},
	{"Unlink", testUnlink},
	{"ReadDir", testReadDir},
	{"ReadDirTypes", testReadDirTypes},
	{"ReadDirLarge", testReadDirLarge},
	{"MknodFifo", testMknodFifo},
	{"StatFS", testStatFS},
}

// nameCases: name length and the special names.
var nameCases = []testCase{
	{"NameEmpty", testNameEmpty},
	{"NameLength", testNameLength},
	{"NameDots", testNameDots},
	{"NameBytes", testNameBytes},
}

// testNameBytes: a name is any bytes but NUL and '/', UTF-8 or not (Latin-1
// names from old archives, for one); so is a symlink's target.
func testNameBytes(t *testing.T, fs FS) {
	latin1 := "caf\xe9"             // "café" in Latin-1: not UTF-8
	odd := "\xff\xfe-\x01\x7f-\xc3" // invalid UTF-8, control bytes, a cut sequence
	writeFile(t, fs, "/"+latin1, []byte("bytes"), 0o644)
	must(t, fs.Mkdir("/"+odd, 0o755), "mkdir of a name that is not UTF-8")
	wantNames(t, fs, "/", latin1, odd)
	wantContent(t, fs, "/"+latin1, []byte("bytes"))
	must(t, fs.Rename("/"+latin1, "/"+odd+"/"+latin1+"2", 0), "rename to a name that is not UTF-8")
	wantNames(t, fs, "/"+odd, latin1+"2")
	must(t, fs.Symlink("../"+latin1+"\xa0", "/"+odd+"/link"), "symlink to a target that is not UTF-8")
	got, err := fs.Readlink("/" + odd + "/link")
	must(t, err, "readlink")
	if got != "../"+latin1+"\xa0" {
		t.Errorf("readlink = %q, want %q", got, "../"+latin1+"\xa0")
	}
	must(t, fs.Unlink("/"+odd+"/"+latin1+"2"), "unlink")
	must(t, fs.Unlink("/"+odd+"/link"), "unlink")
	must(t, fs.Rmdir("/"+odd), "rmdir")
	wantNames(t, fs, "/")
}

func testMkdir(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/d", 0o755), "mkdir /d")
	if a := stat(t, fs, "/d"); a.Mode != core.ModeDir|0o755 {
		t.Errorf("new directory mode %o, want %o", a.Mode, core.ModeDir|0o755)
	}
	wantNames(t, fs, "/d")
	wantKind(t, fs.Mkdir("/d", 0o755), errs.Exist, "mkdir of an existing directory")
	touch(t, fs, "/f")
	wantKind(t, fs.Mkdir("/f", 0o755), errs.Exist, "mkdir over a file")
	wantKind(t, fs.Mkdir("/missing/d", 0o755), errs.NotExist, "mkdir in a missing directory")
	wantKind(t, fs.Mkdir("/f/d", 0o755), errs.NotDir, "mkdir under a file")
	must(t, fs.Mkdir("/d/e", 0o700), "mkdir /d/e")
	if a := stat(t, fs, "/d/e"); a.Mode != core.ModeDir|0o700 {
		t.Errorf("nested directory mode %o, want %o", a.Mode, core.ModeDir|0o700)
	}
}

// testMkdirNlink: a directory's link count is 2 plus its subdirectories
// (their ".." entries), as every Linux disk file system reports.
func testMkdirNlink(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	if a := stat(t, fs, "/d"); a.Nlink != 2 {
		t.Errorf("empty directory nlink %d, want 2", a.Nlink)
	}
	must(t, fs.Mkdir("/d/a", 0o755), "mkdir")
	must(t, fs.Mkdir("/d/b", 0o755), "mkdir")
	touch(t, fs, "/d/f")
	if a := stat(t, fs, "/d"); a.Nlink != 4 {
		t.Errorf("directory with 2 subdirectories and a file: nlink %d, want 4", a.Nlink)
	}
	must(t, fs.Rmdir("/d/a"), "rmdir")
	if a := stat(t, fs, "/d"); a.Nlink != 3 {
		t.Errorf("after rmdir of a subdirectory: nlink %d, want 3", a.Nlink)
	}
}

func testRmdir(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	must(t, fs.Rmdir("/d"), "rmdir of an empty directory")
	wantGone(t, fs, "/d")
	wantKind(t, fs.Rmdir("/d"), errs.NotExist, "rmdir of a missing directory")

	must(t, fs.Mkdir("/full", 0o755), "mkdir")
	touch(t, fs, "/full/f")
	wantKind(t, fs.Rmdir("/full"), errs.NotEmpty, "rmdir of a directory holding a file")
	must(t, fs.Unlink("/full/f"), "unlink")
	must(t, fs.Mkdir("/full/sub", 0o755), "mkdir")
	wantKind(t, fs.Rmdir("/full"), errs.NotEmpty, "rmdir of a directory holding a directory")
	must(t, fs.Rmdir("/full/sub"), "rmdir")
	must(t, fs.Rmdir("/full"), "rmdir after emptying")

	touch(t, fs, "/f")
	wantKind(t, fs.Rmdir("/f"), errs.NotDir, "rmdir of a file")
	must(t, fs.Symlink("f", "/l"), "symlink")
	wantKind(t, fs.Rmdir("/l"), errs.NotDir, "rmdir of a symlink")
	wantNames(t, fs, "/", "f", "l")
}

func testUnlink(t *testing.T, fs FS) {
	writeFile(t, fs, "/f", []byte("x"), 0o644)
	must(t, fs.Unlink("/f"), "unlink")
	wantGone(t, fs, "/f")
	wantKind(t, fs.Unlink("/f"), errs.NotExist, "unlink of a missing file")
	wantKind(t, fs.Unlink("/missing/f"), errs.NotExist, "unlink in a missing directory")

	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	wantKind(t, fs.Unlink("/d"), errs.IsDir, "unlink of a directory")
	stat(t, fs, "/d")

	// An open file stays readable after its name is gone.
	writeFile(t, fs, "/open", []byte("still here"), 0o644)
	f, err := fs.Open("/open", os.O_RDONLY, 0)
	must(t, err, "open")
	must(t, fs.Unlink("/open"), "unlink of an open file")
	buf := make([]byte, 10)
	if n, err := f.ReadAt(buf, 0); n != 10 || string(buf) != "still here" {
		t.Errorf("read of an unlinked open file: %q, %v", buf[:n], err)
	}
	must(t, f.Close(), "close")
	wantGone(t, fs, "/open")
	wantNames(t, fs, "/", "d")
}

func testReadDir(t *testing.T, fs FS) {
	wantNames(t, fs, "/")
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	for _, n := range []string{"a", "b", "c"} {
		touch(t, fs, "/d/"+n)
	}
	must(t, fs.Mkdir("/d/sub", 0o755), "mkdir")
	wantNames(t, fs, "/d", "a", "b", "c", "sub")
	must(t, fs.Unlink("/d/b"), "unlink")
	touch(t, fs, "/d/e")
	must(t, fs.Rmdir("/d/sub"), "rmdir")
	wantNames(t, fs, "/d", "a", "c", "e")
	// The inode numbers in a listing are the files'.
	ents, err := fs.ReadDir("/d")
	must(t, err, "readdir")
	for _, e := range ents {
		if a := lstat(t, fs, "/d/"+e.Name); e.Ino != 0 && a.Ino != e.Ino {
			t.Errorf("readdir says %s is inode %d, lstat says %d", e.Name, e.Ino, a.Ino)
		}
	}
	_, err = fs.ReadDir("/d/a")
	wantKind(t, err, errs.NotDir, "readdir of a file")
	_, err = fs.ReadDir("/missing")
	wantKind(t, err, errs.NotExist, "readdir of a missing directory")
}

func testReadDirTypes(t *testing.T, fs FS) {
	touch(t, fs, "/file")
	must(t, fs.Mkdir("/dir", 0o755), "mkdir")
	must(t, fs.Symlink("file", "/link"), "symlink")
	must(t, fs.Mknod("/fifo", core.ModeFIFO|0o644, 0), "mknod")
	want := map[string]uint32{"file": core.ModeFile, "dir": core.ModeDir, "link": core.ModeLink, "fifo": core.ModeFIFO}
	ents, err := fs.ReadDir("/")
	must(t, err, "readdir")
	if len(ents) != len(want) {
		t.Errorf("readdir: %d entries, want %d", len(ents), len(want))
	}
	for _, e := range ents {
		if w, ok := want[e.Name]; !ok || e.Mode&core.ModeType != w {
			t.Errorf("readdir: %s has type %o, want %o", e.Name, e.Mode&core.ModeType, w)
		}
	}
}

func testReadDirLarge(t *testing.T, fs FS) {
	const n = 1000
	must(t, fs.Mkdir("/big", 0o755), "mkdir")
	for i := range n {
		f, err := fs.Open(fmt.Sprintf("/big/file-%04d", i), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		must(t, err, "create")
		must(t, f.Close(), "close")
	}
	checkAll := func(present func(i int) bool) {
		t.Helper()
		ents, err := fs.ReadDir("/big")
		must(t, err, "readdir")
		seen := make(map[string]int)
		for _, e := range ents {
			seen[e.Name]++
		}
		for i := range n {
			name := fmt.Sprintf("file-%04d", i)
			switch c := seen[name]; {
			case present(i) && c != 1:
				t.Errorf("%s listed %d times, want once", name, c)
			case !present(i) && c != 0:
				t.Errorf("%s listed %d times after removal", name, c)
			}
			delete(seen, name)
		}
		for name := range seen {
			t.Errorf("readdir lists %q, which was never created", name)
		}
	}
	checkAll(func(int) bool { return true })
	for i := 0; i < n; i += 3 {
		must(t, fs.Unlink(fmt.Sprintf("/big/file-%04d", i)), "unlink")
	}
	checkAll(func(i int) bool { return i%3 != 0 })
}

func testMknodFifo(t *testing.T, fs FS) {
	must(t, fs.Mknod("/p", core.ModeFIFO|0o640, 0), "mknod fifo")
	a := lstat(t, fs, "/p")
	if a.Mode != core.ModeFIFO|0o640 || a.Size != 0 || a.Nlink != 1 {
		t.Errorf("fifo: mode %o size %d nlink %d, want %o 0 1", a.Mode, a.Size, a.Nlink, core.ModeFIFO|0o640)
	}
	wantKind(t, fs.Mknod("/p", core.ModeFIFO|0o640, 0), errs.Exist, "mknod over an existing name")
	must(t, fs.Unlink("/p"), "unlink fifo")
	wantGone(t, fs, "/p")
}

func testStatFS(t *testing.T, fs FS) {
	s, err := fs.StatFS()
	must(t, err, "statfs")
	if s.NameMax != core.MaxNameLen {
		t.Errorf("statfs: name max %d, want %d", s.NameMax, core.MaxNameLen)
	}
	if s.Capacity == 0 || s.Used > s.Capacity {
		t.Errorf("statfs: capacity %d, used %d", s.Capacity, s.Used)
	}
	if s.Files == 0 {
		t.Errorf("statfs: %d inodes in use (at least the root is)", s.Files)
	}
	if s.FilesFree == 0 {
		t.Errorf("statfs: no free inodes on an empty file system")
	}
}

func testNameEmpty(t *testing.T, fs FS) {
	_, err := fs.Stat("")
	wantKind(t, err, errs.NotExist, "stat of the empty path")
	wantKind(t, fs.Mkdir("", 0o755), errs.NotExist, "mkdir of the empty path")
	wantKind(t, fs.Unlink(""), errs.NotExist, "unlink of the empty path")
}

func testNameLength(t *testing.T, fs FS) {
	max := strings.Repeat("n", core.MaxNameLen)
	long := max + "x"
	writeFile(t, fs, "/"+max, []byte("ok"), 0o644)
	wantContent(t, fs, "/"+max, []byte("ok"))
	wantNames(t, fs, "/", max)
	must(t, fs.Mkdir("/d"+max[1:], 0o755), "mkdir with a 255-byte name")

	_, err := fs.Open("/"+long, os.O_WRONLY|os.O_CREATE, 0o644)
	wantKind(t, err, errs.NameTooLong, "create with a 256-byte name")
	_, err = fs.Stat("/" + long)
	wantKind(t, err, errs.NameTooLong, "stat with a 256-byte name")
	wantKind(t, fs.Mkdir("/"+long, 0o755), errs.NameTooLong, "mkdir with a 256-byte name")
	wantKind(t, fs.Rename("/"+max, "/"+long, 0), errs.NameTooLong, "rename to a 256-byte name")
	wantKind(t, fs.Symlink("x", "/"+long), errs.NameTooLong, "symlink with a 256-byte name")
	// Multi-byte characters count in bytes.
	wide := strings.Repeat("é", 128) // 256 bytes
	_, err = fs.Open("/"+wide, os.O_WRONLY|os.O_CREATE, 0o644)
	wantKind(t, err, errs.NameTooLong, "create with a 128-character, 256-byte name")
	wantNames(t, fs, "/", max, "d"+max[1:])
}

func testNameDots(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	wantKind(t, fs.Mkdir("/d/.", 0o755), errs.Exist, "mkdir d/.")
	wantKind(t, fs.Mkdir("/d/..", 0o755), errs.Exist, "mkdir d/..")
	wantKind(t, fs.Rmdir("/d/."), errs.Invalid, "rmdir d/.")
	wantKind(t, fs.Rmdir("/d/.."), errs.NotEmpty, "rmdir d/..")
	touch(t, fs, "/d/f")
	if a, b := stat(t, fs, "/d/./f"), stat(t, fs, "/d/f"); a.Ino != b.Ino {
		t.Errorf("d/./f is inode %d, d/f is %d", a.Ino, b.Ino)
	}
	if a, b := stat(t, fs, "/d/../d/f"), stat(t, fs, "/d/f"); a.Ino != b.Ino {
		t.Errorf("d/../d/f is inode %d, d/f is %d", a.Ino, b.Ino)
	}
	if a, b := stat(t, fs, "/d/.."), stat(t, fs, "/"); a.Ino != b.Ino {
		t.Errorf("d/.. is inode %d, / is %d", a.Ino, b.Ino)
	}
	wantNames(t, fs, "/d", "f")
}
