package meta

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestPlanSplit checks the partitions a split makes: the binary splits of
// GIGA+ done bits levels deep, never onto a partition number at or past the
// server count.
func TestPlanSplit(t *testing.T) {
	for _, c := range []struct {
		p, r    uint32
		bits, n int
		want    []splitPart
	}{
		{0, 0, 1, 8, []splitPart{{0, 1}, {1, 1}}},
		{0, 0, 3, 8, []splitPart{{0, 3}, {1, 3}, {2, 3}, {3, 3}, {4, 3}, {5, 3}, {6, 3}, {7, 3}}},
		// Six servers: partitions 2 and 3 cannot split again (6 and 7
		// would be past the last server).
		{0, 0, 3, 6, []splitPart{{0, 3}, {1, 3}, {2, 2}, {3, 2}, {4, 3}, {5, 3}}},
		{1, 1, 3, 8, []splitPart{{1, 3}, {3, 3}, {5, 3}, {7, 3}}},
		{0, 0, 6, 3, []splitPart{{0, 2}, {1, 1}, {2, 2}}},
	} {
		got := planSplit(c.p, c.r, c.bits, c.n)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("planSplit(%d, %d, %d bits, %d servers) = %v, want %v", c.p, c.r, c.bits, c.n, got, c.want)
		}
	}

	// Whatever the plan, every hash of the split partition lands in exactly
	// one of its parts, and every part is on a server of its own.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := 2 + rng.IntN(63)
		r := uint32(rng.IntN(4))
		p := uint32(rng.IntN(1 << r))
		if uint64(p)+1<<r >= uint64(n) {
			continue // this partition would not split
		}
		parts := planSplit(p, r, 1+rng.IntN(maxSplitBits), n)
		if parts[0].p != p || len(parts) < 2 {
			t.Fatalf("plan of partition %d: %v", p, parts)
		}
		seen := map[uint32]bool{}
		for _, pt := range parts {
			if seen[pt.p] || int(pt.p) >= n {
				t.Fatalf("plan of partition %d among %d servers: %v", p, n, parts)
			}
			seen[pt.p] = true
		}
		for range 100 {
			h := rng.Uint64()&^(1<<r-1) | uint64(p)
			holders := 0
			for _, pt := range parts {
				if uint32(h&(1<<pt.radix-1)) == pt.p {
					holders++
				}
			}
			if holders != 1 {
				t.Fatalf("hash %x of partition %d is held by %d parts of %v", h, p, holders, parts)
			}
		}
	}
}
