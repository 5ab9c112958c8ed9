package fsck

import (
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// entryInfo is what the scan needs of an EntryRecord.
type entryInfo struct {
	ino      core.Ino
	mode     uint32
	embedded bool // the attributes are in the entry
}

// parseEntry reads an EntryRecord's ino, mode and whether it embeds the
// attributes, without decoding the attributes: the scan reads every entry
// of the cluster, and most embed them.
func parseEntry(v []byte) (entryInfo, error) {
	var e entryInfo
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return e, errs.Wrap(errs.Corrupt, "fsck", "entry record", protowire.ParseError(n))
		}
		v = v[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			x, m := protowire.ConsumeVarint(v)
			if m < 0 {
				return e, errs.Wrap(errs.Corrupt, "fsck", "entry record", protowire.ParseError(m))
			}
			e.ino, n = core.Ino(x), m
		case num == 2 && typ == protowire.VarintType:
			x, m := protowire.ConsumeVarint(v)
			if m < 0 {
				return e, errs.Wrap(errs.Corrupt, "fsck", "entry record", protowire.ParseError(m))
			}
			e.mode, n = uint32(x), m
		case num == 3 && typ == protowire.BytesType:
			e.embedded = true
			n = protowire.ConsumeFieldValue(num, typ, v)
		default:
			n = protowire.ConsumeFieldValue(num, typ, v)
		}
		if n < 0 {
			return e, errs.Wrap(errs.Corrupt, "fsck", "entry record", protowire.ParseError(n))
		}
		v = v[n:]
	}
	if e.ino == 0 {
		return e, errs.New(errs.Corrupt, "fsck", "entry record names inode 0")
	}
	return e, nil
}

func decodeInode(v []byte) (*weftpb.InodeRecord, error) {
	r := &weftpb.InodeRecord{}
	if err := proto.Unmarshal(v, r); err != nil {
		return nil, errs.Wrap(errs.Corrupt, "fsck", "inode record", err)
	}
	return r, nil
}

func decodeEntry(v []byte) (*weftpb.EntryRecord, error) {
	e := &weftpb.EntryRecord{}
	if err := proto.Unmarshal(v, e); err != nil {
		return nil, errs.Wrap(errs.Corrupt, "fsck", "entry record", err)
	}
	return e, nil
}

func marshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		// Records have no required or string fields: marshaling cannot
		// fail.
		panic("fsck: marshal record: " + err.Error())
	}
	return b
}

func decodeReclaim(v []byte) (*weftpb.ReclaimRecord, error) {
	r := &weftpb.ReclaimRecord{}
	if err := proto.Unmarshal(v, r); err != nil {
		return nil, errs.Wrap(errs.Corrupt, "fsck", "reclaim record", err)
	}
	return r, nil
}
