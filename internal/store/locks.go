package store

import "sync"

const (
	inoStripes   = 64
	chunkStripes = 256
)

// lockTable serializes changes of one chunk while letting operations on
// different chunks proceed in parallel. Locks are striped: two chunks that
// share a stripe wait for each other, which costs a little parallelism and
// no memory per chunk. Order: ino stripe, then chunk stripe.
type lockTable struct {
	inos   [inoStripes]sync.RWMutex
	chunks [chunkStripes]sync.RWMutex
}

// mix is a 64-bit finalizer (splitmix64): inode numbers carry the meta
// server's id in their high bits and small sequences in their low bits.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func lockRW(mu *sync.RWMutex, write bool) func() {
	if write {
		mu.Lock()
		return mu.Unlock
	}
	mu.RLock()
	return mu.RUnlock
}

// lockIno locks ino's stripe: exclusively for DeleteChunks.
func (t *lockTable) lockIno(ino uint64, write bool) func() {
	return lockRW(&t.inos[mix(ino)%inoStripes], write)
}

// lockChunk locks k's inode stripe shared and k's chunk stripe, exclusively
// to change the chunk.
func (t *lockTable) lockChunk(k ChunkKey, write bool) func() {
	unlockIno := t.lockIno(k.Ino, false)
	unlockChunk := lockRW(&t.chunks[mix(k.Ino^mix(k.Index))%chunkStripes], write)
	return func() {
		unlockChunk()
		unlockIno()
	}
}
