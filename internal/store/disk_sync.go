package store

import (
	"cmp"
	"errors"
	"io/fs"
	"os"

	"github.com/weftfs/weft/internal/errs"
)

// The dirty set records, per inode, what has been written but not yet made
// durable, so that SyncChunks flushes exactly that. Entries are added before
// the change they describe and removed only after a successful sync, so a
// failed fsync leaves them for the next SyncChunks.

func (d *diskBackend) dirtyLocked(ino uint64) *dirtyIno {
	di := d.mu.dirty[ino]
	if di == nil {
		di = &dirtyIno{files: make(map[uint64]struct{})}
		d.mu.dirty[ino] = di
	}
	return di
}

func (d *diskBackend) markFile(k ChunkKey) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dirtyLocked(k.Ino).files[k.Index] = struct{}{}
}

func (d *diskBackend) markDirs(ino uint64, inoDir, fanDir bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	di := d.dirtyLocked(ino)
	di.inoDir = di.inoDir || inoDir
	di.fanDir = di.fanDir || fanDir
}

// forgetFile drops a removed chunk from the dirty set; its directory stays
// dirty (markDirs) until synced.
func (d *diskBackend) forgetFile(k ChunkKey) {
	d.mu.Lock()
	defer d.mu.Unlock()
	di := d.dirtyLocked(k.Ino)
	delete(di.files, k.Index)
	di.inoDir = true
}

// takeDirty removes and returns ino's dirty set.
func (d *diskBackend) takeDirty(ino uint64) *dirtyIno {
	d.mu.Lock()
	defer d.mu.Unlock()
	di := d.mu.dirty[ino]
	delete(d.mu.dirty, ino)
	return di
}

// putBack returns what a failed sync did not flush to the dirty set.
func (d *diskBackend) putBack(ino uint64, files []uint64, inoDir, fanDir bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	di := d.dirtyLocked(ino)
	for _, idx := range files {
		di.files[idx] = struct{}{}
	}
	di.inoDir = di.inoDir || inoDir
	di.fanDir = di.fanDir || fanDir
}

// syncFile makes one chunk durable after a synced write: its data and table,
// then the directory entries that lead to it if they are new. The chunk's
// lock is held, so every earlier write of it is covered too.
func (d *diskBackend) syncFile(k ChunkKey, cf *chunkFile) error {
	d.mu.Lock()
	di := d.mu.dirty[k.Ino]
	var inoDir, fanDir bool
	if di != nil {
		delete(di.files, k.Index)
		inoDir, fanDir = di.inoDir, di.fanDir
		di.inoDir, di.fanDir = false, false
	}
	d.mu.Unlock()
	err := datasync(cf.f)
	if err == nil {
		err = d.syncDirs(k.Ino, inoDir, fanDir)
	}
	if err != nil {
		d.putBack(k.Ino, []uint64{k.Index}, inoDir, fanDir)
		return errs.Wrap(errs.IO, "sync chunk", k.String(), err)
	}
	return nil
}

func (d *diskBackend) syncDirs(ino uint64, inoDir, fanDir bool) error {
	if inoDir {
		if err := syncDir(d.inoDir(ino)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if fanDir {
		return syncDir(d.fanDir(ino))
	}
	return nil
}

// Sync flushes every chunk file of ino written since its last sync, then the
// directories whose entries changed.
func (d *diskBackend) Sync(ino uint64) error {
	di := d.takeDirty(ino)
	if di == nil {
		return nil
	}
	var failed []uint64
	var firstErr error
	for idx := range di.files {
		if err := d.syncChunk(ChunkKey{ino, idx}); err != nil {
			failed = append(failed, idx)
			firstErr = cmp.Or(firstErr, err)
		}
	}
	if err := d.syncDirs(ino, di.inoDir, di.fanDir); err != nil {
		firstErr = cmp.Or(firstErr, errs.Wrap(errs.IO, "sync chunks", d.inoDir(ino), err))
		d.putBack(ino, failed, di.inoDir, di.fanDir)
	} else if len(failed) > 0 {
		d.putBack(ino, failed, false, false)
	}
	return firstErr
}

func (d *diskBackend) syncChunk(k ChunkKey) error {
	f, err := os.OpenFile(d.chunkPath(k), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed since; its directory entry is synced below
	}
	if err != nil {
		return errs.Wrap(errs.IO, "sync chunk", k.String(), err)
	}
	defer f.Close()
	if err := datasync(f); err != nil {
		return errs.Wrap(errs.IO, "sync chunk", k.String(), err)
	}
	return nil
}

func syncDir(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
