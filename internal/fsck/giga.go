package fsck

import "github.com/weftfs/weft/internal/core"

// GIGA+ placement as fsck checks it. (The key layout is internal/layout's.)

// owner is the meta server that holds ino's standalone record, in a
// cluster of n; ok is false if ino names a server the cluster does not have.
func owner(ino core.Ino, n int) (srv int, ok bool) {
	if n == 1 {
		return 0, true
	}
	return ino.Server(), ino.Server() < n
}

// partitionServer is the meta server of partition p of dir.
func partitionServer(dir core.Ino, p uint32, n int) int {
	if n == 1 {
		return 0
	}
	return core.PartitionServer(dir, p, n)
}
