package store

import (
	"io"
	"io/fs"
	"os"
	"syscall"
)

// FS is the file system under the disk backend: the OS's (OSFS) unless a
// test passes one that injects faults (ENOSPC, EIO, short writes) or
// stops at a point as a crash would.
type FS interface {
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	Mkdir(name string, perm fs.FileMode) error
	MkdirAll(name string, perm fs.FileMode) error
	Remove(name string) error
	Rename(oldname, newname string) error
	Stat(name string) (fs.FileInfo, error)
	// ReadDirNames returns the names in a directory, unsorted.
	ReadDirNames(name string) ([]string, error)
}

// File is an open file of an FS.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Writer
	io.Closer
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
	// Sync flushes the file (fsync), Datasync its data and size
	// (fdatasync).
	Sync() error
	Datasync() error
	// StartWriteback starts the device writing [off, off+n) without
	// waiting (a hint; it may do nothing).
	StartWriteback(off, n int64) error
	// Lock takes an exclusive advisory lock (flock) without waiting.
	Lock() error
}

// OSFS is the operating system's file system.
func OSFS() FS { return osFS{} }

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Mkdir(name string, perm fs.FileMode) error    { return os.Mkdir(name, perm) }
func (osFS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }
func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error         { return os.Rename(oldname, newname) }
func (osFS) Stat(name string) (fs.FileInfo, error)        { return os.Stat(name) }

func (osFS) ReadDirNames(name string) ([]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

type osFile struct{ *os.File }

func (f osFile) Datasync() error                   { return datasync(f.File) }
func (f osFile) StartWriteback(off, n int64) error { return startWriteback(f.File, off, n) }
func (f osFile) Lock() error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

// readFile reads a small file whole.
func readFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, fi.Size())
	n, err := f.ReadAt(b, 0)
	if err == io.EOF {
		err = nil
	}
	return b[:n], err
}
