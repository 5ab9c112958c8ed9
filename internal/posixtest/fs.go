// Package posixtest is weft's POSIX conformance suite: a set of behaviours a
// user of a file system relies on (open flags, holes, rename rules, hard and
// symbolic links, permissions, sticky and setgid directories, timestamps,
// extended attributes), written once against a small FS interface and run
// against every way of reaching a weft file system: the client library, a
// FUSE mount, and a plain local directory, which checks the suite itself
// (Linux is the reference: a case that fails on LocalFS is a bug in the case).
//
// An adapter implements FS and calls Run from an ordinary test:
//
//	func TestPOSIX(t *testing.T) {
//		posixtest.Run(t, func(t *testing.T) posixtest.FS { return newAdapter(t) })
//	}
//
// Run calls newFS once per case, inside the case's subtest, so an adapter
// can skip a case (t.Skip) whose disagreement with Linux is a known, listed
// bug, and every case starts from an empty file system.
//
// Conventions the cases keep so that one suite fits all adapters:
//   - Paths are absolute within the FS ("/a/b"), and symlink targets are
//     relative: an absolute target would escape a LocalFS root or a mount
//     point.
//   - Errors carry errs kinds (errs.KindOf); the local adapter converts
//     errno values with the table in errno_linux.go. The opposite direction,
//     kind to errno, belongs to the FUSE layer only.
//   - The FS acts as root; FS.As gives a view acting as another user, and
//     the permission cases skip when an adapter cannot provide one.
//   - Creation modes survive a umask of 022, so a LocalFS needs no umask
//     change (a process-wide setting a test must not touch).
package posixtest

import (
	"io"
	"time"

	"github.com/weftfs/weft/internal/core"
)

// Flags with Linux values, shared by weft's client and the kernel.
const (
	// RenameNoReplace fails a rename whose target exists (Exist).
	RenameNoReplace uint32 = 1
	// RenameExchange swaps two existing names atomically.
	RenameExchange uint32 = 2

	// XattrCreate fails setxattr when the attribute exists (Exist).
	XattrCreate uint32 = 1
	// XattrReplace fails setxattr when the attribute is missing (NoData).
	XattrReplace uint32 = 2
)

// FS is a file system as the suite drives it: the POSIX path calls, with
// paths absolute within the FS and errors carrying errs kinds.
type FS interface {
	Stat(path string) (core.Attr, error)  // follows a final symlink
	Lstat(path string) (core.Attr, error) // does not
	// Open opens path with flags (os.O_* values) and, with O_CREAT,
	// creates it with perm.
	Open(path string, flags int, perm uint32) (File, error)
	Mkdir(path string, perm uint32) error
	Mknod(path string, mode, rdev uint32) error
	Symlink(target, path string) error
	Readlink(path string) (string, error)
	Link(oldPath, newPath string) error
	Unlink(path string) error
	Rmdir(path string) error
	// Rename moves oldPath to newPath (flags: RenameNoReplace,
	// RenameExchange).
	Rename(oldPath, newPath string, flags uint32) error
	// ReadDir lists path without "." and "..", in any order; entries carry
	// the name, the inode number and the type bits of Mode.
	ReadDir(path string) ([]core.DirEntry, error)
	Chmod(path string, mode uint32) error
	Chown(path string, uid, gid int) error  // -1 leaves one unchanged
	Lchown(path string, uid, gid int) error // on a symlink itself
	Chtimes(path string, atime, mtime time.Time) error
	Truncate(path string, size int64) error
	GetXattr(path, name string) ([]byte, error)
	SetXattr(path, name string, value []byte, flags uint32) error
	ListXattr(path string) ([]string, error)
	RemoveXattr(path, name string) error
	// Access checks mask (4 read, 2 write, 1 execute) for the caller.
	Access(path string, mask uint32) error
	StatFS() (StatFS, error)
	// As returns a view of the same file system whose calls act as creds,
	// or nil if the adapter cannot change identity.
	As(creds core.Creds) FS
}

// File is an open file. Reads past the end return io.EOF as io.ReaderAt
// says; other errors carry errs kinds.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.WriterAt
	io.Seeker
	io.Closer
	Truncate(size int64) error // ftruncate
	Sync() error
	Stat() (core.Attr, error)
}

// StatFS is what statfs(2) says of a file system, in the units the suite
// checks.
type StatFS struct {
	Capacity  uint64 // bytes
	Used      uint64 // bytes
	Files     uint64 // inodes in use
	FilesFree uint64
	NameMax   uint32
}
