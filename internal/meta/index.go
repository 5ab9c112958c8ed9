package meta

import (
	"bytes"
	"errors"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// The search index (layout/index.go, docs/format.md "Search index") is
// derived from the entry, inode and extended attribute keys a batch writes,
// at one place: indexBatch, which every batch passes through just before it
// is applied (apply, and Offline.Apply for fsck's repairs of a stopped
// server). Whoever builds the batch, a txn, a peer's KeyOps, a split's
// install or move, a replayed intent, the index follows, in the same batch,
// so a crash never separates them. The old state of each key is read from
// the store: the caller holds the locks that guard the keys it writes, so
// no other batch changes them between that read and the apply.
//
// The attributes are indexed by inode, not by entry, where they live: in
// the entry (one-link files) or in the standalone record on the inode's
// owner (directories, hard-linked files), which is often another server than
// the entries that name it. An index keyed by entry would need a
// cross-server write to follow a chmod of a directory or a hard-linked
// file. Entries are indexed by name and, when their attributes are
// elsewhere, as pointers; the client joins a pointer with the record's
// attributes, which it also receives.

// indexedTag reports whether keys with tag t feed the index.
func indexedTag(k []byte) bool {
	return len(k) > 9 && (k[0] == tagEntry || k[0] == tagXattr) || len(k) == 9 && k[0] == tagInode
}

// indexBatch adds to b the index changes that follow from b's writes. The
// difference is taken over the whole batch, so that a batch moving a record
// to another key that implies the same index keys (an fsck repair) leaves
// them in place.
func indexBatch(db *pebble.DB, b *pebble.Batch) error {
	final, order, err := batchFinal(db, b)
	if err != nil || len(order) == 0 {
		return err
	}
	oldKV, newKV := map[string][]byte{}, map[string][]byte{}
	var oldOrder, newOrder []string
	var kv []indexKV
	for _, k := range order {
		nv := final[k]
		if derived := indexKeyOfRecordKey([]byte(k)); derived != nil {
			// The record's only index key follows from its own key: no
			// need to read what it held.
			oldOrder = append(oldOrder, string(derived))
		} else {
			old, found, err := getValue(db, []byte(k))
			if err != nil {
				return err
			}
			if found && nv != nil && bytes.Equal(old, nv) {
				continue
			}
			if found {
				for _, x := range indexKeysOf(kv[:0], []byte(k), old) {
					oldOrder = append(oldOrder, string(x.k))
					oldKV[string(x.k)] = x.v
				}
			}
		}
		for _, x := range indexKeysOf(kv[:0], []byte(k), nv) {
			newOrder = append(newOrder, string(x.k))
			newKV[string(x.k)] = x.v
		}
	}
	for _, k := range oldOrder {
		if _, ok := newKV[k]; !ok {
			b.Delete([]byte(k), nil)
		}
	}
	for _, k := range newOrder {
		if v, ok := oldKV[k]; !ok || !bytes.Equal(v, newKV[k]) {
			b.Set([]byte(k), newKV[k], nil)
		}
	}
	return nil
}

// batchFinal returns what b leaves at each indexed key it writes: the value
// it sets, or nil for a delete (a range delete deletes every indexed key in
// its range, in the store or set earlier in b), and the keys in order.
func batchFinal(db *pebble.DB, b *pebble.Batch) (map[string][]byte, []string, error) {
	var final map[string][]byte
	var order []string
	put := func(k, v []byte) {
		if final == nil {
			final = map[string][]byte{}
		}
		if _, ok := final[string(k)]; !ok {
			order = append(order, string(k))
		}
		final[string(k)] = v
	}
	r := b.Reader()
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			return nil, nil, errs.Wrap(errs.Corrupt, "index", "batch", err)
		}
		if !ok {
			return final, order, nil
		}
		switch kind {
		case pebble.InternalKeyKindSet:
			if indexedTag(k) {
				put(k, append(make([]byte, 0, len(v)), v...))
			}
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete:
			if indexedTag(k) {
				put(k, nil)
			}
		case pebble.InternalKeyKindRangeDelete:
			for _, key := range order {
				if key >= string(k) && key < string(v) {
					final[key] = nil
				}
			}
			keys, err := indexedKeysIn(db, k, v)
			if err != nil {
				return nil, nil, err
			}
			for _, key := range keys {
				put(key, nil)
			}
		}
	}
}

// indexedKeysIn lists the store's indexed keys in [start, end).
func indexedKeysIn(db *pebble.DB, start, end []byte) ([][]byte, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return nil, errs.Wrap(errs.IO, "index", "", err)
	}
	var keys [][]byte
	for it.First(); it.Valid(); it.Next() {
		if indexedTag(it.Key()) {
			keys = append(keys, slices.Clone(it.Key()))
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, errs.Wrap(errs.IO, "index", "", err)
	}
	return keys, nil
}

type indexKV struct{ k, v []byte }

// indexKeysOf appends the index keys that record key with value v (nil: no
// record) implies. A record that does not decode implies none: fsck reports
// it, and the index must not stop the write that repairs it.
func indexKeysOf(kv []indexKV, key, v []byte) []indexKV {
	if v == nil {
		return kv
	}
	switch key[0] {
	case tagEntry:
		dir, _, _, name, ok := layout.EntryKeyParts(key)
		e := &weftpb.EntryRecord{}
		if !ok || proto.Unmarshal(v, e) != nil {
			return kv
		}
		ino := core.Ino(e.Ino)
		ref := layout.IndexRefValue(ino, e.Mode)
		kv = append(kv, indexKV{layout.IndexNameKey(name, dir), ref})
		if e.Attr == nil {
			return append(kv, indexKV{layout.IndexPointerKey(dir, name), ref})
		}
		a := indexAttr(e.Attr)
		a.Dir, a.Name = dir, name
		return append(kv, indexKV{layout.IndexAttrKey(layout.IndexEntryAttr, ino), a.Encode(layout.IndexEntryAttr)})
	case tagInode:
		r := &weftpb.InodeRecord{}
		if proto.Unmarshal(v, r) != nil || r.Stub {
			return kv
		}
		a := indexAttr(r)
		if core.IsDir(r.Mode) {
			a.Parent, a.Split = core.Ino(r.Parent), isSplit(r)
		}
		return append(kv, indexKV{layout.IndexAttrKey(layout.IndexRecordAttr, layout.KeyIno(key)), a.Encode(layout.IndexRecordAttr)})
	case tagXattr:
		return append(kv, indexKV{layout.IndexXattrKey(string(key[9:]), layout.KeyIno(key)), []byte{}})
	}
	return kv
}

// indexKeyOfRecordKey returns the one index key an inode record or an
// extended attribute may imply, which its key alone determines (nil for an
// entry, whose keys depend on the inode it names).
func indexKeyOfRecordKey(key []byte) []byte {
	switch key[0] {
	case tagInode:
		return layout.IndexAttrKey(layout.IndexRecordAttr, layout.KeyIno(key))
	case tagXattr:
		return layout.IndexXattrKey(string(key[9:]), layout.KeyIno(key))
	}
	return nil
}

// indexAttr is what the index keeps of r: what stat reports (attrOf).
func indexAttr(r *weftpb.InodeRecord) layout.IndexAttr {
	a := attrOf(0, r)
	return layout.IndexAttr{Mode: a.Mode, Uid: a.Uid, Gid: a.Gid, Nlink: a.Nlink, Size: a.Size, MtimeNs: a.MtimeNs, CtimeNs: a.CtimeNs}
}
