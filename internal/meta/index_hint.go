package meta

import (
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// readHints spare the index a read: an entry key a txn read, under locks it
// holds until its batch is applied, still holds what the txn found when
// the index is derived (index.go), so its old value is known. A create
// otherwise read its new entry's key twice, and the second read, a miss
// through every level of the store, was half of what the index cost a
// create on disk; an unlink read the entry it removes twice too. A hint
// lives with its batch: taken when the batch is applied, dropped when it
// is released (pebble reuses released batches).
type readHints struct {
	mu sync.Mutex
	m  map[*pebble.Batch]oldValues
}

// oldValues are the values keys held before a batch, as its txn read them:
// by key, nil for a key it found missing. A map, not a list: a written-back
// batch of a thousand creates looked each of its keys up in all the others.
type oldValues map[string][]byte

// get returns the old value of key, and whether it is known.
func (o oldValues) get(key []byte) (old []byte, found, known bool) {
	old, known = o[string(key)]
	return old, old != nil, known
}

// add records what key held when b's txn read it: v if found, else
// nothing. v must not change afterwards (getValue returns a copy).
func (h *readHints) add(b *pebble.Batch, key, v []byte, found bool) {
	if b == nil {
		return
	}
	switch {
	case !found:
		v = nil
	case v == nil:
		v = []byte{} // found, empty: not missing
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[*pebble.Batch]oldValues{}
	}
	o := h.m[b]
	if o == nil {
		o = oldValues{}
		h.m[b] = o
	}
	o[string(key)] = v
}

// take returns and forgets b's hints.
func (h *readHints) take(b *pebble.Batch) oldValues {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := h.m[b]
	delete(h.m, b)
	return o
}

func (h *readHints) drop(b *pebble.Batch) { h.take(b) }
