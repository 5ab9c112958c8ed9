package meta

import (
	"bytes"
	"errors"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
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
//
// known holds the old values of keys the batch's txn read under the locks
// it still holds: they need not be read again.
func indexBatch(db *pebble.DB, b *pebble.Batch, known oldValues) error {
	var writes kvSet
	if err := batchFinal(db, b, &writes); err != nil || len(writes.list) == 0 {
		return err
	}
	var olds, news kvSet
	var kv []indexKV
	for _, w := range writes.list {
		if derived := indexKeyOfRecordKey(w.k); derived != nil {
			// The record's only index key follows from its own key: no
			// need to read what it held.
			olds.put(derived, nil)
		} else {
			old, found, err := oldValue(db, known, w.k)
			if err != nil {
				return err
			}
			if found && w.v != nil && bytes.Equal(old, w.v) {
				continue
			}
			if found {
				for _, x := range indexKeysOf(kv[:0], w.k, old) {
					olds.put(x.k, x.v)
				}
			}
		}
		for _, x := range indexKeysOf(kv[:0], w.k, w.v) {
			news.put(x.k, x.v)
		}
	}
	for _, o := range olds.list {
		if news.find(o.k) < 0 {
			b.Delete(o.k, nil)
		}
	}
	for _, n := range news.list {
		if i := olds.find(n.k); i < 0 || olds.list[i].v == nil || !bytes.Equal(olds.list[i].v, n.v) {
			b.Set(n.k, n.v, nil)
		}
	}
	return nil
}

// oldValue is what key holds in db before the batch: known from the txn's
// read, or read now.
func oldValue(db *pebble.DB, known oldValues, key []byte) (old []byte, found bool, err error) {
	if old, found, ok := known.get(key); ok {
		return old, found, nil
	}
	return getValue(db, key)
}

// kvSet is a small ordered map of keys to values: a list, indexed by a
// map only once it is long (most batches write two or three records).
type kvSet struct {
	list []indexKV
	pos  map[string]int
}

func (s *kvSet) find(k []byte) int {
	if s.pos != nil {
		if i, ok := s.pos[string(k)]; ok {
			return i
		}
		return -1
	}
	for i, x := range s.list {
		if bytes.Equal(x.k, k) {
			return i
		}
	}
	return -1
}

// put sets k's value (nil: deleted, for the batch's records; unknown, for
// old index keys).
func (s *kvSet) put(k, v []byte) {
	if i := s.find(k); i >= 0 {
		s.list[i].v = v
		return
	}
	s.list = append(s.list, indexKV{k, v})
	switch {
	case s.pos != nil:
		s.pos[string(k)] = len(s.list) - 1
	case len(s.list) > 16:
		s.pos = make(map[string]int, 2*len(s.list))
		for i, x := range s.list {
			s.pos[string(x.k)] = i
		}
	}
}

// batchFinal collects into w what b leaves at each indexed key it writes:
// the value it sets, or nil for a delete (a range delete deletes every
// indexed key in its range, in the store or set earlier in b). Keys and
// values alias b, which indexBatch extends only once it is done with them.
func batchFinal(db *pebble.DB, b *pebble.Batch, w *kvSet) error {
	r := b.Reader()
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			return errs.Wrap(errs.Corrupt, "index", "batch", err)
		}
		if !ok {
			return nil
		}
		switch kind {
		case pebble.InternalKeyKindSet:
			if indexedTag(k) {
				if v == nil {
					v = []byte{} // an empty value (an xattr's) is not a delete
				}
				w.put(k[:len(k):len(k)], v[:len(v):len(v)])
			}
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete:
			if indexedTag(k) {
				w.put(k[:len(k):len(k)], nil)
			}
		case pebble.InternalKeyKindRangeDelete:
			for i, x := range w.list {
				if bytes.Compare(x.k, k) >= 0 && bytes.Compare(x.k, v) < 0 {
					w.list[i].v = nil
				}
			}
			keys, err := indexedKeysIn(db, k, v)
			if err != nil {
				return err
			}
			for _, key := range keys {
				w.put(key, nil)
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
		if !ok {
			return kv
		}
		ino, mode, r, hasAttr, ok := decodeIndexEntry(v)
		if !ok {
			return kv
		}
		ref := layout.IndexRefValue(ino, mode)
		kv = append(kv, indexKV{layout.IndexNameKey(name, dir), ref}, indexKV{layout.IndexReversedKey(name, dir), ref})
		if !hasAttr {
			return append(kv, indexKV{layout.IndexPointerKey(dir, name), ref})
		}
		a := r.finish()
		a.Dir, a.Name = dir, name
		return append(kv, indexKV{layout.IndexAttrKey(layout.IndexEntryAttr, ino), a.Encode(layout.IndexEntryAttr)})
	case tagInode:
		var r indexRecord
		if !decodeIndexRecord(v, &r) || r.stub {
			return kv
		}
		a := r.finish()
		if core.IsDir(a.Mode) {
			a.Parent, a.Split = r.parent, isSplitBitmap(r.bitmap)
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
