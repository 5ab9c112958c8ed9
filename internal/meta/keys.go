package meta

import (
	"encoding/binary"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// Key layout (docs/format.md). Every key starts with a one-byte tag; integers
// are big-endian so that byte order is numeric order.
//
//	"S" name                                  server metadata (format version, identity, ino high-water mark, counters)
//	"i" ino(8)                                standalone inode record (directories, hard-linked files)
//	"d" dir(8) partition(4) hash(8) name      directory entry
//	"x" ino(8) name                           extended attribute value
//	"s" dir(8)                                split in progress (SplitIntent)
//	"I" txid(8)                               cross-server operation in progress (Intent)
const (
	tagSystem = 'S'
	tagInode  = 'i'
	tagEntry  = 'd'
	tagXattr  = 'x'
	tagSplit  = 's'
	tagIntent = 'I'
)

func splitKey(dir core.Ino) []byte {
	return binary.BigEndian.AppendUint64([]byte{tagSplit}, uint64(dir))
}

func intentKey(txid uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{tagIntent}, txid)
}

// System keys.
var (
	keyFormat   = []byte("Sformat")    // uint64: on-disk format version
	keyInoHWM   = []byte("Sino-hwm")   // uint64: no sequence number at or above it has been handed out
	keyInodes   = []byte("Sinodes")    // int64 counter (merge operand): inodes in use
	keyDirs     = []byte("Sdirs")      // int64 counter (merge operand): directories
	keyServerID = []byte("Sserver-id") // uint64: the meta server id this store belongs to
	keyServers  = []byte("Sservers")   // uint64: meta servers in the cluster (GIGA+ placement depends on it)
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

// partPrefix is the prefix of every entry key of partition part of dir.
func partPrefix(dir core.Ino, part uint32) []byte {
	return binary.BigEndian.AppendUint32(dirPrefix(dir), part)
}

func entryKey(dir core.Ino, part uint32, name string) []byte {
	k := partPrefix(dir, part)
	k = binary.BigEndian.AppendUint64(k, core.NameHash(name))
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

// Readdir cookies are opaque to clients: a version byte and the name hash and
// name of the last entry returned. The order (hash, name) is the same in
// every partition, so a client merging the partitions of a split directory
// resumes every one of them at the cookie, and entries created, removed or
// moved by a split meanwhile never shift the position of the others.
const cookieVersion = 2

func encodeCookie(key []byte) []byte {
	c := make([]byte, 0, 1+len(key)-13)
	c = append(c, cookieVersion)
	return append(c, key[13:]...)
}

// cookieSeek returns the first key of partition part of dir that a readdir
// resuming at cookie must return.
func cookieSeek(dir core.Ino, part uint32, cookie []byte) ([]byte, error) {
	if len(cookie) == 0 {
		return partPrefix(dir, part), nil
	}
	if cookie[0] != cookieVersion || len(cookie) < 1+8+1 || len(cookie) > 1+8+core.MaxNameLen {
		return nil, errs.New(errs.Invalid, "readdir", "bad cookie")
	}
	k := append(partPrefix(dir, part), cookie[1:]...)
	// Names never contain NUL, so key+"\x00" is the immediate successor.
	return append(k, 0), nil
}
