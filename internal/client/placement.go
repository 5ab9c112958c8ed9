package client

import "github.com/weftfs/weft/internal/core"

// replicas returns the stores that hold chunk (ino, index), best first
// (core.Replicas: rendezvous hashing).
func replicas(ino core.Ino, index uint64, stores, r int) []int {
	return core.Replicas(ino, index, stores, r)
}
