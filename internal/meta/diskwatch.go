package meta

import (
	"github.com/cockroachdb/pebble/v2/vfs"
)

// watchedFS reports the first write or sync error of any file pebble
// writes, as it happens.
//
// Pebble learns of a failed WAL write late in async mode: the write is
// flushed by its log writer in the background, and the error surfaces at
// the next rotation of the WAL, where pebble panics with its own lock
// released, which the runtime turns into a fatal error no recover catches
// ("unlock of unlocked mutex"). Hearing of the failure from the file
// itself marks the server failed at once (health.go), so its gate refuses
// the commits that would fill the memtable and rotate the WAL onto a disk
// that failed.
type watchedFS struct {
	vfs.FS
	failed func(error)
}

func watchWrites(fs vfs.FS, failed func(error)) vfs.FS {
	if fs == nil {
		fs = vfs.Default
	}
	return &watchedFS{FS: fs, failed: failed}
}

func (w *watchedFS) Unwrap() vfs.FS { return w.FS }

func (w *watchedFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		w.check(err)
		return nil, err
	}
	return &watchedFile{File: f, fs: w}, nil
}

func (w *watchedFS) check(err error) {
	if err != nil && isStorageError(err) {
		w.failed(err)
	}
}

func (w *watchedFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return w.wrap(w.FS.Create(name, c))
}

func (w *watchedFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return w.wrap(w.FS.OpenReadWrite(name, c, opts...))
}

func (w *watchedFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return w.wrap(w.FS.ReuseForWrite(oldname, newname, c))
}

// watchedFile passes every call to File and reports its write errors.
type watchedFile struct {
	vfs.File
	fs *watchedFS
}

func (f *watchedFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.fs.check(err)
	return n, err
}

func (f *watchedFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	f.fs.check(err)
	return n, err
}

func (f *watchedFile) Sync() error {
	err := f.File.Sync()
	f.fs.check(err)
	return err
}

func (f *watchedFile) SyncData() error {
	err := f.File.SyncData()
	f.fs.check(err)
	return err
}

func (f *watchedFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	f.fs.check(err)
	return full, err
}

func (f *watchedFile) Preallocate(off, length int64) error {
	err := f.File.Preallocate(off, length)
	f.fs.check(err)
	return err
}
