package posixtest

import (
	"os"
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// linkCases: hard links.
var linkCases = []testCase{
	{"HardLink", testHardLink},
	{"HardLinkErrors", testHardLinkErrors},
	{"HardLinkLargeFile", testHardLinkLargeFile},
}

// symlinkCases: symbolic links and path resolution through them.
var symlinkCases = []testCase{
	{"Symlink", testSymlink},
	{"SymlinkDangling", testSymlinkDangling},
	{"SymlinkLoop", testSymlinkLoop},
	{"SymlinkIntermediateDir", testSymlinkIntermediateDir},
	{"SymlinkNoFollow", testSymlinkNoFollow},
	{"SymlinkErrors", testSymlinkErrors},
}

func testHardLink(t *testing.T, fs FS) {
	writeFile(t, fs, "/a", []byte("shared"), 0o644)
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	must(t, fs.Link("/a", "/d/b"), "link")
	a, b := stat(t, fs, "/a"), stat(t, fs, "/d/b")
	if a.Ino != b.Ino || a.Nlink != 2 || b.Nlink != 2 {
		t.Errorf("after link: inodes %d, %d nlink %d, %d; want one inode, nlink 2", a.Ino, b.Ino, a.Nlink, b.Nlink)
	}
	must(t, fs.Link("/a", "/c"), "second link")
	if a := stat(t, fs, "/d/b"); a.Nlink != 3 {
		t.Errorf("nlink %d with three names, want 3", a.Nlink)
	}
	// Data written through one name is read through the other.
	f, err := fs.Open("/d/b", os.O_WRONLY, 0)
	must(t, err, "open link")
	writeAt(t, f, []byte("SH"), 0)
	must(t, f.Close(), "close")
	wantContent(t, fs, "/a", []byte("SHared"))
	wantContent(t, fs, "/c", []byte("SHared"))

	must(t, fs.Unlink("/a"), "unlink the first name")
	wantContent(t, fs, "/d/b", []byte("SHared"))
	must(t, fs.Unlink("/c"), "unlink the third name")
	if a := stat(t, fs, "/d/b"); a.Nlink != 1 || a.Size != 6 {
		t.Errorf("last name: nlink %d size %d, want 1 6", a.Nlink, a.Size)
	}
	wantContent(t, fs, "/d/b", []byte("SHared"))
	wantNames(t, fs, "/", "d")
}

func testHardLinkErrors(t *testing.T, fs FS) {
	touch(t, fs, "/a")
	touch(t, fs, "/b")
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	wantKind(t, fs.Link("/a", "/b"), errs.Exist, "link over an existing file")
	wantKind(t, fs.Link("/a", "/d"), errs.Exist, "link over an existing directory")
	wantKind(t, fs.Link("/d", "/d2"), errs.NotPermitted, "link to a directory")
	wantKind(t, fs.Link("/missing", "/x"), errs.NotExist, "link to a missing file")
	wantKind(t, fs.Link("/a", "/missing/x"), errs.NotExist, "link into a missing directory")
	if a := stat(t, fs, "/a"); a.Nlink != 1 {
		t.Errorf("nlink %d after failed links, want 1", a.Nlink)
	}
}

func testHardLinkLargeFile(t *testing.T, fs FS) {
	data := pattern(2*TestChunkSize+99, 4)
	writeFile(t, fs, "/a", data, 0o644)
	must(t, fs.Link("/a", "/b"), "link")
	must(t, fs.Unlink("/a"), "unlink")
	wantContent(t, fs, "/b", data)
	must(t, fs.Truncate("/b", 10), "truncate")
	must(t, fs.Link("/b", "/c"), "link")
	wantContent(t, fs, "/c", data[:10])
}

func testSymlink(t *testing.T, fs FS) {
	writeFile(t, fs, "/target", []byte("through the link"), 0o600)
	must(t, fs.Symlink("target", "/l"), "symlink")
	if got, err := fs.Readlink("/l"); err != nil || got != "target" {
		t.Errorf("readlink: %q, %v; want \"target\"", got, err)
	}
	l := lstat(t, fs, "/l")
	if !core.IsSymlink(l.Mode) || l.Size != uint64(len("target")) {
		t.Errorf("lstat of a symlink: mode %o size %d, want a symlink of size 6", l.Mode, l.Size)
	}
	s, target := stat(t, fs, "/l"), stat(t, fs, "/target")
	if s.Ino != target.Ino || s.Mode != core.ModeFile|0o600 {
		t.Errorf("stat through a symlink: inode %d mode %o, want inode %d mode %o", s.Ino, s.Mode, target.Ino, core.ModeFile|0o600)
	}
	wantContent(t, fs, "/l", []byte("through the link"))
	// Writes through the link reach the target; unlinking the link leaves it.
	f, err := fs.Open("/l", os.O_WRONLY|os.O_APPEND, 0)
	must(t, err, "open through a symlink")
	_, err = f.Write([]byte("!"))
	must(t, err, "write through a symlink")
	must(t, f.Close(), "close")
	must(t, fs.Unlink("/l"), "unlink a symlink")
	wantContent(t, fs, "/target", []byte("through the link!"))
	wantNames(t, fs, "/", "target")
}

func testSymlinkDangling(t *testing.T, fs FS) {
	must(t, fs.Symlink("nowhere", "/l"), "symlink to a missing name")
	lstat(t, fs, "/l")
	_, err := fs.Stat("/l")
	wantKind(t, err, errs.NotExist, "stat through a dangling symlink")
	_, err = fs.Open("/l", os.O_RDONLY, 0)
	wantKind(t, err, errs.NotExist, "open through a dangling symlink")
	_, err = fs.Open("/l", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	wantKind(t, err, errs.Exist, "O_CREAT|O_EXCL on a dangling symlink")
	// O_CREAT without O_EXCL creates the file the link points at.
	f, err := fs.Open("/l", os.O_WRONLY|os.O_CREATE, 0o644)
	must(t, err, "O_CREAT through a dangling symlink")
	_, err = f.Write([]byte("made"))
	must(t, err, "write")
	must(t, f.Close(), "close")
	wantContent(t, fs, "/nowhere", []byte("made"))
	wantNames(t, fs, "/", "l", "nowhere")
}

func testSymlinkLoop(t *testing.T, fs FS) {
	must(t, fs.Symlink("l2", "/l1"), "symlink")
	must(t, fs.Symlink("l1", "/l2"), "symlink")
	must(t, fs.Symlink("self", "/self"), "symlink")
	_, err := fs.Stat("/l1")
	wantKind(t, err, errs.Loop, "stat of a symlink loop")
	_, err = fs.Stat("/self")
	wantKind(t, err, errs.Loop, "stat of a symlink to itself")
	_, err = fs.Open("/l1", os.O_RDONLY, 0)
	wantKind(t, err, errs.Loop, "open of a symlink loop")
	_, err = fs.Stat("/l1/x")
	wantKind(t, err, errs.Loop, "stat through a symlink loop")
	wantKind(t, fs.Mkdir("/self/d", 0o755), errs.Loop, "mkdir through a symlink loop")
	lstat(t, fs, "/l1")
}

func testSymlinkIntermediateDir(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/real", 0o755), "mkdir")
	must(t, fs.Mkdir("/real/sub", 0o755), "mkdir")
	writeFile(t, fs, "/real/sub/f", []byte("deep"), 0o644)
	must(t, fs.Symlink("real", "/alias"), "symlink to a directory")
	must(t, fs.Symlink("../..", "/real/sub/up"), "symlink with ..")

	wantContent(t, fs, "/alias/sub/f", []byte("deep"))
	writeFile(t, fs, "/alias/sub/g", []byte("via alias"), 0o644)
	wantContent(t, fs, "/real/sub/g", []byte("via alias"))
	must(t, fs.Mkdir("/alias/new", 0o755), "mkdir through a symlinked directory")
	wantNames(t, fs, "/alias", "new", "sub")
	wantNames(t, fs, "/real", "new", "sub")
	// ".." after a symlink is the parent of where the link led.
	wantContent(t, fs, "/real/sub/up/real/sub/f", []byte("deep"))
	wantContent(t, fs, "/alias/sub/up/alias/sub/g", []byte("via alias"))
	must(t, fs.Rename("/alias/sub/g", "/alias/g", 0), "rename through a symlinked directory")
	wantContent(t, fs, "/real/g", []byte("via alias"))
	// A trailing slash makes lstat follow the link to its directory.
	if a := lstat(t, fs, "/alias/"); !core.IsDir(a.Mode) {
		t.Errorf("lstat alias/: mode %o, want a directory", a.Mode)
	}
	if a := lstat(t, fs, "/alias"); !core.IsSymlink(a.Mode) {
		t.Errorf("lstat alias: mode %o, want a symlink", a.Mode)
	}
	must(t, fs.Symlink("real/sub/f", "/file-alias"), "symlink to a file")
	_, err := fs.Stat("/file-alias/x")
	wantKind(t, err, errs.NotDir, "stat through a symlink to a file")
}

func testSymlinkNoFollow(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	must(t, fs.Symlink("f", "/l"), "symlink")
	_, err := fs.Open("/l", os.O_RDONLY|syscallONofollow, 0)
	wantKind(t, err, errs.Loop, "O_NOFOLLOW on a symlink")
	f, err := fs.Open("/f", os.O_RDONLY|syscallONofollow, 0)
	must(t, err, "O_NOFOLLOW on a file")
	must(t, f.Close(), "close")
	// Lchown changes the link; chown the target.
	must(t, fs.Lchown("/l", 1234, 4321), "lchown")
	if a := lstat(t, fs, "/l"); a.UID != 1234 || a.GID != 4321 {
		t.Errorf("lchown: link owned by %d:%d, want 1234:4321", a.UID, a.GID)
	}
	if a := stat(t, fs, "/f"); a.UID != 0 || a.GID != 0 {
		t.Errorf("lchown changed the target's owner to %d:%d", a.UID, a.GID)
	}
	must(t, fs.Chown("/l", 55, 66), "chown through a symlink")
	if a := stat(t, fs, "/f"); a.UID != 55 || a.GID != 66 {
		t.Errorf("chown through a link: target owned by %d:%d, want 55:66", a.UID, a.GID)
	}
}

func testSymlinkErrors(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	wantKind(t, fs.Symlink("x", "/f"), errs.Exist, "symlink over a file")
	wantKind(t, fs.Symlink("x", "/d"), errs.Exist, "symlink over a directory")
	wantKind(t, fs.Symlink("x", "/missing/l"), errs.NotExist, "symlink in a missing directory")
	_, err := fs.Readlink("/f")
	wantKind(t, err, errs.Invalid, "readlink of a file")
	_, err = fs.Readlink("/d")
	wantKind(t, err, errs.Invalid, "readlink of a directory")
	_, err = fs.Readlink("/missing")
	wantKind(t, err, errs.NotExist, "readlink of a missing name")
	wantKind(t, fs.Symlink("", "/empty"), errs.NotExist, "symlink with an empty target")
}
