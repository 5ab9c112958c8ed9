package meta

import (
	"errors"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
)

// keyIndexVersion marks a store whose search index is complete: it is
// written after a rebuild and deleted when a server runs without the index,
// so that a store opened again with it rebuilds what it missed.
var keyIndexVersion = []byte(layout.KeySearchIndex)

// searchIndexVersion is the version of the index's layout the marker holds.
const searchIndexVersion = 1

// index adds the search index's changes to b, unless the server runs
// without it (Config.NoSearchIndex).
func (s *Server) index(b *pebble.Batch) error {
	if s.cfg.NoSearchIndex {
		return nil
	}
	return indexBatch(s.db, b)
}

// openIndex makes the index match the store at Open: rebuilt if the store
// has none (made by an older weft, or run without the index), dropped and
// unmarked if the server runs without it.
func (s *Server) openIndex() error {
	const op = "meta open: search index"
	v, found, err := getValue(s.db, keyIndexVersion)
	if err != nil {
		return err
	}
	start, end := layout.TagRange(layout.TagIndex)
	if s.cfg.NoSearchIndex {
		if !found {
			return nil
		}
		b := s.db.NewBatch()
		defer s.release(b)
		b.DeleteRange(start, end, nil)
		b.Delete(keyIndexVersion, nil)
		return s.gated(op, func() error { return b.Commit(pebble.Sync) })
	}
	if found && len(v) == 1 && v[0] == searchIndexVersion {
		return nil
	}
	b := s.db.NewBatch()
	// A range tombstone only if there is something to drop: pebble
	// collects statistics on every one in the background.
	stale, err := s.anyKeyIn(start, end)
	if err != nil {
		s.release(b)
		return err
	}
	if stale {
		b.DeleteRange(start, end, nil)
	}
	for _, tag := range []byte{tagEntry, tagInode, tagXattr} {
		lo, hi := layout.TagRange(tag)
		if b, err = s.indexRange(b, lo, hi); err != nil {
			s.release(b)
			return err
		}
	}
	b.Set(keyIndexVersion, []byte{searchIndexVersion}, nil)
	defer s.release(b)
	return s.gated(op, func() error { return b.Commit(pebble.Sync) })
}

// indexRange writes the index keys of every record in [lo, hi) into b,
// committing and starting a new batch every few thousand keys; it returns
// the batch to go on with. Nothing else writes while Open runs.
func (s *Server) indexRange(b *pebble.Batch, lo, hi []byte) (*pebble.Batch, error) {
	const op = "meta open: search index"
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return b, errs.Wrap(errs.IO, op, "", err)
	}
	var kv []indexKV
	for it.First(); it.Valid(); it.Next() {
		if !indexedTag(it.Key()) {
			continue
		}
		kv = indexKeysOf(kv[:0], slices.Clone(it.Key()), slices.Clone(it.Value()))
		for _, x := range kv {
			b.Set(x.k, x.v, nil)
		}
		if b.Count() >= 4096 {
			if err := s.gated(op, func() error { return b.Commit(pebble.NoSync) }); err != nil {
				return b, errors.Join(err, it.Close())
			}
			s.release(b)
			b = s.db.NewBatch()
		}
	}
	return b, errs.Wrap(errs.IO, op, "", errors.Join(it.Error(), it.Close()))
}

// anyKeyIn reports whether the store has a key in [lo, hi).
func (s *Server) anyKeyIn(lo, hi []byte) (bool, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return false, errs.Wrap(errs.IO, "meta open: search index", "", err)
	}
	found := it.First()
	return found, errs.Wrap(errs.IO, "meta open: search index", "", errors.Join(it.Error(), it.Close()))
}
