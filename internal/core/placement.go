package core

import "sort"

// ChunkReplicas returns the stores (indexes 0..stores-1) that hold chunk
// (ino, index), best first, by rendezvous (highest random weight) hashing:
// each store scores the chunk and the r highest win. Adding or removing a
// store moves only the chunks whose winners change, and no table of
// placements is kept anywhere. The client places chunks with it and the meta
// server's reclaimer finds them with it.
func ChunkReplicas(ino Ino, index uint64, stores, r int) []int {
	type scored struct {
		store int
		score uint64
	}
	all := make([]scored, stores)
	key := mix64(uint64(ino)) ^ mix64(index+0x9e3779b97f4a7c15)
	for i := range all {
		all[i] = scored{i, mix64(key ^ mix64(uint64(i)+1))}
	}
	sort.Slice(all, func(a, b int) bool { return all[a].score > all[b].score })
	out := make([]int, min(r, stores))
	for i := range out {
		out[i] = all[i].store
	}
	return out
}

// mix64 is splitmix64's finalizer: a fixed, well-spread 64-bit mix, the same
// in every process and version (placement depends on it: never change it).
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
