package linz

import (
	"os"
	"path/filepath"
	"syscall"
)

// FS is what a worker does to the file system under test, with paths
// relative to the namespace's root ("a/x"). Errors must satisfy
// errors.Is(err, fs.ErrNotExist) for ENOENT and fs.ErrExist for EEXIST:
// those are results of the model; every other error is an unexpected one
// (the operation's outcome is unknown).
type FS interface {
	// CreateExcl creates path with mode CreateMode, O_RDWR|O_CREAT|O_EXCL.
	CreateExcl(path string) (File, error)
	// Open opens path with flag (os.O_RDONLY or os.O_WRONLY).
	Open(path string, flag int) (File, error)
	Rename(from, to string) error
	Remove(path string) error
	Chmod(path string, mode uint32) error
	// Lstat returns the inode, permission bits and size of path.
	Lstat(path string) (Stat, error)
	// ReadDir returns the names in dir, in any order.
	ReadDir(dir string) ([]string, error)
	// MkdirAll makes dir and its parents, mode 0755.
	MkdirAll(dir string) error
}

// File is an open file.
type File interface {
	// Ino is the inode the file is open on (fstat).
	Ino() (uint64, error)
	WriteAt(p []byte, off int64) (int, error)
	ReadAt(p []byte, off int64) (int, error)
	// Close commits what was written (close-to-open).
	Close() error
}

// Stat is what lstat reports that the model checks.
type Stat struct {
	Ino  uint64
	Mode uint32 // permission bits
	Size int64
}

// OSFS is a directory of the local system, typically on a FUSE mount.
type OSFS struct{ Root string }

var _ FS = OSFS{}

func (o OSFS) path(p string) string { return filepath.Join(o.Root, p) }

func (o OSFS) CreateExcl(path string) (File, error) {
	f, err := os.OpenFile(o.path(path), os.O_RDWR|os.O_CREATE|os.O_EXCL, CreateMode)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (o OSFS) Open(path string, flag int) (File, error) {
	f, err := os.OpenFile(o.path(path), flag, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (o OSFS) Rename(from, to string) error { return os.Rename(o.path(from), o.path(to)) }
func (o OSFS) Remove(path string) error     { return os.Remove(o.path(path)) }
func (o OSFS) Chmod(path string, mode uint32) error {
	return os.Chmod(o.path(path), os.FileMode(mode))
}

func (o OSFS) Lstat(path string) (Stat, error) {
	st, err := os.Lstat(o.path(path))
	if err != nil {
		return Stat{}, err
	}
	return Stat{Ino: st.Sys().(*syscall.Stat_t).Ino, Mode: uint32(st.Mode().Perm()), Size: st.Size()}, nil
}

func (o OSFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(o.path(dir))
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

func (o OSFS) MkdirAll(dir string) error { return os.MkdirAll(o.path(dir), 0o755) }

type osFile struct{ *os.File }

func (f osFile) Ino() (uint64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Sys().(*syscall.Stat_t).Ino, nil
}
