package posixtest

import (
	"os"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// permCases: what unprivileged users may and may not do. They need FS.As
// and skip without it.
var permCases = []testCase{
	{"PermPrivateDir", testPermPrivateDir},
	{"PermSearchOnlyDir", testPermSearchOnlyDir},
	{"PermDirWrite", testPermDirWrite},
	{"PermWriteReadOnlyFile", testPermWriteReadOnlyFile},
	{"PermGroupAccess", testPermGroupAccess},
	{"PermChmodOthers", testPermChmodOthers},
	{"PermChownNonRoot", testPermChownNonRoot},
	{"PermChtimesOthers", testPermChtimesOthers},
	{"PermStickyDir", testPermStickyDir},
	{"PermSetgidDir", testPermSetgidDir},
	{"PermTruncateNeedsWrite", testPermTruncateNeedsWrite},
	{"PermWriteClearsSetuid", testPermWriteClearsSetuid},
}

// The users of the permission cases. Neither is in the other's group;
// alice is also in group staff.
var (
	alice = core.Creds{UID: 1001, GID: 1001, Groups: []uint32{staff}}
	bob   = core.Creds{UID: 1002, GID: 1002}
)

const staff = 2000

// ownedDir makes dir with perm, owned by creds (as root).
func ownedDir(t *testing.T, fs FS, dir string, perm uint32, c core.Creds) {
	t.Helper()
	must(t, fs.Mkdir(dir, 0o755), "mkdir "+dir)
	must(t, fs.Chown(dir, int(c.UID), int(c.GID)), "chown "+dir)
	must(t, fs.Chmod(dir, perm), "chmod "+dir)
}

// ownedFile makes path with data and perm, owned by creds (as root).
func ownedFile(t *testing.T, fs FS, path string, data []byte, perm uint32, c core.Creds) {
	t.Helper()
	writeFile(t, fs, path, data, 0o644)
	must(t, fs.Chown(path, int(c.UID), int(c.GID)), "chown "+path)
	must(t, fs.Chmod(path, perm), "chmod "+path)
}

func testPermPrivateDir(t *testing.T, fs FS) {
	a, b := permFS(t, fs, alice), permFS(t, fs, bob)
	ownedDir(t, fs, "/priv", 0o700, alice)
	writeFile(t, a, "/priv/f", []byte("secret"), 0o644)
	wantContent(t, a, "/priv/f", []byte("secret"))

	_, err := b.Stat("/priv/f")
	wantKind(t, err, errs.Permission, "stat in another user's 0700 directory")
	_, err = b.ReadDir("/priv")
	wantKind(t, err, errs.Permission, "readdir of another user's 0700 directory")
	_, err = b.Open("/priv/f", os.O_RDONLY, 0)
	wantKind(t, err, errs.Permission, "open in another user's 0700 directory")
	_, err = b.Open("/priv/g", os.O_WRONLY|os.O_CREATE, 0o644)
	wantKind(t, err, errs.Permission, "create in another user's 0700 directory")
	wantKind(t, b.Mkdir("/priv/d", 0o755), errs.Permission, "mkdir in another user's 0700 directory")
	// The directory itself is still visible from its parent.
	if _, err := b.Stat("/priv"); err != nil {
		t.Errorf("stat of the 0700 directory itself: %v", err)
	}
}

func testPermSearchOnlyDir(t *testing.T, fs FS) {
	a, b := permFS(t, fs, alice), permFS(t, fs, bob)
	ownedDir(t, fs, "/d", 0o711, alice)
	writeFile(t, a, "/d/f", []byte("known name"), 0o644)
	// Search without read: names can be used but not listed.
	wantContent(t, b, "/d/f", []byte("known name"))
	_, err := b.ReadDir("/d")
	wantKind(t, err, errs.Permission, "readdir of a 0711 directory")
	must(t, b.Access("/d", 1), "access x of a 0711 directory")
	wantKind(t, b.Access("/d", 4), errs.Permission, "access r of a 0711 directory")
}

func testPermDirWrite(t *testing.T, fs FS) {
	a, b := permFS(t, fs, alice), permFS(t, fs, bob)
	ownedDir(t, fs, "/home", 0o755, alice)
	writeFile(t, a, "/home/f", []byte("mine"), 0o644)
	must(t, a.Chmod("/home/f", 0o666), "chmod") // 0666 at creation would meet a umask
	_, err := b.Open("/home/g", os.O_WRONLY|os.O_CREATE, 0o644)
	wantKind(t, err, errs.Permission, "create in another user's 0755 directory")
	wantKind(t, b.Unlink("/home/f"), errs.Permission, "unlink in another user's 0755 directory")
	wantKind(t, b.Rename("/home/f", "/home/g", 0), errs.Permission, "rename in another user's 0755 directory")
	wantKind(t, b.Symlink("f", "/home/l"), errs.Permission, "symlink in another user's 0755 directory")
	// The file itself is writable by anyone.
	f, err := b.Open("/home/f", os.O_WRONLY, 0)
	must(t, err, "open a 0666 file for writing")
	writeAt(t, f, []byte("MINE"), 0)
	must(t, f.Close(), "close")
	wantContent(t, a, "/home/f", []byte("MINE"))
	// The new file's owner is the creator.
	writeFile(t, a, "/home/new", nil, 0o644)
	if st := stat(t, fs, "/home/new"); st.UID != alice.UID || st.GID != alice.GID {
		t.Errorf("file created by %d:%d is owned by %d:%d", alice.UID, alice.GID, st.UID, st.GID)
	}
}

func testPermWriteReadOnlyFile(t *testing.T, fs FS) {
	a := permFS(t, fs, alice)
	ownedDir(t, fs, "/home", 0o755, alice)
	writeFile(t, a, "/home/ro", []byte("frozen"), 0o444)
	_, err := a.Open("/home/ro", os.O_WRONLY, 0)
	wantKind(t, err, errs.Permission, "owner opening a 0444 file for writing")
	_, err = a.Open("/home/ro", os.O_RDWR, 0)
	wantKind(t, err, errs.Permission, "owner opening a 0444 file read-write")
	wantContent(t, a, "/home/ro", []byte("frozen"))
	// The owner may chmod it back; root needs no permission at all.
	must(t, a.Chmod("/home/ro", 0o644), "owner chmod")
	must(t, a.Chmod("/home/ro", 0o444), "owner chmod")
	f, err := fs.Open("/home/ro", os.O_WRONLY|os.O_APPEND, 0)
	must(t, err, "root opening a 0444 file for writing")
	_, err = f.Write([]byte("!"))
	must(t, err, "root write")
	must(t, f.Close(), "close")
	wantContent(t, a, "/home/ro", []byte("frozen!"))
}

func testPermGroupAccess(t *testing.T, fs FS) {
	a, b := permFS(t, fs, alice), permFS(t, fs, bob)
	ownedFile(t, fs, "/g", []byte("group"), 0o640, core.Creds{UID: 99, GID: staff})
	wantContent(t, a, "/g", []byte("group"))
	must(t, a.Access("/g", 4), "access r by a supplementary group member")
	wantKind(t, a.Access("/g", 2), errs.Permission, "access w by a group member of a 0640 file")
	_, err := b.Open("/g", os.O_RDONLY, 0)
	wantKind(t, err, errs.Permission, "open of a 0640 file by another user")
	wantKind(t, b.Access("/g", 4), errs.Permission, "access r by another user of a 0640 file")
	// The owner class decides alone: an owner without read is refused even
	// if others may read.
	ownedFile(t, fs, "/o", []byte("other"), 0o044, alice)
	_, err = a.Open("/o", os.O_RDONLY, 0)
	wantKind(t, err, errs.Permission, "owner opening a 0044 file")
	wantContent(t, b, "/o", []byte("other"))
}

func testPermChmodOthers(t *testing.T, fs FS) {
	a, b := permFS(t, fs, alice), permFS(t, fs, bob)
	ownedFile(t, fs, "/f", nil, 0o666, alice)
	wantKind(t, b.Chmod("/f", 0o777), errs.NotPermitted, "chmod of another user's file")
	must(t, a.Chmod("/f", 0o600), "owner chmod")
	if st := stat(t, fs, "/f"); st.Mode != core.ModeFile|0o600 {
		t.Errorf("mode %o after owner chmod 600", st.Mode)
	}
	// A non-member setting setgid on a file of a group it is not in: the
	// bit is silently dropped.
	ownedFile(t, fs, "/g", nil, 0o644, core.Creds{UID: alice.UID, GID: 777})
	must(t, a.Chmod("/g", 0o2755), "chmod g+s by a non-member owner")
	if st := stat(t, fs, "/g"); st.Mode != core.ModeFile|0o755 {
		t.Errorf("mode %o after chmod 2755 by an owner outside the group, want %o", st.Mode, core.ModeFile|0o755)
	}
}

func testPermChownNonRoot(t *testing.T, fs FS) {
	a := permFS(t, fs, alice)
	ownedFile(t, fs, "/f", nil, 0o644, alice)
	wantKind(t, a.Chown("/f", int(bob.UID), -1), errs.NotPermitted, "chown to another user by a non-root owner")
	wantKind(t, a.Chown("/f", -1, int(bob.GID)), errs.NotPermitted, "chgrp to a foreign group by the owner")
	must(t, a.Chown("/f", -1, staff), "chgrp to one of the owner's groups")
	must(t, a.Chown("/f", int(alice.UID), -1), "chown to oneself")
	if st := stat(t, fs, "/f"); st.UID != alice.UID || st.GID != staff {
		t.Errorf("owner %d:%d, want %d:%d", st.UID, st.GID, alice.UID, staff)
	}
	b := permFS(t, fs, bob)
	wantKind(t, b.Chown("/f", -1, int(bob.GID)), errs.NotPermitted, "chgrp of another user's file")
}

func testPermChtimesOthers(t *testing.T, fs FS) {
	a, b := permFS(t, fs, alice), permFS(t, fs, bob)
	ownedFile(t, fs, "/f", nil, 0o666, alice)
	when := time.Date(2003, 1, 1, 0, 0, 0, 0, time.UTC)
	wantKind(t, b.Chtimes("/f", when, when), errs.NotPermitted, "utimes with explicit times on another user's file")
	must(t, a.Chtimes("/f", when, when), "owner utimes")
	if st := stat(t, fs, "/f"); !st.Mtime.Equal(when) {
		t.Errorf("mtime %v after owner utimes, want %v", st.Mtime, when)
	}
}

func testPermStickyDir(t *testing.T, fs FS) {
	a, b := permFS(t, fs, alice), permFS(t, fs, bob)
	ownedDir(t, fs, "/tmp", 0o1777, core.Root)
	writeFile(t, a, "/tmp/a", []byte("alice's"), 0o644)
	must(t, a.Mkdir("/tmp/adir", 0o755), "mkdir in a sticky directory")
	wantKind(t, b.Unlink("/tmp/a"), errs.NotPermitted, "unlink of another user's file in a sticky directory")
	wantKind(t, b.Rename("/tmp/a", "/tmp/b", 0), errs.NotPermitted, "rename of another user's file in a sticky directory")
	wantKind(t, b.Rmdir("/tmp/adir"), errs.NotPermitted, "rmdir of another user's directory in a sticky directory")
	writeFile(t, b, "/tmp/b", []byte("bob's"), 0o644)
	wantKind(t, b.Rename("/tmp/b", "/tmp/a", 0), errs.NotPermitted, "rename over another user's file in a sticky directory")
	wantContent(t, fs, "/tmp/a", []byte("alice's"))
	must(t, b.Unlink("/tmp/b"), "unlink of one's own file in a sticky directory")
	must(t, a.Rename("/tmp/a", "/tmp/a2", 0), "rename of one's own file in a sticky directory")
	must(t, fs.Unlink("/tmp/a2"), "root unlink in a sticky directory")

	// Without the sticky bit, write permission on the directory suffices.
	ownedDir(t, fs, "/pub", 0o777, core.Root)
	writeFile(t, a, "/pub/a", nil, 0o600)
	must(t, b.Unlink("/pub/a"), "unlink of another user's file in a 0777 directory")
}

func testPermSetgidDir(t *testing.T, fs FS) {
	a := permFS(t, fs, alice)
	ownedDir(t, fs, "/sg", 0o2777, core.Creds{UID: 0, GID: 500})
	writeFile(t, a, "/sg/f", nil, 0o644)
	must(t, a.Mkdir("/sg/sub", 0o755), "mkdir in a setgid directory")
	if st := stat(t, fs, "/sg/f"); st.GID != 500 || st.Mode&core.ModeSetgid != 0 {
		t.Errorf("file in a setgid directory: gid %d mode %o, want gid 500 without setgid", st.GID, st.Mode)
	}
	if st := stat(t, fs, "/sg/sub"); st.GID != 500 || st.Mode != core.ModeDir|core.ModeSetgid|0o755 {
		t.Errorf("subdirectory of a setgid directory: gid %d mode %o, want gid 500 mode %o",
			st.GID, st.Mode, core.ModeDir|core.ModeSetgid|0o755)
	}
	// Inheritance continues down the tree.
	writeFile(t, a, "/sg/sub/g", nil, 0o644)
	if st := stat(t, fs, "/sg/sub/g"); st.GID != 500 {
		t.Errorf("file two levels below a setgid directory: gid %d, want 500", st.GID)
	}
	// Without setgid the creator's group is used.
	ownedDir(t, fs, "/plain", 0o777, core.Creds{UID: 0, GID: 500})
	writeFile(t, a, "/plain/f", nil, 0o644)
	if st := stat(t, fs, "/plain/f"); st.GID != alice.GID {
		t.Errorf("file in a plain directory: gid %d, want the creator's %d", st.GID, alice.GID)
	}
}

func testPermTruncateNeedsWrite(t *testing.T, fs FS) {
	a := permFS(t, fs, alice)
	ownedFile(t, fs, "/f", []byte("root's data"), 0o644, core.Root)
	wantKind(t, a.Truncate("/f", 0), errs.Permission, "truncate without write permission")
	_, err := a.Open("/f", os.O_WRONLY|os.O_TRUNC, 0)
	wantKind(t, err, errs.Permission, "O_TRUNC without write permission")
	wantContent(t, a, "/f", []byte("root's data"))
	must(t, fs.Chmod("/f", 0o646), "chmod o+w")
	must(t, a.Truncate("/f", 4), "truncate with write permission through others")
	wantContent(t, a, "/f", []byte("root"))
}

// testPermWriteClearsSetuid: a write by a user without CAP_FSETID clears
// setuid (and setgid with group execute), as Linux's file_remove_privs.
func testPermWriteClearsSetuid(t *testing.T, fs FS) {
	a := permFS(t, fs, alice)
	ownedDir(t, fs, "/home", 0o755, alice)
	ownedFile(t, fs, "/home/suid", []byte("x"), 0o6777, alice)
	f, err := a.Open("/home/suid", os.O_WRONLY, 0)
	must(t, err, "open")
	writeAt(t, f, []byte("y"), 0)
	must(t, f.Close(), "close")
	if st := stat(t, fs, "/home/suid"); st.Mode != core.ModeFile|0o777 {
		t.Errorf("mode %o after a write by the owner, want %o (setuid and setgid cleared)", st.Mode, core.ModeFile|0o777)
	}
}
