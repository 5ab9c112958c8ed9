package client

import (
	"bytes"
	"testing"
)

// TestChunkCacheLRUAndChecks: the least recently used chunk goes first,
// another version misses, and a chunk whose bytes changed in memory is
// dropped, never served.
func TestChunkCacheLRUAndChecks(t *testing.T) {
	cc := newChunkCache(3000)
	v := cacheVersion{size: 5000, mtimeNs: 1, ctimeNs: 2}
	chunk := func(i byte) []byte { return bytes.Repeat([]byte{i}, 1000) }
	for i := range 3 {
		cc.put(chunkKey{7, uint64(i)}, v, chunk(byte(i)))
	}
	if _, ok := cc.get(chunkKey{7, 0}, v); !ok { // 0 is now the most recent
		t.Fatal("chunk 0 missing")
	}
	cc.put(chunkKey{7, 3}, v, chunk(3))
	if _, ok := cc.get(chunkKey{7, 1}, v); ok {
		t.Fatal("chunk 1, the least recently used, stayed past the bound")
	}
	for _, i := range []uint64{0, 2, 3} {
		got, ok := cc.get(chunkKey{7, i}, v)
		if !ok || !bytes.Equal(got, chunk(byte(i))) {
			t.Fatalf("chunk %d: ok %v, right bytes %v", i, ok, bytes.Equal(got, chunk(byte(i))))
		}
	}
	if cc.mu.used != 3000 {
		t.Fatalf("used %d bytes; want 3000", cc.mu.used)
	}

	newer := v
	newer.ctimeNs++
	if _, ok := cc.get(chunkKey{7, 0}, newer); ok {
		t.Fatal("a chunk of another version was served")
	}

	got, _ := cc.get(chunkKey{7, 2}, v)
	got[10] ^= 1 // what a use after a buffer's reuse would do
	if _, ok := cc.get(chunkKey{7, 2}, v); ok {
		t.Fatal("a chunk whose bytes changed in the cache was served")
	}
	if cc.mu.corrupt != 1 {
		t.Fatalf("corrupt count %d; want 1", cc.mu.corrupt)
	}

	cc.put(chunkKey{7, 9}, v, make([]byte, 3001))
	if _, ok := cc.get(chunkKey{7, 9}, v); ok {
		t.Fatal("a chunk larger than the whole cache was kept")
	}
}
