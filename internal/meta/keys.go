package meta

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// Key layout (docs/format.md). Every key starts with a one-byte tag; integers
// are big-endian so that byte order is numeric order.
//
//	"S" name                                  server metadata (format version, ino high-water mark, counters)
//	"i" ino(8)                                standalone inode record (directories, hard-linked files)
//	"d" dir(8) partition(4) hash(8) name      directory entry
//	"x" ino(8) name                           extended attribute value
const (
	tagSystem = 'S'
	tagInode  = 'i'
	tagEntry  = 'd'
	tagXattr  = 'x'
)

// System keys.
var (
	keyFormat   = []byte("Sformat")    // uint64: on-disk format version
	keyInoHWM   = []byte("Sino-hwm")   // uint64: no sequence number at or above it has been handed out
	keyInodes   = []byte("Sinodes")    // int64 counter (merge operand): inodes in use
	keyDirs     = []byte("Sdirs")      // int64 counter (merge operand): directories
	keyServerID = []byte("Sserver-id") // uint64: the meta server id this store belongs to
)

// formatVersion is the on-disk format this code writes and reads.
const formatVersion = 1

func inodeKey(ino core.Ino) []byte {
	k := make([]byte, 9)
	k[0] = tagInode
	binary.BigEndian.PutUint64(k[1:], uint64(ino))
	return k
}

// dirPrefix is the prefix of every entry key of dir, in all its partitions.
func dirPrefix(dir core.Ino) []byte {
	k := make([]byte, 9, 9+4+8+core.MaxNameLen)
	k[0] = tagEntry
	binary.BigEndian.PutUint64(k[1:], uint64(dir))
	return k
}

func entryKey(dir core.Ino, part uint32, name string) []byte {
	k := dirPrefix(dir)
	k = binary.BigEndian.AppendUint32(k, part)
	k = binary.BigEndian.AppendUint64(k, nameHash(name))
	return append(k, name...)
}

// entrySuffix returns the partition, hash and name of an entry key of dir's,
// which the caller found under dirPrefix(dir).
func entrySuffix(key []byte) (part uint32, hash uint64, name string, ok bool) {
	if len(key) < 9+4+8+1 {
		return 0, 0, "", false
	}
	return binary.BigEndian.Uint32(key[9:]), binary.BigEndian.Uint64(key[13:]), string(key[21:]), true
}

func xattrPrefix(ino core.Ino) []byte {
	k := make([]byte, 9, 9+core.MaxNameLen)
	k[0] = tagXattr
	binary.BigEndian.PutUint64(k[1:], uint64(ino))
	return k
}

func xattrKey(ino core.Ino, name string) []byte { return append(xattrPrefix(ino), name...) }

// prefixEnd returns the smallest key greater than every key with prefix p
// (p never ends in 0xff here: it ends with an ino we do not let overflow, or a
// tag).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// nameHash is the GIGA+ hash of an entry name: FNV-1a finished with the
// splitmix64 mixer, because splits look at one bit at a time starting from the
// lowest and FNV's low bits are weak. Part of the on-disk format.
func nameHash(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// partitionOf returns the GIGA+ partition that holds hash in a directory with
// the given radix and partition bitmap: the partition is hash mod 2^r for the
// largest r <= radix whose partition exists (a partition that has not split
// yet still holds the names of its future children).
func partitionOf(hash uint64, radix uint32, bitmap []byte) uint32 {
	for r := int(radix); r > 0; r-- {
		p := uint32(hash & (1<<uint(r) - 1))
		if bitmapHas(bitmap, p) {
			return p
		}
	}
	return 0
}

func bitmapHas(bitmap []byte, p uint32) bool {
	i := p / 8
	return int(i) < len(bitmap) && bitmap[i]&(1<<(p%8)) != 0
}

// Readdir cookies are opaque to clients: a version byte and the key suffix
// (partition, hash, name) of the last entry returned. Resuming seeks to the
// key just after it, so entries created or removed meanwhile never shift the
// position of the others.
const cookieVersion = 1

func encodeCookie(key []byte) []byte {
	c := make([]byte, 0, 1+len(key)-9)
	c = append(c, cookieVersion)
	return append(c, key[9:]...)
}

// cookieSeek returns the first key of dir that a readdir resuming at cookie
// must return.
func cookieSeek(dir core.Ino, cookie []byte) ([]byte, error) {
	if len(cookie) == 0 {
		return dirPrefix(dir), nil
	}
	if cookie[0] != cookieVersion || len(cookie) < 1+4+8+1 || len(cookie) > 1+4+8+core.MaxNameLen {
		return nil, errs.New(errs.Invalid, "readdir", "bad cookie")
	}
	k := append(dirPrefix(dir), cookie[1:]...)
	// Names never contain NUL, so key+"\x00" is the immediate successor.
	return append(k, 0), nil
}
