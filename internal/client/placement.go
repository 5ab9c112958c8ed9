package client

import "github.com/weftfs/weft/internal/core"

// replicas returns the stores that hold chunk (ino, index), best first
// (core.ChunkReplicas: the meta server's reclaimer finds chunks the same way).
func replicas(ino core.Ino, index uint64, stores, r int) []int {
	return core.ChunkReplicas(ino, index, stores, r)
}
