package posixtest

import (
	"os"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// attrCases: chmod, chown, utimes and access as root.
var attrCases = []testCase{
	{"Chmod", testChmod},
	{"Chown", testChown},
	{"ChownClearsSetuid", testChownClearsSetuid},
	{"Chtimes", testChtimes},
	{"AccessRoot", testAccessRoot},
}

// timeCases: which operations advance which timestamps.
var timeCases = []testCase{
	{"TimesCreateUpdatesParent", testTimesCreateUpdatesParent},
	{"TimesRemoveUpdatesParent", testTimesRemoveUpdatesParent},
	{"TimesRenameUpdatesParents", testTimesRenameUpdatesParents},
	{"TimesWrite", testTimesWrite},
	{"TimesTruncate", testTimesTruncate},
	{"TimesLink", testTimesLink},
}

func testChmod(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	before := stat(t, fs, "/f")
	time.Sleep(tick)
	must(t, fs.Chmod("/f", 0o600), "chmod")
	a := stat(t, fs, "/f")
	if a.Mode != core.ModeFile|0o600 {
		t.Errorf("mode %o after chmod 600, want %o", a.Mode, core.ModeFile|0o600)
	}
	wantLater(t, "ctime after chmod", before.Ctime, a.Ctime)
	if !a.Mtime.Equal(before.Mtime) {
		t.Errorf("chmod changed mtime from %v to %v", before.Mtime, a.Mtime)
	}
	must(t, fs.Chmod("/f", 0o4755), "chmod 4755")
	if a := stat(t, fs, "/f"); a.Mode != core.ModeFile|0o4755 {
		t.Errorf("mode %o after chmod 4755, want %o", a.Mode, core.ModeFile|0o4755)
	}
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	must(t, fs.Chmod("/d", 0o1777), "chmod a directory")
	if a := stat(t, fs, "/d"); a.Mode != core.ModeDir|0o1777 {
		t.Errorf("directory mode %o after chmod 1777, want %o", a.Mode, core.ModeDir|0o1777)
	}
	// chmod follows a symlink.
	must(t, fs.Symlink("f", "/l"), "symlink")
	must(t, fs.Chmod("/l", 0o640), "chmod through a symlink")
	if a := stat(t, fs, "/f"); a.Mode != core.ModeFile|0o640 {
		t.Errorf("target mode %o after chmod through a link, want %o", a.Mode, core.ModeFile|0o640)
	}
	wantKind(t, fs.Chmod("/missing", 0o644), errs.NotExist, "chmod of a missing file")
}

func testChown(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	before := stat(t, fs, "/f")
	time.Sleep(tick)
	must(t, fs.Chown("/f", 1234, 5678), "chown")
	a := stat(t, fs, "/f")
	if a.UID != 1234 || a.GID != 5678 {
		t.Errorf("owner %d:%d after chown, want 1234:5678", a.UID, a.GID)
	}
	wantLater(t, "ctime after chown", before.Ctime, a.Ctime)
	must(t, fs.Chown("/f", -1, 42), "chgrp")
	if a := stat(t, fs, "/f"); a.UID != 1234 || a.GID != 42 {
		t.Errorf("owner %d:%d after chown -1:42, want 1234:42", a.UID, a.GID)
	}
	must(t, fs.Chown("/f", 7, -1), "chown uid only")
	if a := stat(t, fs, "/f"); a.UID != 7 || a.GID != 42 {
		t.Errorf("owner %d:%d after chown 7:-1, want 7:42", a.UID, a.GID)
	}
	wantKind(t, fs.Chown("/missing", 1, 1), errs.NotExist, "chown of a missing file")
}

// testChownClearsSetuid: Linux clears setuid, and setgid with group
// execute, when a regular file changes owner, even when root changes it
// (since 2.2.13).
func testChownClearsSetuid(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	must(t, fs.Chmod("/f", 0o6755), "chmod 6755")
	must(t, fs.Chown("/f", 1000, 1000), "chown")
	if a := stat(t, fs, "/f"); a.Mode != core.ModeFile|0o755 {
		t.Errorf("mode %o after chown of a setuid file, want %o", a.Mode, core.ModeFile|0o755)
	}
}

func testChtimes(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	before := stat(t, fs, "/f")
	time.Sleep(tick)
	atime := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
	mtime := time.Date(2002, 3, 4, 5, 6, 7, 8000, time.UTC)
	must(t, fs.Chtimes("/f", atime, mtime), "utimes")
	a := stat(t, fs, "/f")
	if !a.Atime.Equal(atime) || !a.Mtime.Equal(mtime) {
		t.Errorf("times after utimes: atime %v mtime %v, want %v %v", a.Atime, a.Mtime, atime, mtime)
	}
	wantLater(t, "ctime after utimes", before.Ctime, a.Ctime)
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	must(t, fs.Chtimes("/d", atime, mtime), "utimes of a directory")
	if a := stat(t, fs, "/d"); !a.Mtime.Equal(mtime) {
		t.Errorf("directory mtime %v after utimes, want %v", a.Mtime, mtime)
	}
	wantKind(t, fs.Chtimes("/missing", atime, mtime), errs.NotExist, "utimes of a missing file")
}

// testAccessRoot: root passes read and write checks whatever the mode, but
// executing needs some execute bit (Linux's generic_permission).
func testAccessRoot(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	must(t, fs.Chmod("/f", 0), "chmod 000")
	must(t, fs.Access("/f", 4|2), "access rw as root on mode 000")
	wantKind(t, fs.Access("/f", 1), errs.Permission, "access x as root on a file without x bits")
	must(t, fs.Chmod("/f", 0o100), "chmod 100")
	must(t, fs.Access("/f", 1), "access x as root on a file with an x bit")
	wantKind(t, fs.Access("/missing", 4), errs.NotExist, "access of a missing file")
}

func testTimesCreateUpdatesParent(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	for _, c := range []struct {
		what   string
		create func() error
	}{
		{"create", func() error {
			f, err := fs.Open("/d/f", os.O_WRONLY|os.O_CREATE, 0o644)
			if err == nil {
				err = f.Close()
			}
			return err
		}},
		{"mkdir", func() error { return fs.Mkdir("/d/sub", 0o755) }},
		{"symlink", func() error { return fs.Symlink("f", "/d/l") }},
		{"mknod", func() error { return fs.Mknod("/d/p", core.ModeFIFO|0o644, 0) }},
	} {
		before := stat(t, fs, "/d")
		time.Sleep(tick)
		must(t, c.create(), c.what)
		after := stat(t, fs, "/d")
		wantLater(t, "parent mtime after "+c.what, before.Mtime, after.Mtime)
		wantLater(t, "parent ctime after "+c.what, before.Ctime, after.Ctime)
	}
}

func testTimesRemoveUpdatesParent(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	touch(t, fs, "/d/f")
	must(t, fs.Mkdir("/d/sub", 0o755), "mkdir")
	for _, c := range []struct {
		what   string
		remove func() error
	}{
		{"unlink", func() error { return fs.Unlink("/d/f") }},
		{"rmdir", func() error { return fs.Rmdir("/d/sub") }},
	} {
		before := stat(t, fs, "/d")
		time.Sleep(tick)
		must(t, c.remove(), c.what)
		after := stat(t, fs, "/d")
		wantLater(t, "parent mtime after "+c.what, before.Mtime, after.Mtime)
		wantLater(t, "parent ctime after "+c.what, before.Ctime, after.Ctime)
	}
}

func testTimesRenameUpdatesParents(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/a", 0o755), "mkdir")
	must(t, fs.Mkdir("/b", 0o755), "mkdir")
	touch(t, fs, "/a/f")
	a0, b0, f0 := stat(t, fs, "/a"), stat(t, fs, "/b"), stat(t, fs, "/a/f")
	time.Sleep(tick)
	must(t, fs.Rename("/a/f", "/b/f", 0), "rename")
	a1, b1, f1 := stat(t, fs, "/a"), stat(t, fs, "/b"), stat(t, fs, "/b/f")
	wantLater(t, "source parent mtime after rename", a0.Mtime, a1.Mtime)
	wantLater(t, "target parent mtime after rename", b0.Mtime, b1.Mtime)
	wantLater(t, "renamed file's ctime", f0.Ctime, f1.Ctime)
	if !f1.Mtime.Equal(f0.Mtime) {
		t.Errorf("rename changed the file's mtime from %v to %v", f0.Mtime, f1.Mtime)
	}
}

func testTimesWrite(t *testing.T, fs FS) {
	writeFile(t, fs, "/f", []byte("before"), 0o644)
	before := stat(t, fs, "/f")
	time.Sleep(tick)
	f, err := fs.Open("/f", os.O_WRONLY, 0)
	must(t, err, "open")
	writeAt(t, f, []byte("after"), 0)
	must(t, f.Close(), "close")
	after := stat(t, fs, "/f")
	wantLater(t, "mtime after write", before.Mtime, after.Mtime)
	wantLater(t, "ctime after write", before.Ctime, after.Ctime)

	// Reading changes neither.
	time.Sleep(tick)
	readFile(t, fs, "/f")
	if again := stat(t, fs, "/f"); !again.Mtime.Equal(after.Mtime) || !again.Ctime.Equal(after.Ctime) {
		t.Errorf("read changed mtime/ctime: %v/%v to %v/%v", after.Mtime, after.Ctime, again.Mtime, again.Ctime)
	}
}

func testTimesTruncate(t *testing.T, fs FS) {
	writeFile(t, fs, "/f", pattern(1000, 1), 0o644)
	before := stat(t, fs, "/f")
	time.Sleep(tick)
	must(t, fs.Truncate("/f", 10), "truncate")
	after := stat(t, fs, "/f")
	wantLater(t, "mtime after truncate", before.Mtime, after.Mtime)
	wantLater(t, "ctime after truncate", before.Ctime, after.Ctime)

	time.Sleep(tick)
	f, err := fs.Open("/f", os.O_RDWR, 0)
	must(t, err, "open")
	must(t, f.Truncate(5000), "ftruncate")
	must(t, f.Close(), "close")
	again := stat(t, fs, "/f")
	wantLater(t, "mtime after ftruncate", after.Mtime, again.Mtime)
	wantLater(t, "ctime after ftruncate", after.Ctime, again.Ctime)

	time.Sleep(tick)
	f, err = fs.Open("/f", os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err, "open O_TRUNC")
	must(t, f.Close(), "close")
	last := stat(t, fs, "/f")
	wantLater(t, "mtime after O_TRUNC", again.Mtime, last.Mtime)
	wantLater(t, "ctime after O_TRUNC", again.Ctime, last.Ctime)
}

func testTimesLink(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	f0, d0 := stat(t, fs, "/f"), stat(t, fs, "/d")
	time.Sleep(tick)
	must(t, fs.Link("/f", "/d/g"), "link")
	f1, d1 := stat(t, fs, "/f"), stat(t, fs, "/d")
	wantLater(t, "file ctime after link", f0.Ctime, f1.Ctime)
	wantLater(t, "parent mtime after link", d0.Mtime, d1.Mtime)
	time.Sleep(tick)
	must(t, fs.Unlink("/d/g"), "unlink")
	if f2 := stat(t, fs, "/f"); !f2.Ctime.After(f1.Ctime) {
		t.Errorf("file ctime did not advance when a link was removed: %v then %v", f1.Ctime, f2.Ctime)
	}
}
