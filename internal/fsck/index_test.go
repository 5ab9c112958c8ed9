package fsck

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weftfs/weft/internal/layout"
)

// TestIndexDamageFoundAndRebuilt: a stopped meta server whose search index
// lost a key and holds one no record implies is reported; --repair drops
// the index, and the server rebuilds it when it starts.
func TestIndexDamageFoundAndRebuilt(t *testing.T) {
	tc, _ := newTree(t)
	if n := kinds(tc.check(false))[KindIndex]; n != 0 {
		t.Fatalf("clean cluster: %d index findings", n)
	}
	// Damage the index as no weft code path can: raw writes to the store.
	db, err := pebble.Open(tc.cfg.Meta[0].Dir, &pebble.Options{
		Merger: &pebble.Merger{Name: "weft.counter.v1", Merge: newCounterSum},
		Logger: quietLogger{},
	})
	if err != nil {
		t.Fatal(err)
	}
	start, end := layout.TagRange(layout.TagIndex)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() {
		t.Fatal("meta 0 has no index keys")
	}
	victim := append([]byte(nil), it.Key()...)
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.Delete(victim, nil)
	b.Set(layout.IndexXattrKey("user.ghost", 12345), nil, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	r := tc.check(false)
	if kinds(r)[KindIndex] != 1 {
		t.Fatalf("damaged index not reported:\n%s", describe(r))
	}
	r = tc.check(true)
	if kinds(r)[KindIndex] != 1 || !r.Findings[0].Repaired {
		t.Fatalf("repair:\n%s", describe(r))
	}
	tc.start()
	tc.stop()
	if r := tc.check(false); kinds(r)[KindIndex] != 0 {
		t.Fatalf("after the rebuild:\n%s", describe(r))
	}
}
