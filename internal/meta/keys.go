package meta

import (
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
)

// The key layout is internal/layout's (docs/format.md, "Keys"); fsck reads
// the same package. These short names keep meta's code readable.
const (
	tagInode   = layout.TagInode
	tagEntry   = layout.TagEntry
	tagXattr   = layout.TagXattr
	tagSplit   = layout.TagSplit
	tagIntent  = layout.TagIntent
	tagReclaim = layout.TagReclaim
)

// System keys.
var (
	keyFormat   = []byte(layout.KeyFormat)
	keyInoHWM   = []byte(layout.KeyInoHWM)
	keyInodes   = []byte(layout.KeyInodes)
	keyDirs     = []byte(layout.KeyDirs)
	keyServerID = []byte(layout.KeyServerID)
	keyServers  = []byte(layout.KeyServers)
	keyRunning  = []byte(layout.KeyRunning)
)

// formatVersion is the on-disk format this code writes and reads.
const formatVersion = layout.FormatVersion

func splitKey(dir core.Ino) []byte                           { return layout.SplitKey(dir) }
func intentKey(txid uint64) []byte                           { return layout.IntentKey(txid) }
func reclaimKey(ino core.Ino, seq uint64) []byte             { return layout.ReclaimKey(ino, seq) }
func reclaimPrefix(ino core.Ino) []byte                      { return layout.ReclaimPrefix(ino) }
func inodeKey(ino core.Ino) []byte                           { return layout.InodeKey(ino) }
func dirPrefix(dir core.Ino) []byte                          { return layout.DirPrefix(dir) }
func partPrefix(dir core.Ino, part uint32) []byte            { return layout.PartPrefix(dir, part) }
func entryKey(dir core.Ino, part uint32, name string) []byte { return layout.EntryKey(dir, part, name) }
func xattrPrefix(ino core.Ino) []byte                        { return layout.XattrPrefix(ino) }
func xattrKey(ino core.Ino, name string) []byte              { return layout.XattrKey(ino, name) }
func prefixEnd(p []byte) []byte                              { return layout.PrefixEnd(p) }

// reclaimKeyIno returns the inode of a reclaim key.
func reclaimKeyIno(key []byte) (core.Ino, bool) {
	ino, _, ok := layout.ReclaimKeyParts(key)
	return ino, ok
}

// entrySuffix returns the partition, hash and name of an entry key of dir's,
// which the caller found under dirPrefix(dir).
func entrySuffix(key []byte) (part uint32, hash uint64, name string, ok bool) {
	_, part, hash, name, ok = layout.EntryKeyParts(key)
	return part, hash, name, ok
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
