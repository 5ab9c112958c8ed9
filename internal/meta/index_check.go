package meta

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
)

// indexProblemsMax bounds the problems one check reports.
const indexProblemsMax = 100

// CheckIndex compares the stopped store's search index with the index its
// records imply, and describes each difference (at most 100); none means
// they agree. A store without the index's marker has none to check.
func (o *Offline) CheckIndex() ([]string, error) { return checkIndexDB(o.db) }

// checkIndexDB is CheckIndex on db. It holds everything the records imply
// in memory: a check for tests and stopped stores, not a server's work.
func checkIndexDB(db *pebble.DB) ([]string, error) {
	if _, found, err := getValue(db, keyIndexVersion); err != nil || !found {
		return nil, err
	}
	want := map[string][]byte{}
	var kv []indexKV
	it, err := db.NewIter(&pebble.IterOptions{})
	if err != nil {
		return nil, errs.Wrap(errs.IO, "check index", "", err)
	}
	have := map[string][]byte{}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		switch {
		case len(k) > 0 && k[0] == layout.TagIndex:
			have[string(k)] = slices.Clone(it.Value())
		case indexedTag(k):
			kv = indexKeysOf(kv[:0], slices.Clone(k), slices.Clone(it.Value()))
			for _, x := range kv {
				want[string(x.k)] = x.v
			}
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, errs.Wrap(errs.IO, "check index", "", err)
	}
	var problems []string
	for k, v := range want {
		hv, ok := have[k]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("index key %q missing", k))
		case !bytes.Equal(hv, v):
			problems = append(problems, fmt.Sprintf("index key %q holds %x, the records say %x", k, hv, v))
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			problems = append(problems, fmt.Sprintf("index key %q has no record", k))
		}
	}
	sort.Strings(problems)
	return problems[:min(len(problems), indexProblemsMax)], nil
}

// DropIndex deletes the stopped store's search index and its marker: the
// server rebuilds it from the records when it opens next.
func (o *Offline) DropIndex() error {
	start, end := layout.TagRange(layout.TagIndex)
	b := o.db.NewBatch()
	defer b.Close()
	it, err := o.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return errs.Wrap(errs.IO, "drop search index", o.dir, err)
	}
	for it.First(); it.Valid(); it.Next() {
		b.Delete(slices.Clone(it.Key()), nil)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return errs.Wrap(errs.IO, "drop search index", o.dir, err)
	}
	b.Delete(keyIndexVersion, nil)
	return errs.Wrap(errs.IO, "drop search index", o.dir, b.Commit(pebble.Sync))
}
