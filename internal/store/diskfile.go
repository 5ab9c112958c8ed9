package store

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// The chunk file format; see the package doc.
const (
	chunkMagic   = "WEFTCHNK"
	chunkVersion = 1
	headerSize   = 4096
	headerUsed   = 28
	entrySize    = 8
	pageSize     = 4096
	maxEntries   = 1 << 20
)

// layout is where a chunk file keeps its table and data. Each file carries
// its own, so files made with another block or chunk size stay readable.
type layout struct {
	blockSize int64
	entries   int64 // table entries: the chunk's maximum number of blocks
	dataOff   int64
}

func newLayout(bs, maxChunk int64) layout {
	entries := blockCount(bs, maxChunk)
	return layout{blockSize: bs, entries: entries, dataOff: dataOffset(entries)}
}

func dataOffset(entries int64) int64 {
	return headerSize + (entries*entrySize+pageSize-1)/pageSize*pageSize
}

func (l layout) maxSize() int64 { return l.entries * l.blockSize }

func (l layout) header() []byte {
	h := make([]byte, headerUsed)
	copy(h, chunkMagic)
	binary.LittleEndian.PutUint32(h[8:], chunkVersion)
	binary.LittleEndian.PutUint32(h[12:], uint32(l.blockSize))
	binary.LittleEndian.PutUint32(h[16:], uint32(l.entries))
	binary.LittleEndian.PutUint32(h[20:], uint32(l.dataOff))
	binary.LittleEndian.PutUint32(h[24:], checksum(h[:24]))
	return h
}

func parseHeader(h []byte) (layout, bool) {
	if len(h) < headerUsed || string(h[:8]) != chunkMagic ||
		binary.LittleEndian.Uint32(h[8:]) != chunkVersion ||
		binary.LittleEndian.Uint32(h[24:]) != checksum(h[:24]) {
		return layout{}, false
	}
	l := layout{
		blockSize: int64(binary.LittleEndian.Uint32(h[12:])),
		entries:   int64(binary.LittleEndian.Uint32(h[16:])),
		dataOff:   int64(binary.LittleEndian.Uint32(h[20:])),
	}
	ok := l.blockSize > 0 && l.entries > 0 && l.entries <= maxEntries && l.dataOff == dataOffset(l.entries)
	return l, ok
}

// entry is a block's two CRC slots: the block is valid if its CRC equals
// either. Between changes both slots hold the same CRC; during a change one
// holds the old bytes' CRC and the other the new bytes'.
type entry struct{ a, b uint32 }

func (e entry) matches(c uint32) bool { return e.a == c || e.b == c }

// chunkFile is an open chunk file; size is its data length.
type chunkFile struct {
	k       ChunkKey
	f       *os.File
	l       layout
	size    int64
	version uint64
	mtime   time.Time // of the file when it was opened
}

func (cf *chunkFile) Close() error { return cf.f.Close() }

// load reads the header and the size of an opened chunk file.
func (cf *chunkFile) load() error {
	h := make([]byte, headerUsed)
	if _, err := cf.f.ReadAt(h, 0); err != nil && !errors.Is(err, io.EOF) {
		return errs.Wrap(errs.IO, "open chunk", cf.k.String(), err)
	}
	l, ok := parseHeader(h)
	if !ok {
		return errs.New(errs.Corrupt, "open chunk", "chunk %v (ino %d index %d): bad header", cf.k, cf.k.Ino, cf.k.Index)
	}
	fi, err := cf.f.Stat()
	if err != nil {
		return errs.Wrap(errs.IO, "open chunk", cf.k.String(), err)
	}
	if fi.Size() < l.dataOff {
		return errs.New(errs.Corrupt, "open chunk", "chunk %v: file shorter than its header", cf.k)
	}
	cf.l, cf.size, cf.mtime = l, fi.Size()-l.dataOff, fi.ModTime()
	return nil
}

func (cf *chunkFile) readEntries(lo, hi int64) ([]entry, error) {
	buf := make([]byte, (hi-lo)*entrySize)
	if _, err := cf.f.ReadAt(buf, headerSize+lo*entrySize); err != nil {
		return nil, errs.Wrap(errs.IO, "read chunk table", cf.k.String(), err)
	}
	es := make([]entry, hi-lo)
	for i := range es {
		es[i] = entry{binary.LittleEndian.Uint32(buf[i*entrySize:]), binary.LittleEndian.Uint32(buf[i*entrySize+4:])}
	}
	return es, nil
}

func (cf *chunkFile) writeEntries(lo int64, es []entry) error {
	buf := make([]byte, len(es)*entrySize)
	for i, e := range es {
		binary.LittleEndian.PutUint32(buf[i*entrySize:], e.a)
		binary.LittleEndian.PutUint32(buf[i*entrySize+4:], e.b)
	}
	if _, err := cf.f.WriteAt(buf, headerSize+lo*entrySize); err != nil {
		return errs.Wrap(errs.IO, "write chunk table", cf.k.String(), err)
	}
	return nil
}

// writeUnit bounds one pwrite of chunk data. The page cache gives a write of
// 2 MiB or more huge folios, whose allocation was measured (Linux 6.18 on a
// 2-vCPU VM, ext4) at about 1 s of CPU per GiB written, against 0.2 s for
// writes of 64 KiB to 1 MiB: four pwrites instead of one for a 4 MiB chunk
// cost nothing next to that.
const writeUnit = 1 << 20

// writeData writes p at the chunk's offset off, in pieces of writeUnit.
func (cf *chunkFile) writeData(p []byte, off int64) error {
	for len(p) > 0 {
		n := min(len(p), writeUnit)
		if _, err := cf.f.WriteAt(p[:n], cf.l.dataOff+off); err != nil {
			return errs.Wrap(errs.IO, "write chunk", cf.k.String(), err)
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// readData reads the chunk's bytes [off, off+len(p)), all within size.
func (cf *chunkFile) readData(p []byte, off int64) error {
	if _, err := cf.f.ReadAt(p, cf.l.dataOff+off); err != nil {
		return errs.Wrap(errs.IO, "read chunk", cf.k.String(), err)
	}
	return nil
}

// apply makes change ch, whose data step is mutate, in the order of the
// package doc: entries {old, new}, data, entries {new, new}. hook, when set,
// runs between the steps so that tests can stop there as a crash would.
func (cf *chunkFile) apply(ch change, mutate func() error, hook func(step int) error) error {
	lo, hi := ch.blocks()
	if lo == hi {
		return mutate()
	}
	es, err := cf.readEntries(lo, hi)
	if err != nil {
		return err
	}
	buf := make([]byte, ch.bs)
	for b := lo; b < hi; b++ {
		e := &es[b-lo]
		newCRC, err := cf.newBlockCRC(ch, b, *e, buf)
		if err != nil {
			return err
		}
		if !ch.hasOld(b) {
			*e = entry{newCRC, newCRC}
			continue
		}
		// Keep the slot that vouches for the bytes now on disk; when both
		// agree (the usual case) either will do.
		keep := e.a
		if e.a != e.b {
			keep, err = cf.currentCRC(ch, b, *e)
			if err != nil {
				return err
			}
		}
		*e = entry{keep, newCRC}
	}
	steps := []func() error{
		func() error { return cf.writeEntries(lo, es) },
		mutate,
		func() error {
			for i := range es {
				es[i].a = es[i].b
			}
			return cf.writeEntries(lo, es)
		},
	}
	for i, step := range steps {
		if hook != nil {
			if err := hook(i); err != nil {
				return err
			}
		}
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// newBlockCRC returns the CRC of block b after the change, reading and
// verifying the block's old bytes if some of them survive.
func (cf *chunkFile) newBlockCRC(ch change, b int64, e entry, buf []byte) (uint32, error) {
	var old []byte
	if ch.keepsOld(b) {
		old = make([]byte, blockLen(ch.bs, ch.oldSize, b))
		if err := cf.readData(old, b*ch.bs); err != nil {
			return 0, err
		}
		if !e.matches(checksum(old)) {
			return 0, corruptErr("write chunk", cf.k, b)
		}
	}
	return checksum(ch.build(b, old, buf)), nil
}

// currentCRC finds which slot of e vouches for block b's bytes on disk (the
// slots differ only after a crash in the middle of a change). If neither
// does, the block is corrupt and about to be overwritten whole (newBlockCRC
// refused otherwise): no slot needs keeping.
func (cf *chunkFile) currentCRC(ch change, b int64, e entry) (uint32, error) {
	old := make([]byte, blockLen(ch.bs, ch.oldSize, b))
	if err := cf.readData(old, b*ch.bs); err != nil {
		return 0, err
	}
	if c := checksum(old); e.matches(c) {
		return c, nil
	}
	return 0, nil
}

// read returns the bytes [off, end) after verifying every block they touch.
// It reads the whole blocks into one buffer from alloc, in one pread, and
// returns the requested part of it.
func (cf *chunkFile) read(off, end int64, alloc func(int) []byte) ([]byte, error) {
	bs := cf.l.blockSize
	lo, hi := off/bs, (end-1)/bs+1
	es, err := cf.readEntries(lo, hi)
	if err != nil {
		return nil, err
	}
	start := lo * bs
	buf := alloc(int(min(hi*bs, cf.size) - start))
	if err := cf.readData(buf, start); err != nil {
		return nil, err
	}
	for b := lo; b < hi; b++ {
		blk := buf[(b-lo)*bs : min((b-lo+1)*bs, int64(len(buf)))]
		if !es[b-lo].matches(checksum(blk)) {
			return nil, corruptErr("read chunk", cf.k, b)
		}
	}
	return buf[off-start : end-start], nil
}
