package posixtest

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// errnoCases: every path-taking call against every way a path can be
// wrong, in the manner of a POSIX test suite's per-syscall errno tables,
// and the errors of mknod and truncate the other groups do not reach.
var errnoCases = []testCase{
	{"PathNotDir", testPathNotDir},
	{"PathMissingDir", testPathMissingDir},
	{"PathNameTooLong", testPathNameTooLong},
	{"PathLoop", testPathLoop},
	{"MknodErrors", testMknodErrors},
	{"TruncateErrors", testTruncateErrors},
	{"SymlinkTargetTooLong", testSymlinkTargetTooLong},
	{"TimesXattrAndChmod", testTimesXattrAndChmod},
}

// permErrnoCases: the same calls by a user who may not search a directory
// on the path, or may not write the directory they change.
var permErrnoCases = []testCase{
	{"PermSearchEveryCall", testPermSearchEveryCall},
	{"PermWriteDirEveryCall", testPermWriteDirEveryCall},
	{"PermMknodDevice", testPermMknodDevice},
	{"PermTruncateClearsSetuid", testPermTruncateClearsSetuid},
	{"PermWriteKeepsSetgidWithoutGroupExec", testPermWriteKeepsSetgidWithoutGroupExec},
	{"RootWriteKeepsSetuid", testRootWriteKeepsSetuid},
}

// pathCall is one system call with the path under test in one argument
// position; the other arguments name things that exist (/file, a regular
// file) or do not (/new).
type pathCall struct {
	name string
	call func(fs FS, p string) error
}

func pathCalls() []pathCall {
	when := time.Date(2005, 1, 1, 0, 0, 0, 0, time.UTC)
	open := func(flags int) func(FS, string) error {
		return func(fs FS, p string) error {
			f, err := fs.Open(p, flags, 0o644)
			if err == nil {
				f.Close()
			}
			return err
		}
	}
	return []pathCall{
		{"stat", func(fs FS, p string) error { _, err := fs.Stat(p); return err }},
		{"lstat", func(fs FS, p string) error { _, err := fs.Lstat(p); return err }},
		{"open", open(os.O_RDONLY)},
		{"create", open(os.O_WRONLY | os.O_CREATE)},
		{"mkdir", func(fs FS, p string) error { return fs.Mkdir(p, 0o755) }},
		{"mknod", func(fs FS, p string) error { return fs.Mknod(p, core.ModeFIFO|0o644, 0) }},
		{"symlink", func(fs FS, p string) error { return fs.Symlink("file", p) }},
		{"readlink", func(fs FS, p string) error { _, err := fs.Readlink(p); return err }},
		{"link from", func(fs FS, p string) error { return fs.Link(p, "/new") }},
		{"link to", func(fs FS, p string) error { return fs.Link("/file", p) }},
		{"unlink", func(fs FS, p string) error { return fs.Unlink(p) }},
		{"rmdir", func(fs FS, p string) error { return fs.Rmdir(p) }},
		{"rename from", func(fs FS, p string) error { return fs.Rename(p, "/new", 0) }},
		{"rename to", func(fs FS, p string) error { return fs.Rename("/file", p, 0) }},
		{"readdir", func(fs FS, p string) error { _, err := fs.ReadDir(p); return err }},
		{"chmod", func(fs FS, p string) error { return fs.Chmod(p, 0o644) }},
		{"chown", func(fs FS, p string) error { return fs.Chown(p, -1, -1) }},
		{"lchown", func(fs FS, p string) error { return fs.Lchown(p, -1, -1) }},
		{"utimes", func(fs FS, p string) error { return fs.Chtimes(p, when, when) }},
		{"truncate", func(fs FS, p string) error { return fs.Truncate(p, 0) }},
		{"access", func(fs FS, p string) error { return fs.Access(p, 0) }},
		{"getxattr", func(fs FS, p string) error { _, err := fs.GetXattr(p, "user.x"); return err }},
		{"setxattr", func(fs FS, p string) error { return fs.SetXattr(p, "user.x", []byte("v"), 0) }},
		{"listxattr", func(fs FS, p string) error { _, err := fs.ListXattr(p); return err }},
		{"removexattr", func(fs FS, p string) error { return fs.RemoveXattr(p, "user.x") }},
	}
}

// wantEveryCall runs every path call with path p and wants kind from each;
// /file must stay as it was.
func wantEveryCall(t *testing.T, fs FS, p string, want errs.Kind, why string) {
	t.Helper()
	for _, c := range pathCalls() {
		wantKind(t, c.call(fs, p), want, c.name+" "+why)
	}
	if a := stat(t, fs, "/file"); a.Nlink != 1 || a.Size != 4 {
		t.Errorf("/file changed by failed calls: nlink %d size %d", a.Nlink, a.Size)
	}
	wantGone(t, fs, "/new")
}

func errnoFixture(t *testing.T, fs FS) {
	writeFile(t, fs, "/file", []byte("data"), 0o644)
}

func testPathNotDir(t *testing.T, fs FS) {
	errnoFixture(t, fs)
	wantEveryCall(t, fs, "/file/x", errs.NotDir, "through a regular file")
}

func testPathMissingDir(t *testing.T, fs FS) {
	errnoFixture(t, fs)
	wantEveryCall(t, fs, "/missing/x", errs.NotExist, "through a missing directory")
}

func testPathNameTooLong(t *testing.T, fs FS) {
	errnoFixture(t, fs)
	long := strings.Repeat("l", core.MaxNameLen+1)
	wantEveryCall(t, fs, "/"+long, errs.NameTooLong, "of a 256-byte name")
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	wantEveryCall(t, fs, "/d/"+long+"/x", errs.NameTooLong, "through a 256-byte name")
}

func testPathLoop(t *testing.T, fs FS) {
	errnoFixture(t, fs)
	must(t, fs.Symlink("loop", "/loop"), "symlink")
	wantEveryCall(t, fs, "/loop/x", errs.Loop, "through a symlink loop")
}

func testMknodErrors(t *testing.T, fs FS) {
	errnoFixture(t, fs)
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	wantKind(t, fs.Mknod("/file", core.ModeFIFO|0o644, 0), errs.Exist, "mknod over a file")
	wantKind(t, fs.Mknod("/d", core.ModeFIFO|0o644, 0), errs.Exist, "mknod over a directory")
	must(t, fs.Mknod("/p", core.ModeFIFO|0o600, 0), "mkfifo")
	wantKind(t, fs.Mknod("/p", core.ModeFIFO|0o600, 0), errs.Exist, "mkfifo twice")
	if a := lstat(t, fs, "/p"); a.Mode != core.ModeFIFO|0o600 || a.Size != 0 || a.Nlink != 1 {
		t.Errorf("fifo: mode %o size %d nlink %d", a.Mode, a.Size, a.Nlink)
	}
	must(t, fs.Mknod("/s", core.ModeSocket|0o644, 0), "mknod of a socket")
	if a := lstat(t, fs, "/s"); a.Mode&core.ModeType != core.ModeSocket {
		t.Errorf("socket node: mode %o", a.Mode)
	}
	// A regular file made by mknod is empty and can be written.
	must(t, fs.Mknod("/r", core.ModeFile|0o644, 0), "mknod of a regular file")
	writeFile(t, fs, "/r", []byte("ok"), 0o644)
	wantContent(t, fs, "/r", []byte("ok"))
	// Root may make device nodes; they carry their device number.
	must(t, fs.Mknod("/null", core.ModeChar|0o644, 0x103), "mknod of a character device")
	if a := lstat(t, fs, "/null"); a.Mode != core.ModeChar|0o644 || a.Rdev != 0x103 {
		t.Errorf("device node: mode %o rdev %#x", a.Mode, a.Rdev)
	}
}

func testTruncateErrors(t *testing.T, fs FS) {
	errnoFixture(t, fs)
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	wantKind(t, fs.Truncate("/d", 0), errs.IsDir, "truncate of a directory")
	wantKind(t, fs.Truncate("/file", -1), errs.Invalid, "truncate to a negative size")
	must(t, fs.Mknod("/p", core.ModeFIFO|0o644, 0), "mkfifo")
	must(t, fs.Symlink("file", "/l"), "symlink")
	must(t, fs.Truncate("/l", 2), "truncate through a symlink")
	wantContent(t, fs, "/file", []byte("da"))
	f, err := fs.Open("/file", os.O_RDWR, 0)
	must(t, err, "open")
	wantKind(t, f.Truncate(-1), errs.Invalid, "ftruncate to a negative size")
	must(t, f.Close(), "close")
}

func testSymlinkTargetTooLong(t *testing.T, fs FS) {
	wantKind(t, fs.Symlink(strings.Repeat("t", core.MaxSymlinkLen+1), "/l"), errs.NameTooLong, "symlink with a 4096-byte target")
	long := strings.Repeat("t", core.MaxSymlinkLen)
	must(t, fs.Symlink(long, "/l"), "symlink with a 4095-byte target")
	if got, err := fs.Readlink("/l"); err != nil || got != long {
		t.Errorf("readlink of a 4095-byte target: %d bytes, %v", len(got), err)
	}
}

// testTimesXattrAndChmod: changing an extended attribute or the mode moves
// ctime only.
func testTimesXattrAndChmod(t *testing.T, fs FS) {
	writeFile(t, fs, "/f", []byte("x"), 0o644)
	for _, c := range []struct {
		what string
		fn   func() error
	}{
		{"setxattr", func() error { return fs.SetXattr("/f", "user.k", []byte("v"), 0) }},
		{"removexattr", func() error { return fs.RemoveXattr("/f", "user.k") }},
		{"chmod", func() error { return fs.Chmod("/f", 0o600) }},
		{"chown", func() error { return fs.Chown("/f", 5, 5) }},
	} {
		before := stat(t, fs, "/f")
		time.Sleep(tick)
		must(t, c.fn(), c.what)
		after := stat(t, fs, "/f")
		wantLater(t, "ctime after "+c.what, before.Ctime, after.Ctime)
		if !after.Mtime.Equal(before.Mtime) {
			t.Errorf("%s changed mtime from %v to %v", c.what, before.Mtime, after.Mtime)
		}
	}
}

// testPermSearchEveryCall: a directory bob may not search hides everything
// below it from every call, existing names and new ones alike.
func testPermSearchEveryCall(t *testing.T, fs FS) {
	b := permFS(t, fs, bob)
	errnoFixture(t, fs)
	must(t, fs.Chmod("/file", 0o666), "chmod")
	ownedDir(t, fs, "/priv", 0o700, alice)
	ownedFile(t, fs, "/priv/f", []byte("secret"), 0o666, alice)
	for _, p := range []string{"/priv/f", "/priv/new"} {
		for _, c := range pathCalls() {
			wantKind(t, c.call(b, p), errs.Permission, c.name+" of "+p+" below a directory the caller may not search")
		}
	}
	wantContent(t, fs, "/priv/f", []byte("secret"))
}

// testPermWriteDirEveryCall: adding, removing or renaming a name needs
// write permission on its directory.
func testPermWriteDirEveryCall(t *testing.T, fs FS) {
	b := permFS(t, fs, bob)
	ownedDir(t, fs, "/pub", 0o777, core.Root)
	writeFile(t, b, "/pub/mine", []byte("bob's"), 0o644)
	ownedDir(t, fs, "/home", 0o755, alice)
	ownedFile(t, fs, "/home/f", []byte("alice's"), 0o666, alice)
	ownedDir(t, fs, "/home/d", 0o777, alice)
	for _, c := range []struct {
		what string
		err  error
	}{
		{"mkdir", b.Mkdir("/home/new", 0o755)},
		{"mknod", b.Mknod("/home/new", core.ModeFIFO|0o644, 0)},
		{"symlink", b.Symlink("f", "/home/new")},
		{"link into", b.Link("/pub/mine", "/home/new")},
		{"unlink", b.Unlink("/home/f")},
		{"rmdir", b.Rmdir("/home/d")},
		{"rename out of", b.Rename("/home/f", "/pub/f", 0)},
		{"rename into", b.Rename("/pub/mine", "/home/new", 0)},
		{"create", func() error { _, err := b.Open("/home/new", os.O_WRONLY|os.O_CREATE, 0o644); return err }()},
	} {
		wantKind(t, c.err, errs.Permission, c.what+" in a directory the caller may not write")
	}
	wantNames(t, fs, "/home", "f", "d")
	wantNames(t, fs, "/pub", "mine")
	// Writing the files themselves needs no directory permission.
	f, err := b.Open("/home/f", os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err, "open a 0666 file in a 0755 directory for writing")
	must(t, f.Close(), "close")
	wantContent(t, fs, "/home/f", nil)
}

func testPermMknodDevice(t *testing.T, fs FS) {
	a := permFS(t, fs, alice)
	ownedDir(t, fs, "/home", 0o755, alice)
	wantKind(t, a.Mknod("/home/dev", core.ModeChar|0o666, 0x103), errs.NotPermitted, "mknod of a device by a user")
	wantKind(t, a.Mknod("/home/blk", core.ModeBlock|0o666, 0x801), errs.NotPermitted, "mknod of a block device by a user")
	must(t, a.Mknod("/home/fifo", core.ModeFIFO|0o644, 0), "mkfifo by a user")
	if st := lstat(t, fs, "/home/fifo"); st.UID != alice.UID || st.GID != alice.GID {
		t.Errorf("fifo made by %d:%d is owned by %d:%d", alice.UID, alice.GID, st.UID, st.GID)
	}
}

// testPermTruncateClearsSetuid: truncating a file drops setuid (and setgid
// with group execute) unless the caller is root, as writing does.
func testPermTruncateClearsSetuid(t *testing.T, fs FS) {
	a := permFS(t, fs, alice)
	ownedDir(t, fs, "/home", 0o755, alice)
	ownedFile(t, fs, "/home/suid", []byte("xxxx"), 0o6755, alice)
	must(t, a.Truncate("/home/suid", 2), "truncate by the owner")
	if st := stat(t, fs, "/home/suid"); st.Mode != core.ModeFile|0o755 {
		t.Errorf("mode %o after truncate by the owner, want %o", st.Mode, core.ModeFile|0o755)
	}
}

// testPermWriteKeepsSetgidWithoutGroupExec: setgid without group execute
// marks mandatory locking, not privilege: a write keeps it (and drops
// setuid).
func testPermWriteKeepsSetgidWithoutGroupExec(t *testing.T, fs FS) {
	a := permFS(t, fs, alice)
	ownedDir(t, fs, "/home", 0o755, alice)
	ownedFile(t, fs, "/home/f", []byte("x"), 0o6664, alice)
	f, err := a.Open("/home/f", os.O_WRONLY, 0)
	must(t, err, "open")
	writeAt(t, f, []byte("y"), 0)
	must(t, f.Close(), "close")
	if st := stat(t, fs, "/home/f"); st.Mode != core.ModeFile|0o2664 {
		t.Errorf("mode %o after a write, want %o", st.Mode, core.ModeFile|0o2664)
	}
}

// testRootWriteKeepsSetuid: root (CAP_FSETID) writes without dropping
// setuid or setgid.
func testRootWriteKeepsSetuid(t *testing.T, fs FS) {
	permFS(t, fs, alice) // needs identities only to be sure fs is root's view
	ownedFile(t, fs, "/f", []byte("x"), 0o6755, alice)
	f, err := fs.Open("/f", os.O_WRONLY, 0)
	must(t, err, "open")
	writeAt(t, f, []byte("y"), 0)
	must(t, f.Close(), "close")
	must(t, fs.Truncate("/f", 1), "truncate")
	if st := stat(t, fs, "/f"); st.Mode != core.ModeFile|0o6755 {
		t.Errorf("mode %o after root wrote and truncated, want %o", st.Mode, core.ModeFile|0o6755)
	}
}
