package store

import (
	"encoding/binary"
	"errors"
	"io"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// entry is a block's two CRC slots: the block is valid if its CRC equals
// either. Between changes both slots hold the same CRC; during a change one
// holds the old bytes' CRC and the other the new bytes'.
type entry struct{ a, b uint32 }

func (e entry) matches(c uint32) bool { return e.a == c || e.b == c }

// chunkFile is an open chunk file: its layout, its state (size and
// version) from the newer valid slot, and the file's length.
type chunkFile struct {
	k       ChunkKey
	f       File
	l       layout
	size    int64
	version uint64
	fileLen int64
	mtime   time.Time // of the file when it was opened
}

func (cf *chunkFile) Close() error { return cf.f.Close() }

func (cf *chunkFile) info() ChunkInfo {
	return ChunkInfo{Key: cf.k, Size: cf.size, Version: cf.version, Mtime: cf.mtime}
}

// load reads the header, the state and the file's length of an opened
// chunk file. A bad header is errs.Corrupt.
func (cf *chunkFile) load() error {
	h := make([]byte, slotOff1+slotSize)
	if _, err := cf.f.ReadAt(h, 0); err != nil && !errors.Is(err, io.EOF) {
		return ioErr("open chunk", cf.k.String(), err)
	}
	l, err := parseHeader(h)
	if err != nil {
		return errs.New(errs.Corrupt, "open chunk", "chunk %v (ino %d index %d): %v", cf.k, cf.k.Ino, cf.k.Index, err)
	}
	st, ok := parseState(h)
	if !ok {
		return errs.New(errs.Corrupt, "open chunk", "chunk %v (ino %d index %d): no valid state slot", cf.k, cf.k.Ino, cf.k.Index)
	}
	fi, err := cf.f.Stat()
	if err != nil {
		return ioErr("open chunk", cf.k.String(), err)
	}
	cf.l, cf.size, cf.version, cf.fileLen, cf.mtime = l, st.size, st.version, fi.Size(), fi.ModTime()
	return nil
}

// checkLength reports a file shorter than its recorded size: its tail was
// lost (a cut file, a bad disk), and a read must not return less or zeros.
// A longer file is normal after a crash: the bytes past the size were never
// acknowledged and are dropped by the next change (dropStaleTail).
func (cf *chunkFile) checkLength() error {
	if cf.fileLen < cf.l.dataOff+cf.size {
		return errs.New(errs.Lost, "open chunk", "chunk %v (ino %d index %d): file holds %d of its %d bytes",
			cf.k, cf.k.Ino, cf.k.Index, max(0, cf.fileLen-cf.l.dataOff), cf.size)
	}
	return nil
}

// dropStaleTail cuts the bytes past the recorded size that a change which
// crashed or failed left behind, so that a growth reads zeros there.
func (cf *chunkFile) dropStaleTail() error {
	if end := cf.l.dataOff + cf.size; cf.fileLen > end {
		if err := cf.f.Truncate(end); err != nil {
			return ioErr("truncate chunk", cf.k.String(), err)
		}
		cf.fileLen = end
	}
	return nil
}

// writeState records st in the slot its version names.
func (cf *chunkFile) writeState(st chunkState) error {
	if _, err := cf.f.WriteAt(st.encode(), slotOff(st.version)); err != nil {
		return ioErr("write chunk state", cf.k.String(), err)
	}
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
	if len(es) == 0 {
		return nil
	}
	buf := make([]byte, len(es)*entrySize)
	for i, e := range es {
		binary.LittleEndian.PutUint32(buf[i*entrySize:], e.a)
		binary.LittleEndian.PutUint32(buf[i*entrySize+4:], e.b)
	}
	if _, err := cf.f.WriteAt(buf, headerSize+lo*entrySize); err != nil {
		return ioErr("write chunk table", cf.k.String(), err)
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
			return ioErr("write chunk", cf.k.String(), err)
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
// package doc: entries {old, new}; data; state; entries {new, new}, with the
// state before the data for a shrink. hook, when set, runs before each of
// the four steps so that tests can stop there as a crash would.
func (cf *chunkFile) apply(ch change, mutate func() error, hook func(step int) error) error {
	if err := cf.dropStaleTail(); err != nil {
		return err
	}
	lo, hi := ch.blocks()
	es, err := cf.changedEntries(ch, lo, hi)
	if err != nil {
		return err
	}
	next := chunkState{size: ch.newSize, version: cf.version + 1}
	steps := []func() error{
		func() error { return cf.writeEntries(lo, es) },
		mutate,
		func() error { return cf.writeState(next) },
		func() error {
			for i := range es {
				es[i].a = es[i].b
			}
			return cf.writeEntries(lo, es)
		},
	}
	if ch.newSize < ch.oldSize {
		// The size shrinks before the bytes go, so that the recorded size
		// never exceeds the file's length.
		steps[1], steps[2] = steps[2], steps[1]
	}
	for i, step := range steps {
		if hook != nil {
			if err := hook(i); err != nil {
				return err
			}
		}
		err := step()
		switch {
		case err == nil:
		case i == len(steps)-1:
			// The data and the state are in place and the entries'
			// second slots vouch for the new bytes: the change is done,
			// and the next change of these blocks settles the entries
			// (see currentCRC).
			cf.size, cf.version = next.size, next.version
			return nil
		case ch.newSize < ch.oldSize && i == 2:
			cf.undoShrink(ch, next)
			return err
		default:
			return err
		}
	}
	cf.size, cf.version = next.size, next.version
	return nil
}

// undoShrink puts back the size of a shrink whose ftruncate failed after
// its state was written, so that the failed truncate changes nothing a
// read sees: the bytes are all still there, and the table entries' first
// slots still vouch for them. If this write fails too, the chunk reads as
// shrunk, which the error the caller gets allows.
func (cf *chunkFile) undoShrink(ch change, done chunkState) {
	back := chunkState{size: ch.oldSize, version: done.version + 1}
	if cf.writeState(back) == nil {
		cf.version = back.version
	} else {
		cf.size, cf.version = done.size, done.version
	}
}

// changedEntries returns the table entries {CRC vouching for the bytes now,
// CRC of the new bytes} of blocks [lo, hi) that change ch touches.
func (cf *chunkFile) changedEntries(ch change, lo, hi int64) ([]entry, error) {
	if lo == hi {
		return nil, nil
	}
	es, err := cf.readEntries(lo, hi)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, ch.bs)
	for b := lo; b < hi; b++ {
		e := &es[b-lo]
		newCRC, err := cf.newBlockCRC(ch, b, *e, buf)
		if err != nil {
			return nil, err
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
				return nil, err
			}
		}
		*e = entry{keep, newCRC}
	}
	return es, nil
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
