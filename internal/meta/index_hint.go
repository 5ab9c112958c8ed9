package meta

import (
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// absentHints spare the index a read: an entry key a txn found missing,
// under locks it holds until its batch is applied, is still missing when
// the index is derived (index.go), so its old value is known. A create
// otherwise read its new entry's key twice, and the second read, a miss
// through every level of the store, was half of what the index cost a
// create on disk. A hint lives with its batch: taken when the batch is
// applied, dropped when it is released (pebble reuses released batches).
type absentHints struct {
	mu sync.Mutex
	m  map[*pebble.Batch][][]byte
}

func (h *absentHints) add(b *pebble.Batch, key []byte) {
	if b == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[*pebble.Batch][][]byte{}
	}
	h.m[b] = append(h.m[b], key)
}

// take returns and forgets b's hints.
func (h *absentHints) take(b *pebble.Batch) [][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := h.m[b]
	delete(h.m, b)
	return keys
}

func (h *absentHints) drop(b *pebble.Batch) { h.take(b) }
