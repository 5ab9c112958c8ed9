package store

import (
	"encoding/binary"
	"fmt"
)

// The chunk file format; see the package doc.
const (
	chunkMagic   = "WEFTCHNK"
	chunkVersion = 2 // 1: no state slots, the size was the file's
	headerSize   = 4096
	headerUsed   = 28
	entrySize    = 8
	pageSize     = 4096
	maxEntries   = 1 << 20

	// The chunk's state (size and version) lives in two slots in separate
	// 512-byte sectors of the header page; a change writes the slot its new
	// version names, so a write torn by a crash damages only that slot and
	// the other still holds the state before the change.
	slotOff0 = 512
	slotOff1 = 1024
	slotSize = 20 // size u64, version u64, CRC32C of the 16 bytes before
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

// header returns the header page of a new chunk: the layout and, in slot 0,
// the state {size 0, version 0}.
func (l layout) header() []byte {
	h := make([]byte, slotOff1+slotSize)
	copy(h, chunkMagic)
	binary.LittleEndian.PutUint32(h[8:], chunkVersion)
	binary.LittleEndian.PutUint32(h[12:], uint32(l.blockSize))
	binary.LittleEndian.PutUint32(h[16:], uint32(l.entries))
	binary.LittleEndian.PutUint32(h[20:], uint32(l.dataOff))
	binary.LittleEndian.PutUint32(h[24:], checksum(h[:24]))
	copy(h[slotOff0:], chunkState{}.encode())
	return h
}

// parseHeader reads the layout from a header page of at least
// slotOff1+slotSize bytes; the error says what is wrong.
func parseHeader(h []byte) (layout, error) {
	if len(h) < headerUsed || string(h[:8]) != chunkMagic || binary.LittleEndian.Uint32(h[24:]) != checksum(h[:24]) {
		return layout{}, fmt.Errorf("bad header")
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != chunkVersion {
		return layout{}, fmt.Errorf("chunk format %d, this weft reads only format %d (move the store's data away and let repair refill it)", v, chunkVersion)
	}
	l := layout{
		blockSize: int64(binary.LittleEndian.Uint32(h[12:])),
		entries:   int64(binary.LittleEndian.Uint32(h[16:])),
		dataOff:   int64(binary.LittleEndian.Uint32(h[20:])),
	}
	if l.blockSize <= 0 || l.entries <= 0 || l.entries > maxEntries || l.dataOff != dataOffset(l.entries) {
		return layout{}, fmt.Errorf("bad header")
	}
	return l, nil
}

// chunkState is what the slots record: the chunk's logical size, which the
// file's length must reach (a shorter file lost data), and its version.
type chunkState struct {
	size    int64
	version uint64
}

func (st chunkState) encode() []byte {
	b := make([]byte, slotSize)
	binary.LittleEndian.PutUint64(b[0:], uint64(st.size))
	binary.LittleEndian.PutUint64(b[8:], st.version)
	binary.LittleEndian.PutUint32(b[16:], checksum(b[:16]))
	return b
}

func decodeState(b []byte) (chunkState, bool) {
	if binary.LittleEndian.Uint32(b[16:]) != checksum(b[:16]) {
		return chunkState{}, false
	}
	st := chunkState{size: int64(binary.LittleEndian.Uint64(b[0:])), version: binary.LittleEndian.Uint64(b[8:])}
	return st, st.size >= 0
}

// slotOff is where the state of version v goes.
func slotOff(v uint64) int64 {
	if v%2 == 0 {
		return slotOff0
	}
	return slotOff1
}

// parseState returns the newest valid state of the two slots in h.
func parseState(h []byte) (chunkState, bool) {
	// A slot holds only versions of its parity (slotOff).
	s0, ok0 := decodeState(h[slotOff0 : slotOff0+slotSize])
	s1, ok1 := decodeState(h[slotOff1 : slotOff1+slotSize])
	ok0 = ok0 && s0.version%2 == 0
	ok1 = ok1 && s1.version%2 == 1
	switch {
	case ok0 && ok1 && s1.version > s0.version, ok1 && !ok0:
		return s1, true
	case ok0:
		return s0, true
	}
	return chunkState{}, false
}
