// Package layout owns the key layout of a meta server's Pebble store
// (docs/format.md, "Keys"): the one-byte tags, the system keys and how each
// key is encoded and decoded. The meta server writes it and fsck and gc read
// it; both import it from here, so the format is written down once in code.
//
// Every key starts with a one-byte tag. Integers are big-endian, so that
// byte order is numeric order:
//
//	"S" name                                  server metadata (format version, ino high-water mark, counters)
//	"i" ino(8)                                standalone inode record (directories, hard-linked files)
//	"d" dir(8) partition(4) hash(8) name      directory entry
//	"x" ino(8) name                           extended attribute value
//	"s" dir(8)                                split in progress (SplitIntent)
//	"I" txid(8)                               cross-server operation in progress (Intent)
//	"r" ino(8) seq(8)                         chunks the stores still hold for nothing (ReclaimRecord)
//	"N" kind ...                              search index, derived from the keys above (index.go)
package layout

import (
	"encoding/binary"

	"github.com/weftfs/weft/internal/core"
)

// Key tags.
const (
	TagSystem  = 'S'
	TagInode   = 'i'
	TagEntry   = 'd'
	TagXattr   = 'x'
	TagSplit   = 's'
	TagIntent  = 'I'
	TagReclaim = 'r'
	TagFence   = 'F' // txid(8) -> one byte: 1 if the txn's writes were applied here, 0 if not
	TagIndex   = 'N' // kind(1) ...: the search index (index.go)
)

// Tags lists every key tag, for checks that the format's documentation and
// readers cover them all.
func Tags() []byte {
	return []byte{TagSystem, TagInode, TagEntry, TagXattr, TagSplit, TagIntent, TagReclaim, TagFence, TagIndex}
}

// System keys (tag "S").
const (
	KeyFormat   = "Sformat"    // uint64: on-disk format version
	KeyInoHWM   = "Sino-hwm"   // uint64: no sequence number at or above it has been handed out
	KeyInodes   = "Sinodes"    // int64 counter (merge operand): inodes in use
	KeyDirs     = "Sdirs"      // int64 counter (merge operand): directories
	KeyServerID = "Sserver-id" // uint64: the meta server id this store belongs to
	KeyServers  = "Sservers"   // uint64: meta servers in the cluster (GIGA+ placement depends on it)
	KeyRunning  = "Srunning"   // present while the server runs; a clean stop deletes it (meta/recovery.go)
	// KeyInodesOf and KeyDirsOf, followed by an owner's id (uint16), are
	// int64 counters (merge operands): this server's share of another
	// server's inodes and directories in use (removes of its inodes here).
	KeyInodesOf = "Sinodes-of/"
	KeyDirsOf   = "Sdirs-of/"
	// KeySearchIndex (one byte: the index's version) marks a store whose
	// search index (tag "N") is complete.
	KeySearchIndex = "Ssearch-index"
)

// CounterOfKey is the key of this server's share of owner's count kind
// (KeyInodesOf or KeyDirsOf).
func CounterOfKey(kind string, owner int) []byte {
	return binary.BigEndian.AppendUint16([]byte(kind), uint16(owner))
}

// FenceKey is the key of the fence of cross-server operation txid.
func FenceKey(txid uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{TagFence}, txid)
}

// FormatVersion is the on-disk format the meta server writes and reads.
const FormatVersion = 1

// EntryKeyMin is the length of the shortest entry key: tag, dir,
// partition, hash and a name of one byte.
const EntryKeyMin = 1 + 8 + 4 + 8 + 1

// InoKey is tag followed by ino: the key of a standalone record, or the
// prefix of an inode's extended attributes or a directory's entries.
func InoKey(tag byte, ino core.Ino) []byte { return inoKeyRoom(tag, ino, 0) }

// inoKeyRoom is InoKey with room for extra more bytes, for a prefix that
// callers extend.
func inoKeyRoom(tag byte, ino core.Ino, extra int) []byte {
	k := make([]byte, 9, 9+extra)
	k[0] = tag
	binary.BigEndian.PutUint64(k[1:], uint64(ino))
	return k
}

// KeyIno is the ino (or directory, or txid) right after a key's tag; the
// key must be at least 9 bytes long.
func KeyIno(key []byte) core.Ino { return core.Ino(binary.BigEndian.Uint64(key[1:9])) }

// InodeKey is the key of ino's standalone record.
func InodeKey(ino core.Ino) []byte { return InoKey(TagInode, ino) }

// DirPrefix is the prefix of every entry key of dir, in all its partitions.
func DirPrefix(dir core.Ino) []byte { return inoKeyRoom(TagEntry, dir, 4+8+core.MaxNameLen) }

// PartPrefix is the prefix of every entry key of partition part of dir.
func PartPrefix(dir core.Ino, part uint32) []byte {
	return binary.BigEndian.AppendUint32(DirPrefix(dir), part)
}

// EntryKey is the key of name in partition part of dir.
func EntryKey(dir core.Ino, part uint32, name string) []byte {
	k := binary.BigEndian.AppendUint64(PartPrefix(dir, part), core.NameHash(name))
	return append(k, name...)
}

// EntryKeyParts splits an entry key; ok is false if key is none.
func EntryKeyParts(key []byte) (dir core.Ino, part uint32, hash uint64, name string, ok bool) {
	if len(key) < EntryKeyMin || key[0] != TagEntry {
		return 0, 0, 0, "", false
	}
	return KeyIno(key), binary.BigEndian.Uint32(key[9:]), binary.BigEndian.Uint64(key[13:]), string(key[21:]), true
}

// XattrPrefix is the prefix of every extended attribute key of ino.
func XattrPrefix(ino core.Ino) []byte { return inoKeyRoom(TagXattr, ino, core.MaxNameLen) }

// XattrKey is the key of extended attribute name of ino.
func XattrKey(ino core.Ino, name string) []byte { return append(XattrPrefix(ino), name...) }

// SplitKey is the key of a split of dir in progress.
func SplitKey(dir core.Ino) []byte { return InoKey(TagSplit, dir) }

// IntentKey is the key of cross-server operation txid.
func IntentKey(txid uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{TagIntent}, txid)
}

// ReclaimKey names one piece of reclaim work on ino; seq orders the records
// of one inode and keeps them apart.
func ReclaimKey(ino core.Ino, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(ReclaimPrefix(ino), seq)
}

// ReclaimPrefix is the prefix of every reclaim record of ino.
func ReclaimPrefix(ino core.Ino) []byte { return inoKeyRoom(TagReclaim, ino, 8) }

// ReclaimKeyParts returns the inode and sequence number of a reclaim key.
func ReclaimKeyParts(key []byte) (ino core.Ino, seq uint64, ok bool) {
	if len(key) != 17 || key[0] != TagReclaim {
		return 0, 0, false
	}
	return KeyIno(key), binary.BigEndian.Uint64(key[9:]), true
}

// PrefixEnd returns the smallest key greater than every key with prefix p
// (nil if there is none: p is all 0xff).
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// TagRange is the range [start, end) of every key with tag t.
func TagRange(t byte) (start, end []byte) { return []byte{t}, []byte{t + 1} }
