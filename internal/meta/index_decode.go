package meta

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/layout"
)

// The index decodes the records of every batch it follows; proto.Unmarshal
// of a whole InodeRecord (inline data, link lists) doubled a create's
// allocations. These read only the fields the index keeps, without
// allocating, with protobuf's rules for what they read: the last value of
// a scalar field wins, embedded messages are merged. index_test.go checks
// them against proto.Unmarshal.

// indexRecord is what the index reads of an InodeRecord.
type indexRecord struct {
	attr   layout.IndexAttr
	parent core.Ino
	radix  uint32
	bitmap []byte // aliases the record's bytes
	stub   bool
}

// decodeIndexRecord reads an InodeRecord's indexed fields; ok is false if
// the bytes are not a well-formed message.
func decodeIndexRecord(b []byte, r *indexRecord) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		var v uint64
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			var bs []byte
			bs, n = protowire.ConsumeBytes(b)
			if n >= 0 && num == 16 {
				r.bitmap = bs
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return false
		}
		b = b[n:]
		if typ != protowire.VarintType {
			continue
		}
		switch num {
		case 1:
			r.attr.Mode = uint32(v)
		case 2:
			r.attr.Nlink = uint32(v)
		case 3:
			r.attr.Uid = uint32(v)
		case 4:
			r.attr.Gid = uint32(v)
		case 6:
			r.attr.Size = v
		case 8:
			r.attr.MtimeNs = int64(v)
		case 9:
			r.attr.CtimeNs = int64(v)
		case 13:
			r.parent = core.Ino(v)
		case 15:
			r.radix = uint32(v)
		case 19:
			r.stub = v != 0
		}
	}
	return true
}

// finish applies what stat reports (attrOf): a split directory's nlink 1.
func (r *indexRecord) finish() layout.IndexAttr {
	a := r.attr
	if core.IsDir(a.Mode) && r.radix > 0 {
		a.Nlink = 1
	}
	return a
}

// isSplitBitmap is isSplit on a bitmap.
func isSplitBitmap(bitmap []byte) bool {
	for i, b := range bitmap {
		if i == 0 && b&^1 != 0 || i > 0 && b != 0 {
			return true
		}
	}
	return false
}

// decodeIndexEntry reads an EntryRecord: its inode, mode and, if the
// attributes are embedded, those (hasAttr).
func decodeIndexEntry(b []byte) (ino core.Ino, mode uint32, attr indexRecord, hasAttr, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, attr, false, false
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && (num == 1 || num == 2):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, attr, false, false
			}
			b = b[n:]
			if num == 1 {
				ino = core.Ino(v)
			} else {
				mode = uint32(v)
			}
		case typ == protowire.BytesType && num == 3:
			bs, n := protowire.ConsumeBytes(b)
			if n < 0 || !decodeIndexRecord(bs, &attr) {
				return 0, 0, attr, false, false
			}
			b = b[n:]
			hasAttr = true
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return 0, 0, attr, false, false
			}
			b = b[n:]
		}
	}
	return ino, mode, attr, hasAttr, true
}
