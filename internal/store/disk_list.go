package store

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/weftfs/weft/internal/errs"
)

// Listing chunks in (ino, index) order. The fan-out directories spread
// inodes by a hash, so a page reads the names of all 256 of them (names
// only, no stat), sorts the inodes and then reads inode directories in
// order until the page is full: cheap next to describing the chunks, each
// of which opens its file.

func (d *diskBackend) Keys(q ListQuery) ([]ChunkKey, bool, error) {
	inos := []uint64{q.Ino}
	if q.Ino == 0 {
		var err error
		if inos, err = d.inodesFrom(q.After); err != nil {
			return nil, false, err
		}
	}
	var keys []ChunkKey
	for _, ino := range inos {
		idxs, err := d.indexes(ino)
		if err != nil {
			return nil, false, err
		}
		for _, idx := range idxs {
			k := ChunkKey{ino, idx}
			if !q.includes(k) {
				continue
			}
			if len(keys) == q.Limit {
				return keys, true, nil
			}
			keys = append(keys, k)
		}
	}
	return keys, false, nil
}

// inodesFrom returns the inodes with a directory, from after's on, sorted.
func (d *diskBackend) inodesFrom(after *ChunkKey) ([]uint64, error) {
	fans, err := d.readDirNames(d.dir)
	if err != nil {
		return nil, err
	}
	var inos []uint64
	for _, fan := range fans {
		names, err := d.readDirNames(filepath.Join(d.dir, fan))
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			ino, ok := parseHex16(name)
			if ok && (after == nil || ino >= after.Ino) {
				inos = append(inos, ino)
			}
		}
	}
	slices.Sort(inos)
	return inos, nil
}

// indexes returns the chunk indexes of ino present on disk, sorted.
func (d *diskBackend) indexes(ino uint64) ([]uint64, error) {
	names, err := d.readDirNames(d.inoDir(ino))
	if err != nil {
		return nil, err
	}
	var idxs []uint64
	for _, name := range names {
		if idx, ok := parseHex16(name); ok {
			idxs = append(idxs, idx)
		}
	}
	slices.Sort(idxs)
	return idxs, nil
}

// readDirNames lists a directory's names; a missing directory has none.
func (d *diskBackend) readDirNames(dir string) ([]string, error) {
	names, err := d.fs.ReadDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, ioErr("list chunks", dir, err)
	}
	return names, nil
}

func parseHex16(name string) (uint64, bool) {
	if !validIndexName(name) {
		return 0, false
	}
	v, err := strconv.ParseUint(name, 16, 64)
	return v, err == nil
}

// Stat describes chunk k. A chunk whose header is bad or whose file lost
// its tail is listed with version 0, which no intact chunk has (its first
// change makes it 1): repair sees it as stale, and a read of it fails.
func (d *diskBackend) Stat(k ChunkKey) (ChunkInfo, bool, error) {
	cf, err := d.openFile(k, false)
	switch {
	case errs.Is(err, errs.Corrupt):
		return ChunkInfo{Key: k}, true, nil
	case cf == nil || err != nil:
		return ChunkInfo{}, false, err
	}
	defer cf.Close()
	info := cf.info()
	if cf.checkLength() != nil {
		info.Version = 0
	}
	return info, true, nil
}
