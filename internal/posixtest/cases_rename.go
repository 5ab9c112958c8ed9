package posixtest

import (
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// renameCases: rename(2) and renameat2(2)'s rules.
var renameCases = []testCase{
	{"RenameFile", testRenameFile},
	{"RenameFileOverFile", testRenameFileOverFile},
	{"RenameDirOverEmptyDir", testRenameDirOverEmptyDir},
	{"RenameDirOverNonEmptyDir", testRenameDirOverNonEmptyDir},
	{"RenameFileOverDir", testRenameFileOverDir},
	{"RenameDirOverFile", testRenameDirOverFile},
	{"RenameIntoOwnSubdir", testRenameIntoOwnSubdir},
	{"RenameNoReplace", testRenameNoReplace},
	{"RenameExchange", testRenameExchange},
	{"RenameExchangeFileDir", testRenameExchangeFileDir},
	{"RenameToItself", testRenameToItself},
	{"RenameDirNlink", testRenameDirNlink},
}

func testRenameFile(t *testing.T, fs FS) {
	writeFile(t, fs, "/a", []byte("A"), 0o644)
	ino := stat(t, fs, "/a").Ino
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	must(t, fs.Rename("/a", "/d/b", 0), "rename into a directory")
	wantGone(t, fs, "/a")
	wantContent(t, fs, "/d/b", []byte("A"))
	if a := stat(t, fs, "/d/b"); a.Ino != ino {
		t.Errorf("renamed file is inode %d, was %d", a.Ino, ino)
	}
	wantNames(t, fs, "/", "d")
	wantNames(t, fs, "/d", "b")
	wantKind(t, fs.Rename("/missing", "/x", 0), errs.NotExist, "rename of a missing name")
	wantKind(t, fs.Rename("/d/b", "/missing/x", 0), errs.NotExist, "rename into a missing directory")
}

func testRenameFileOverFile(t *testing.T, fs FS) {
	writeFile(t, fs, "/a", []byte("A"), 0o644)
	writeFile(t, fs, "/b", pattern(2*TestChunkSize, 1), 0o644)
	ino := stat(t, fs, "/a").Ino
	must(t, fs.Rename("/a", "/b", 0), "rename over a file")
	wantGone(t, fs, "/a")
	wantContent(t, fs, "/b", []byte("A"))
	if a := stat(t, fs, "/b"); a.Ino != ino || a.Size != 1 {
		t.Errorf("target after rename: inode %d size %d, want inode %d size 1", a.Ino, a.Size, ino)
	}
	wantNames(t, fs, "/", "b")
}

func testRenameDirOverEmptyDir(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/a", 0o755), "mkdir")
	touch(t, fs, "/a/f")
	must(t, fs.Mkdir("/b", 0o755), "mkdir")
	must(t, fs.Rename("/a", "/b", 0), "rename a directory over an empty one")
	wantGone(t, fs, "/a")
	wantNames(t, fs, "/b", "f")
	wantNames(t, fs, "/", "b")
}

func testRenameDirOverNonEmptyDir(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/a", 0o755), "mkdir")
	must(t, fs.Mkdir("/b", 0o755), "mkdir")
	touch(t, fs, "/b/f")
	wantKind(t, fs.Rename("/a", "/b", 0), errs.NotEmpty, "rename a directory over a non-empty one")
	wantNames(t, fs, "/", "a", "b")
	wantNames(t, fs, "/b", "f")
}

func testRenameFileOverDir(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	wantKind(t, fs.Rename("/f", "/d", 0), errs.IsDir, "rename a file over a directory")
	wantNames(t, fs, "/", "d", "f")
}

func testRenameDirOverFile(t *testing.T, fs FS) {
	touch(t, fs, "/f")
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	wantKind(t, fs.Rename("/d", "/f", 0), errs.NotDir, "rename a directory over a file")
	wantNames(t, fs, "/", "d", "f")
}

func testRenameIntoOwnSubdir(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/a", 0o755), "mkdir")
	must(t, fs.Mkdir("/a/b", 0o755), "mkdir")
	wantKind(t, fs.Rename("/a", "/a/b/c", 0), errs.Invalid, "rename a directory into its own subdirectory")
	wantKind(t, fs.Rename("/a", "/a/c", 0), errs.Invalid, "rename a directory into itself")
	wantNames(t, fs, "/", "a")
	wantNames(t, fs, "/a", "b")
	wantNames(t, fs, "/a/b")
}

func testRenameNoReplace(t *testing.T, fs FS) {
	writeFile(t, fs, "/a", []byte("A"), 0o644)
	writeFile(t, fs, "/b", []byte("B"), 0o644)
	wantKind(t, fs.Rename("/a", "/b", RenameNoReplace), errs.Exist, "RENAME_NOREPLACE over an existing file")
	wantContent(t, fs, "/a", []byte("A"))
	wantContent(t, fs, "/b", []byte("B"))
	must(t, fs.Rename("/a", "/c", RenameNoReplace), "RENAME_NOREPLACE to a free name")
	wantContent(t, fs, "/c", []byte("A"))
	wantNames(t, fs, "/", "b", "c")
}

func testRenameExchange(t *testing.T, fs FS) {
	writeFile(t, fs, "/a", []byte("A"), 0o644)
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	writeFile(t, fs, "/d/b", pattern(TestChunkSize+1, 2), 0o644)
	ia, ib := stat(t, fs, "/a").Ino, stat(t, fs, "/d/b").Ino
	must(t, fs.Rename("/a", "/d/b", RenameExchange), "RENAME_EXCHANGE")
	wantContent(t, fs, "/a", pattern(TestChunkSize+1, 2))
	wantContent(t, fs, "/d/b", []byte("A"))
	if a, b := stat(t, fs, "/a").Ino, stat(t, fs, "/d/b").Ino; a != ib || b != ia {
		t.Errorf("after exchange: /a is inode %d, /d/b is %d; want %d, %d", a, b, ib, ia)
	}
	wantKind(t, fs.Rename("/a", "/missing", RenameExchange), errs.NotExist, "RENAME_EXCHANGE with a missing target")
	wantKind(t, fs.Rename("/a", "/d/b", RenameExchange|RenameNoReplace), errs.Invalid, "RENAME_EXCHANGE|RENAME_NOREPLACE")
}

func testRenameExchangeFileDir(t *testing.T, fs FS) {
	writeFile(t, fs, "/f", []byte("F"), 0o644)
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	touch(t, fs, "/d/inside")
	must(t, fs.Rename("/f", "/d", RenameExchange), "RENAME_EXCHANGE of a file and a directory")
	if a := stat(t, fs, "/f"); !core.IsDir(a.Mode) {
		t.Errorf("/f after exchange has mode %o, want a directory", a.Mode)
	}
	wantNames(t, fs, "/f", "inside")
	wantContent(t, fs, "/d", []byte("F"))
}

func testRenameToItself(t *testing.T, fs FS) {
	writeFile(t, fs, "/a", []byte("A"), 0o644)
	must(t, fs.Rename("/a", "/a", 0), "rename a file to itself")
	wantContent(t, fs, "/a", []byte("A"))
	must(t, fs.Mkdir("/d", 0o755), "mkdir")
	must(t, fs.Rename("/d", "/d", 0), "rename a directory to itself")
	stat(t, fs, "/d")
	// Two hard links to one file: rename does nothing and both stay
	// (POSIX: "If oldpath and newpath are existing hard links referring to
	// the same file, rename does nothing").
	must(t, fs.Link("/a", "/b"), "link")
	must(t, fs.Rename("/a", "/b", 0), "rename between links to one file")
	wantNames(t, fs, "/", "a", "b", "d")
	if a := stat(t, fs, "/a"); a.Nlink != 2 {
		t.Errorf("nlink %d after rename between links, want 2", a.Nlink)
	}
}

func testRenameDirNlink(t *testing.T, fs FS) {
	must(t, fs.Mkdir("/src", 0o755), "mkdir")
	must(t, fs.Mkdir("/dst", 0o755), "mkdir")
	must(t, fs.Mkdir("/src/d", 0o755), "mkdir")
	touch(t, fs, "/src/d/f")
	must(t, fs.Rename("/src/d", "/dst/d", 0), "move a directory")
	if a := stat(t, fs, "/src"); a.Nlink != 2 {
		t.Errorf("source parent nlink %d after moving its subdirectory out, want 2", a.Nlink)
	}
	if a := stat(t, fs, "/dst"); a.Nlink != 3 {
		t.Errorf("target parent nlink %d after moving a subdirectory in, want 3", a.Nlink)
	}
	wantNames(t, fs, "/dst/d", "f")
	wantNames(t, fs, "/src")
}
