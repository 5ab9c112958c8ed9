package patchgroup

import (
	"context"
	"slices"
	"testing"

	"github.com/weftfs/weft/internal/core"
)

// recorder is a Syncer that logs what it was asked to make durable.
type recorder struct{ synced [][]core.Ino }

func (r *recorder) SyncChanges(_ context.Context, ch Changes) error {
	inos := slices.Clone(ch.Inos)
	slices.Sort(inos)
	r.synced = append(r.synced, inos)
	return nil
}

// TestBarrierOrder: the barrier makes dependencies durable before the
// dependent's change, deepest first, each once.
func TestBarrierOrder(t *testing.T) {
	r := &recorder{}
	a, b, c := New(1, r), New(2, r), New(3, r)
	NoteData([]*Group{a}, 10)
	NoteData([]*Group{b}, 20)
	if err := b.DependOn(a); err != nil {
		t.Fatal(err)
	}
	if err := c.DependOn(b); err != nil {
		t.Fatal(err)
	}
	if err := Barrier(context.Background(), []*Group{c}); err != nil {
		t.Fatal(err)
	}
	want := [][]core.Ino{{10}, {20}}
	if !slices.EqualFunc(r.synced, want, slices.Equal) {
		t.Fatalf("synced %v, want %v (a before b)", r.synced, want)
	}
	// Nothing new: a second barrier syncs nothing.
	if err := Barrier(context.Background(), []*Group{c}); err != nil {
		t.Fatal(err)
	}
	if len(r.synced) != 2 {
		t.Fatalf("a second barrier synced again: %v", r.synced)
	}
	// c's own changes wait for its Sync, not for its barrier.
	NoteMeta([]*Group{c}, 1)
	if err := c.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(r.synced) != 3 {
		t.Fatalf("c.Sync did not sync c: %v", r.synced)
	}
}
