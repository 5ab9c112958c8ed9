package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/weftfs/weft/internal/errs"
)

// diskBackend keeps each chunk in its own file under dir (see the package doc
// for the layout, the format and the update order).
type diskBackend struct {
	root   string // the data directory
	dir    string // root/chunks
	layout layout // for new chunk files
	fs     FS
	log    *slog.Logger
	lock   File // root/LOCK, flocked while open
	count  atomic.Int64
	syncs  atomic.Uint64 // fdatasyncs and directory fsyncs: the durable writes

	// hook, when set, runs between the steps of a change (tests only).
	hook    func(step int) error
	noFsync bool // tests only

	mu struct {
		sync.Mutex
		dirty  map[uint64]*dirtyIno // what SyncChunks must flush, per inode
		marker marker               // as in root/FORMAT
	}
}

// dirtyIno is what a crash could still lose of one inode's chunks.
type dirtyIno struct {
	files map[uint64]struct{} // chunk indexes written since their last sync
	dirs  dirtyDirs           // directories whose entries changed
}

// dirtyDirs are bits naming the directories on an inode's path.
type dirtyDirs uint8

const (
	dirtyInoDir    dirtyDirs = 1 << iota // a chunk file was created or removed
	dirtyFanDir                          // the inode's directory was created or removed
	dirtyChunksDir                       // the fan-out directory was created
)

var _ Backend = (*diskBackend)(nil)

func openDiskBackend(root string, l layout, replacement, noFsync bool, fsys FS, log *slog.Logger) (*diskBackend, error) {
	d := &diskBackend{root: root, dir: filepath.Join(root, "chunks"), layout: l, noFsync: noFsync, fs: fsys, log: log}
	d.mu.dirty = make(map[uint64]*dirtyIno)
	if err := d.fs.MkdirAll(root, 0o700); err != nil {
		return nil, ioErr("open store", root, err)
	}
	lock, err := d.fs.OpenFile(filepath.Join(root, "LOCK"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, ioErr("open store", root, err)
	}
	if err := lock.Lock(); err != nil {
		lock.Close()
		return nil, errs.New(errs.Busy, "open store", "%s is in use by another store server: %v", root, err)
	}
	d.lock = lock
	if d.mu.marker, err = d.openMarker(replacement); err != nil {
		lock.Close()
		return nil, err
	}
	if err := d.fs.Mkdir(d.dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		lock.Close()
		return nil, ioErr("open store", d.dir, err)
	}
	for _, p := range []string{d.dir, root} {
		if err := d.syncDir(p); err != nil {
			lock.Close()
			return nil, ioErr("open store", p, err)
		}
	}
	if err := d.scan(); err != nil {
		lock.Close()
		return nil, err
	}
	return d, nil
}

// scan counts the chunks and removes the .tmp files of creations that a
// crash interrupted (they were never acknowledged). It reads every inode
// directory: fine for a store of up to some millions of chunks.
func (d *diskBackend) scan() error {
	var n int64
	err := d.eachInoDir(func(dir string) error {
		names, err := d.fs.ReadDirNames(dir)
		if err != nil {
			return err
		}
		for _, name := range names {
			switch {
			case strings.HasSuffix(name, ".tmp"):
				if err := d.fs.Remove(filepath.Join(dir, name)); err != nil {
					return err
				}
			case validIndexName(name):
				n++
			}
		}
		return nil
	})
	if err != nil {
		return ioErr("open store", d.root, err)
	}
	d.count.Store(n)
	return nil
}

// eachInoDir calls f with every inode directory.
func (d *diskBackend) eachInoDir(f func(dir string) error) error {
	fans, err := d.fs.ReadDirNames(d.dir)
	if err != nil {
		return err
	}
	for _, fan := range fans {
		inos, err := d.fs.ReadDirNames(filepath.Join(d.dir, fan))
		if err != nil {
			return err
		}
		for _, ino := range inos {
			if err := f(filepath.Join(d.dir, fan, ino)); err != nil {
				return err
			}
		}
	}
	return nil
}

func validIndexName(name string) bool {
	_, err := strconv.ParseUint(name, 16, 64)
	return len(name) == 16 && err == nil
}

func (d *diskBackend) fanDir(ino uint64) string {
	return filepath.Join(d.dir, fmt.Sprintf("%02x", mix(ino)>>56))
}

func (d *diskBackend) inoDir(ino uint64) string {
	return filepath.Join(d.fanDir(ino), fmt.Sprintf("%016x", ino))
}

func (d *diskBackend) chunkPath(k ChunkKey) string {
	return filepath.Join(d.inoDir(k.Ino), fmt.Sprintf("%016x", k.Index))
}

// open opens chunk k; a missing chunk gives nil, or with create a new empty
// chunk file. A file shorter than its recorded size is errs.Lost.
func (d *diskBackend) open(k ChunkKey, create bool) (*chunkFile, error) {
	cf, err := d.openFile(k, create)
	if cf == nil || err != nil {
		return nil, err
	}
	if err := cf.checkLength(); err != nil {
		cf.Close()
		return nil, err
	}
	return cf, nil
}

// openFile is open without the length check.
func (d *diskBackend) openFile(k ChunkKey, create bool) (*chunkFile, error) {
	f, err := d.fs.OpenFile(d.chunkPath(k), os.O_RDWR, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist) && create:
		f, err = d.create(k)
		if err != nil {
			return nil, err
		}
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, ioErr("open chunk", k.String(), err)
	}
	cf := &chunkFile{k: k, f: f}
	if err := cf.load(); err != nil {
		f.Close()
		return nil, err
	}
	return cf, nil
}

// create makes chunk k's file whole under a temporary name and renames it
// into place, so a crash never leaves a chunk file without its header.
func (d *diskBackend) create(k ChunkKey) (File, error) {
	if err := d.makeInoDir(k.Ino); err != nil {
		return nil, ioErr("create chunk", k.String(), err)
	}
	p := d.chunkPath(k)
	f, err := d.fs.OpenFile(p+".tmp", os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return nil, ioErr("create chunk", k.String(), err)
	}
	_, err = f.WriteAt(d.layout.header(), 0)
	if err == nil {
		err = f.Truncate(d.layout.dataOff)
	}
	if err == nil {
		err = d.fs.Rename(p+".tmp", p)
	}
	if err != nil {
		f.Close()
		d.fs.Remove(p + ".tmp")
		return nil, ioErr("create chunk", k.String(), err)
	}
	d.count.Add(1)
	d.markDirty(k.Ino, dirtyInoDir)
	return f, nil
}

// makeInoDir makes ino's directory, and its fan-out directory if need be,
// marking the parents whose entries changed for the next sync.
func (d *diskBackend) makeInoDir(ino uint64) error {
	err := d.fs.Mkdir(d.inoDir(ino), 0o700)
	if errors.Is(err, fs.ErrNotExist) {
		err = d.fs.Mkdir(d.fanDir(ino), 0o700)
		if err == nil {
			d.markDirty(ino, dirtyChunksDir)
		}
		if err == nil || errors.Is(err, fs.ErrExist) {
			err = d.fs.Mkdir(d.inoDir(ino), 0o700)
		}
	}
	switch {
	case err == nil:
		d.markDirty(ino, dirtyFanDir)
		return nil
	case errors.Is(err, fs.ErrExist):
		return nil
	}
	return err
}

func (d *diskBackend) Write(k ChunkKey, off int64, data []byte, mode WriteMode) error {
	if len(data) == 0 {
		return nil
	}
	cf, err := d.open(k, true)
	if err != nil {
		return err
	}
	defer cf.Close()
	if off+int64(len(data)) > cf.l.maxSize() {
		return errs.New(errs.Invalid, "write chunk", "chunk %v: write beyond the file's maximum chunk size %d", k, cf.l.maxSize())
	}
	d.markFile(k)
	ch := writeChange(cf.l.blockSize, cf.size, off, data)
	err = cf.apply(ch, func() error {
		return cf.writeData(data, off)
	}, d.hook)
	switch {
	case err != nil:
		return err
	case mode == WriteThrough:
		return d.syncFile(k, cf)
	case mode == WriteBehind:
		// Only a hint: if it fails, the sync to come does the work.
		cf.f.StartWriteback(cf.l.dataOff+off, int64(len(data)))
	}
	return nil
}

func (d *diskBackend) Truncate(k ChunkKey, size int64) error {
	if size == 0 {
		return d.remove(k)
	}
	cf, err := d.open(k, true)
	if err != nil {
		return err
	}
	defer cf.Close()
	if size > cf.l.maxSize() {
		return errs.New(errs.Invalid, "truncate chunk", "chunk %v: size beyond the file's maximum chunk size %d", k, cf.l.maxSize())
	}
	d.markFile(k)
	return cf.apply(truncateChange(cf.l.blockSize, cf.size, size), func() error {
		if err := cf.f.Truncate(cf.l.dataOff + size); err != nil {
			return ioErr("truncate chunk", k.String(), err)
		}
		return nil
	}, d.hook)
}

func (d *diskBackend) SetVersion(k ChunkKey, v uint64) error {
	cf, err := d.open(k, false)
	if err != nil {
		return err
	}
	if cf == nil {
		return errs.New(errs.NotExist, "set chunk version", "chunk %v (ino %d index %d) does not exist", k, k.Ino, k.Index)
	}
	defer cf.Close()
	if v < cf.version {
		return errs.New(errs.Invalid, "set chunk version", "chunk %v: version %d is below its %d", k, v, cf.version)
	}
	if err := cf.writeState(chunkState{size: cf.size, version: v}); err != nil {
		return err
	}
	return d.syncFile(k, cf)
}

func (d *diskBackend) remove(k ChunkKey) error {
	err := d.fs.Remove(d.chunkPath(k))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return ioErr("remove chunk", k.String(), err)
	}
	d.count.Add(-1)
	d.forgetFile(k)
	return nil
}

func (d *diskBackend) Read(k ChunkKey, off, n int64, alloc func(int) []byte) ([]byte, ChunkInfo, bool, error) {
	cf, err := d.open(k, false)
	if cf == nil || err != nil {
		return nil, ChunkInfo{}, false, err
	}
	defer cf.Close()
	info := cf.info()
	if off >= cf.size || n == 0 {
		return nil, info, true, nil
	}
	data, err := cf.read(off, min(off+n, cf.size), alloc)
	return data, info, true, err
}

func (d *diskBackend) Delete(ino, from uint64) (uint64, error) {
	dir := d.inoDir(ino)
	names, err := d.fs.ReadDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, ioErr("delete chunks", dir, err)
	}
	var n uint64
	left := 0
	for _, name := range names {
		idx, ok := parseHex16(name)
		if !ok || idx < from {
			left++
			continue
		}
		if err := d.remove(ChunkKey{ino, idx}); err != nil {
			return n, err
		}
		n++
	}
	if left == 0 {
		if err := d.fs.Remove(dir); err == nil {
			d.markDirty(ino, dirtyFanDir)
		}
	}
	return n, nil
}

func (d *diskBackend) Usage() (Usage, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.root, &st); err != nil {
		return Usage{}, errs.Wrap(errs.IO, "statfs", d.root, err)
	}
	bs := uint64(st.Bsize)
	return Usage{
		Capacity: uint64(st.Blocks) * bs,
		Used:     (uint64(st.Blocks) - uint64(st.Bfree)) * bs,
		Chunks:   uint64(max(0, d.count.Load())),
	}, nil
}

func (d *diskBackend) ChunkCount() int64 { return d.count.Load() }

func (d *diskBackend) Identity() (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.marker.id, d.mu.marker.incomplete
}

func (d *diskBackend) MarkComplete() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.mu.marker.incomplete {
		return nil
	}
	m := d.mu.marker
	m.incomplete = false
	if err := d.writeMarker(m); err != nil {
		return err
	}
	d.mu.marker = m
	return nil
}

func (d *diskBackend) Close() error {
	return d.lock.Close() // releases the flock
}
