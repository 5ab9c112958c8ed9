package layout

import (
	"encoding/binary"

	"github.com/weftfs/weft/internal/core"
)

// The search index (tag "N", docs/format.md "Search index"). The meta server
// derives it from the entry, inode and extended attribute keys a batch
// writes, in the same batch, so that it never disagrees with them after a
// crash. Its keys start with TagIndex and a one-byte kind:
//
//	"N" "n" name 0x00 dir(8)   -> ino(8) mode(4)    every entry, by name
//	"N" "r" eman 0x00 dir(8)   -> ino(8) mode(4)    every entry, by its name reversed byte by byte
//	"N" "p" dir(8) name        -> ino(8) mode(4)    entries whose attributes are not in them (directories, hard-linked files)
//	"N" "a" ino(8)             -> IndexAttr         attributes held in an entry (one-link files, symlinks, ...)
//	"N" "A" ino(8)             -> IndexAttr         attributes held in a standalone record (directories, hard-linked files; not partition stubs)
//	"N" "x" name 0x00 ino(8)   -> empty             extended attribute names
//
// Names never contain NUL, so name 0x00 sorts every key of one name before
// those of any longer name that starts with it. The reversed names let a
// pattern whose literal part is its end (-name '*.c', 'f???0000') read
// only the names that end so, as the by-name keys serve a literal start.
const (
	IndexByName      = 'n'
	IndexByReversed  = 'r'
	IndexPointer     = 'p'
	IndexEntryAttr   = 'a'
	IndexRecordAttr  = 'A'
	IndexXattrByName = 'x'
)

// IndexPrefix is the prefix of every index key of one kind.
func IndexPrefix(kind byte) []byte { return []byte{TagIndex, kind} }

// IndexNameKey is the by-name key of name in dir.
func IndexNameKey(name string, dir core.Ino) []byte {
	k := make([]byte, 0, 2+len(name)+1+8)
	k = append(append(append(k, TagIndex, IndexByName), name...), 0)
	return binary.BigEndian.AppendUint64(k, uint64(dir))
}

// IndexNamePrefix is the prefix of the by-name keys of exactly name.
func IndexNamePrefix(name string) []byte {
	return append(append([]byte{TagIndex, IndexByName}, name...), 0)
}

// IndexNameStartPrefix is the prefix of the by-name keys of every name
// that starts with start.
func IndexNameStartPrefix(start string) []byte {
	return append([]byte{TagIndex, IndexByName}, start...)
}

// IndexReversedKey is the by-reversed-name key of name in dir.
func IndexReversedKey(name string, dir core.Ino) []byte {
	k := make([]byte, 0, 2+len(name)+1+8)
	k = appendReversed(append(k, TagIndex, IndexByReversed), name)
	return binary.BigEndian.AppendUint64(append(k, 0), uint64(dir))
}

// IndexNameEndPrefix is the prefix of the by-reversed-name keys of every
// name that ends with end.
func IndexNameEndPrefix(end string) []byte {
	return appendReversed([]byte{TagIndex, IndexByReversed}, end)
}

func appendReversed(b []byte, s string) []byte {
	for i := len(s) - 1; i >= 0; i-- {
		b = append(b, s[i])
	}
	return b
}

// IndexNameKeyName returns the name bytes of a by-name or
// by-reversed-name key, as they are in the key (reversed for the
// latter); it aliases key.
func IndexNameKeyName(key []byte) ([]byte, bool) {
	if len(key) < 2+1+8 || key[0] != TagIndex || key[1] != IndexByName && key[1] != IndexByReversed || key[len(key)-9] != 0 {
		return nil, false
	}
	return key[2 : len(key)-9], true
}

// IndexPointerKey is the key of a pointer entry name in dir.
func IndexPointerKey(dir core.Ino, name string) []byte {
	k := binary.BigEndian.AppendUint64([]byte{TagIndex, IndexPointer}, uint64(dir))
	return append(k, name...)
}

// IndexPointerParts splits a pointer key.
func IndexPointerParts(key []byte) (dir core.Ino, name string, ok bool) {
	if len(key) < 2+8+1 || key[0] != TagIndex || key[1] != IndexPointer {
		return 0, "", false
	}
	return core.Ino(binary.BigEndian.Uint64(key[2:])), string(key[10:]), true
}

// IndexAttrKey is the key of ino's attributes (kind IndexEntryAttr or
// IndexRecordAttr).
func IndexAttrKey(kind byte, ino core.Ino) []byte {
	return binary.BigEndian.AppendUint64([]byte{TagIndex, kind}, uint64(ino))
}

// IndexAttrKeyIno returns the inode of an attribute key.
func IndexAttrKeyIno(key []byte) (core.Ino, bool) {
	if len(key) != 10 || key[0] != TagIndex || key[1] != IndexEntryAttr && key[1] != IndexRecordAttr {
		return 0, false
	}
	return core.Ino(binary.BigEndian.Uint64(key[2:])), true
}

// IndexXattrKey is the key saying that ino has an extended attribute name.
func IndexXattrKey(name string, ino core.Ino) []byte {
	return binary.BigEndian.AppendUint64(IndexXattrPrefix(name), uint64(ino))
}

// IndexXattrPrefix is the prefix of the keys of extended attribute name.
func IndexXattrPrefix(name string) []byte {
	return append(append([]byte{TagIndex, IndexXattrByName}, name...), 0)
}

// IndexRefValue is the value of a by-name or pointer key: the entry's inode
// and mode (type bits as of the entry).
func IndexRefValue(ino core.Ino, mode uint32) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(make([]byte, 0, 12), uint64(ino)), mode)
}

// IndexRefParts decodes IndexRefValue.
func IndexRefParts(v []byte) (ino core.Ino, mode uint32, ok bool) {
	if len(v) != 12 {
		return 0, 0, false
	}
	return core.Ino(binary.BigEndian.Uint64(v)), binary.BigEndian.Uint32(v[8:]), true
}

// IndexAttr is what the index keeps of an inode's attributes: what stat
// reports and find tests, packed into a fixed header (no protobuf to decode
// on a scan), plus where the attributes are. Dir and Name are set for
// attributes held in an entry; Parent and Split for a directory's record.
type IndexAttr struct {
	Mode, Uid, Gid, Nlink uint32
	Size                  uint64
	MtimeNs, CtimeNs      int64
	Dir                   core.Ino // the entry's directory (IndexEntryAttr)
	Name                  string   // the entry's name (IndexEntryAttr)
	Parent                core.Ino // a directory's parent (IndexRecordAttr)
	Split                 bool     // a directory with partitions on other servers
}

const indexAttrHeader = 4*4 + 8*3

// Encode packs a, for an attribute key of kind.
func (a *IndexAttr) Encode(kind byte) []byte {
	v := make([]byte, 0, indexAttrHeader+9+len(a.Name))
	v = binary.BigEndian.AppendUint32(v, a.Mode)
	v = binary.BigEndian.AppendUint32(v, a.Uid)
	v = binary.BigEndian.AppendUint32(v, a.Gid)
	v = binary.BigEndian.AppendUint32(v, a.Nlink)
	v = binary.BigEndian.AppendUint64(v, a.Size)
	v = binary.BigEndian.AppendUint64(v, uint64(a.MtimeNs))
	v = binary.BigEndian.AppendUint64(v, uint64(a.CtimeNs))
	if kind == IndexEntryAttr {
		v = binary.BigEndian.AppendUint64(v, uint64(a.Dir))
		return append(v, a.Name...)
	}
	v = binary.BigEndian.AppendUint64(v, uint64(a.Parent))
	if a.Split {
		return append(v, 1)
	}
	return append(v, 0)
}

// DecodeIndexAttr unpacks the value of an attribute key of kind.
func DecodeIndexAttr(kind byte, v []byte) (IndexAttr, bool) {
	if len(v) < indexAttrHeader+8 || kind == IndexRecordAttr && len(v) != indexAttrHeader+9 ||
		kind == IndexEntryAttr && len(v) == indexAttrHeader+8 {
		return IndexAttr{}, false
	}
	be := binary.BigEndian
	a := IndexAttr{
		Mode: be.Uint32(v), Uid: be.Uint32(v[4:]), Gid: be.Uint32(v[8:]), Nlink: be.Uint32(v[12:]),
		Size: be.Uint64(v[16:]), MtimeNs: int64(be.Uint64(v[24:])), CtimeNs: int64(be.Uint64(v[32:])),
	}
	rest := v[indexAttrHeader:]
	if kind == IndexEntryAttr {
		a.Dir, a.Name = core.Ino(be.Uint64(rest)), string(rest[8:])
	} else {
		a.Parent, a.Split = core.Ino(be.Uint64(rest)), rest[8] == 1
	}
	return a, true
}
