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

// searchIndexVersion is the version of the index's layout the marker holds:
// a store marked with another is rebuilt at Open (2 added the
// by-reversed-name keys).
const searchIndexVersion = 2

// index adds the search index's changes to b, unless the server runs
// without it (Config.NoSearchIndex).
func (s *Server) index(b *pebble.Batch) error {
	if s.cfg.NoSearchIndex {
		return nil
	}
	return indexBatch(s.db, b, s.hints.take(b))
}

// openIndex makes the index match the store at Open: rebuilt if the store
// has none (made by an older weft, or run without the index), dropped and
// unmarked if the server runs without it. It writes no range tombstones:
// pebble collects statistics on each in the background, which failed opens
// on a full disk then raced with.
func (s *Server) openIndex() error {
	const op = "meta open: search index"
	v, found, err := getValue(s.db, keyIndexVersion)
	if err != nil {
		return err
	}
	current := found && len(v) == 1 && v[0] == searchIndexVersion
	switch {
	case s.cfg.NoSearchIndex && !found, !s.cfg.NoSearchIndex && current:
		return nil
	case !s.cfg.NoSearchIndex && s.created:
		// A new store's batches were indexed from the first one.
		return s.commit(op, s.markIndex(s.db.NewBatch()), true)
	}
	b := s.db.NewBatch()
	start, end := layout.TagRange(layout.TagIndex)
	if b, err = s.eachKey(b, start, end, func(b *pebble.Batch, k, _ []byte) { b.Delete(k, nil) }); err != nil {
		s.release(b)
		return err
	}
	if s.cfg.NoSearchIndex {
		b.Delete(keyIndexVersion, nil)
		defer s.release(b)
		return s.gated(op, func() error { return b.Commit(pebble.Sync) })
	}
	s.log.Info("meta: building the search index")
	var kv []indexKV
	for _, tag := range []byte{tagEntry, tagInode, tagXattr} {
		lo, hi := layout.TagRange(tag)
		b, err = s.eachKey(b, lo, hi, func(b *pebble.Batch, k, v []byte) {
			if !indexedTag(k) {
				return
			}
			kv = indexKeysOf(kv[:0], k, v)
			for _, x := range kv {
				b.Set(x.k, x.v, nil)
			}
		})
		if err != nil {
			s.release(b)
			return err
		}
	}
	defer s.release(b)
	return s.gated(op, func() error { return s.markIndex(b).Commit(pebble.Sync) })
}

// markIndex adds the index's marker to b.
func (s *Server) markIndex(b *pebble.Batch) *pebble.Batch {
	b.Set(keyIndexVersion, []byte{searchIndexVersion}, nil)
	return b
}

// eachKey calls fn with b for every key in [lo, hi), committing b and
// going on with a new batch every few thousand writes; it returns the
// batch to go on with. Nothing else writes while Open runs.
func (s *Server) eachKey(b *pebble.Batch, lo, hi []byte, fn func(b *pebble.Batch, k, v []byte)) (*pebble.Batch, error) {
	const op = "meta open: search index"
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return b, errs.Wrap(errs.IO, op, "", err)
	}
	for it.First(); it.Valid(); it.Next() {
		fn(b, slices.Clone(it.Key()), slices.Clone(it.Value()))
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
