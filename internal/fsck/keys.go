package fsck

import (
	"encoding/binary"

	"github.com/weftfs/weft/internal/core"
)

// The meta server's key layout (docs/format.md, "Keys"), as far as fsck
// reads and writes it. The format is the contract; these mirror
// internal/meta/keys.go.
const (
	tagSystem  = 'S'
	tagIntent  = 'I'
	tagEntry   = 'd'
	tagInode   = 'i'
	tagSplit   = 's'
	tagXattr   = 'x'
	tagReclaim = 'r'

	entryKeyMin = 1 + 8 + 4 + 8 + 1 // tag, dir, partition, hash, a name of one byte
)

var (
	keyServerID = []byte("Sserver-id")
	keyServers  = []byte("Sservers")
)

func inoKey(tag byte, ino core.Ino) []byte {
	return binary.BigEndian.AppendUint64([]byte{tag}, uint64(ino))
}

func inodeKey(ino core.Ino) []byte    { return inoKey(tagInode, ino) }
func dirPrefix(dir core.Ino) []byte   { return inoKey(tagEntry, dir) }
func xattrPrefix(ino core.Ino) []byte { return inoKey(tagXattr, ino) }

func partPrefix(dir core.Ino, part uint32) []byte {
	return binary.BigEndian.AppendUint32(dirPrefix(dir), part)
}

func entryKey(dir core.Ino, part uint32, name string) []byte {
	k := binary.BigEndian.AppendUint64(partPrefix(dir, part), core.NameHash(name))
	return append(k, name...)
}

// keyIno is the ino (or directory, or txid) right after a key's tag.
func keyIno(key []byte) core.Ino {
	return core.Ino(binary.BigEndian.Uint64(key[1:9]))
}

// entryKeyParts splits an entry key; ok is false if it is too short.
func entryKeyParts(key []byte) (dir core.Ino, part uint32, hash uint64, name string, ok bool) {
	if len(key) < entryKeyMin || key[0] != tagEntry {
		return 0, 0, 0, "", false
	}
	return keyIno(key), binary.BigEndian.Uint32(key[9:]), binary.BigEndian.Uint64(key[13:]), string(key[21:]), true
}

// prefixEnd is the smallest key above every key that starts with p.
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

// tagRange is the range of every key with tag t.
func tagRange(t byte) (start, end []byte) { return []byte{t}, []byte{t + 1} }

// holds reports whether a partition record with this partition index and
// radix holds names with hash h.
func holds(part, radix uint32, h uint64) bool {
	if radix >= 32 {
		return false
	}
	return uint32(h&(1<<radix-1)) == part
}

// owner is the meta server that holds ino's standalone record, in a
// cluster of n; ok is false if ino names a server the cluster does not have.
func owner(ino core.Ino, n int) (srv int, ok bool) {
	if n == 1 {
		return 0, true
	}
	return ino.Server(), ino.Server() < n
}

// partitionServer is the meta server of partition p of dir.
func partitionServer(dir core.Ino, p uint32, n int) int {
	if n == 1 {
		return 0
	}
	return core.PartitionServer(dir, p, n)
}
