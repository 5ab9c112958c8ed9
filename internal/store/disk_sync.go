package store

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"sync"
)

// The dirty set records, per inode, what has been written but not yet made
// durable, so that SyncChunks flushes exactly that. Entries are added before
// the change they describe and removed only by the sync that flushes them;
// a failed sync puts them back for the next one.

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

func (d *diskBackend) markDirty(ino uint64, dirs dirtyDirs) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dirtyLocked(ino).dirs |= dirs
}

// forgetFile drops a removed chunk from the dirty set; its directory's
// entry changed instead.
func (d *diskBackend) forgetFile(k ChunkKey) {
	d.mu.Lock()
	defer d.mu.Unlock()
	di := d.dirtyLocked(k.Ino)
	delete(di.files, k.Index)
	di.dirs |= dirtyInoDir
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
func (d *diskBackend) putBack(ino uint64, files []uint64, dirs dirtyDirs) {
	d.mu.Lock()
	defer d.mu.Unlock()
	di := d.dirtyLocked(ino)
	for _, idx := range files {
		di.files[idx] = struct{}{}
	}
	di.dirs |= dirs
}

// syncFile makes one chunk durable after a synced write: its data and table,
// then the directory entries that lead to it if they are new. The chunk's
// lock is held, so every earlier write of it is covered too.
func (d *diskBackend) syncFile(k ChunkKey, cf *chunkFile) error {
	d.mu.Lock()
	var dirs dirtyDirs
	if di := d.mu.dirty[k.Ino]; di != nil {
		delete(di.files, k.Index)
		dirs, di.dirs = di.dirs, 0
		if len(di.files) == 0 {
			delete(d.mu.dirty, k.Ino)
		}
	}
	d.mu.Unlock()
	err := d.datasync(cf.f)
	if err == nil {
		err = d.syncDirs(k.Ino, dirs)
	}
	if err != nil {
		d.putBack(k.Ino, []uint64{k.Index}, dirs)
		return ioErr("sync chunk", k.String(), err)
	}
	return nil
}

// syncDirs fsyncs the directories named by dirs, deepest first.
func (d *diskBackend) syncDirs(ino uint64, dirs dirtyDirs) error {
	for _, dd := range []struct {
		bit  dirtyDirs
		path string
	}{{dirtyInoDir, d.inoDir(ino)}, {dirtyFanDir, d.fanDir(ino)}, {dirtyChunksDir, d.dir}} {
		if dirs&dd.bit == 0 {
			continue
		}
		// A directory removed since is gone with its entries; its
		// parent's bit, set by the removal, covers it.
		if err := d.syncDir(dd.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
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
	failed, firstErr := d.syncChunks(ino, di.files)
	dirs := di.dirs
	if err := d.syncDirs(ino, di.dirs); err != nil {
		firstErr = cmp.Or(firstErr, ioErr("sync chunks", d.inoDir(ino), err))
	} else {
		dirs = 0
	}
	if len(failed) > 0 || dirs != 0 {
		d.putBack(ino, failed, dirs)
	}
	return firstErr
}

// SyncAll syncs every inode with writes not yet durable, up to syncWorkers
// at once: their fdatasyncs share journal commits.
func (d *diskBackend) SyncAll() error {
	d.mu.Lock()
	inos := make([]uint64, 0, len(d.mu.dirty))
	for ino := range d.mu.dirty {
		inos = append(inos, ino)
	}
	d.mu.Unlock()
	sem := make(chan struct{}, syncWorkers)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for _, ino := range inos {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := d.Sync(ino); err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// syncWorkers bounds the fdatasyncs of one Sync in flight at once. One at a
// time, each waits for its own journal commit and the disk idles between
// them: measured on ext4 over virtio, 256 sequential fdatasyncs of 4 MiB
// files took 1.3-2x as long as one fsync of a 1 GiB file, 16 in parallel
// the same time (their commits group).
const syncWorkers = 16

// syncChunks fdatasyncs the chunk files of ino named by idxs, several at a
// time, and returns those that failed with the first error.
func (d *diskBackend) syncChunks(ino uint64, idxs map[uint64]struct{}) ([]uint64, error) {
	work := make(chan uint64)
	type result struct {
		idx uint64
		err error
	}
	results := make(chan result)
	var wg sync.WaitGroup
	for range min(syncWorkers, len(idxs)) {
		wg.Go(func() {
			for idx := range work {
				results <- result{idx, d.syncChunk(ChunkKey{ino, idx})}
			}
		})
	}
	go func() {
		for idx := range idxs {
			work <- idx
		}
		close(work)
		wg.Wait()
		close(results)
	}()
	var failed []uint64
	var firstErr error
	for r := range results {
		if r.err != nil {
			failed = append(failed, r.idx)
			firstErr = cmp.Or(firstErr, r.err)
		}
	}
	return failed, firstErr
}

func (d *diskBackend) syncChunk(k ChunkKey) error {
	f, err := d.fs.OpenFile(d.chunkPath(k), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed since; its directory entry is synced below
	}
	if err != nil {
		return ioErr("sync chunk", k.String(), err)
	}
	defer f.Close()
	if err := d.datasync(f); err != nil {
		return ioErr("sync chunk", k.String(), err)
	}
	return nil
}

func (d *diskBackend) datasync(f File) error {
	if d.noFsync {
		return nil
	}
	d.syncs.Add(1)
	return f.Datasync()
}

func (d *diskBackend) syncDir(p string) error {
	if d.noFsync {
		return nil
	}
	f, err := d.fs.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	d.syncs.Add(1)
	return f.Sync()
}
