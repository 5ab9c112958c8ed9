package erasure_test

import (
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/erasure"
)

func genScheme(t *rapid.T) erasure.Scheme {
	return erasure.Scheme{K: rapid.IntRange(1, 8).Draw(t, "k"), M: rapid.IntRange(1, 3).Draw(t, "m")}
}

// TestLayoutProperties: a stripe's units are on distinct stores, every unit
// index maps back to its stripe and position, parity indexes are above
// every data index, and consecutive chunks fill stripes in order.
func TestLayoutProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genScheme(t)
		stores := rapid.IntRange(s.Width(), s.Width()+6).Draw(t, "stores")
		ino := core.Ino(rapid.Uint64().Draw(t, "ino"))
		index := rapid.Uint64Range(0, 1<<34).Draw(t, "index")

		stripe, pos := s.Stripe(index)
		if pos < 0 || pos >= s.K || s.DataIndex(stripe, pos) != index {
			t.Fatalf("chunk %d: stripe %d pos %d does not map back", index, stripe, pos)
		}
		set := s.Stores(ino, stripe, stores)
		if len(set) != s.Width() {
			t.Fatalf("stripe has %d stores, want %d", len(set), s.Width())
		}
		seen := map[int]bool{}
		for _, st := range set {
			if st < 0 || st >= stores || seen[st] {
				t.Fatalf("stores %v: not %d distinct stores of %d", set, s.Width(), stores)
			}
			seen[st] = true
		}
		for p := range s.Width() {
			u := s.UnitIndex(stripe, p)
			if erasure.IsParity(u) != (p >= s.K) {
				t.Fatalf("unit %d of stripe %d: index %d parity=%v", p, stripe, u, erasure.IsParity(u))
			}
			if st, pp := s.Unit(u); st != stripe || pp != p {
				t.Fatalf("unit index %d maps to (%d, %d), want (%d, %d)", u, st, pp, stripe, p)
			}
			if s.StoreOf(ino, u, stores) != set[p] {
				t.Fatalf("StoreOf disagrees with Stores for position %d", p)
			}
		}
		// Parity indexes grow with the stripe, so "drop from
		// ParityIndex(s, 0)" drops exactly the stripes from s on.
		if s.ParityIndex(stripe+1, 0) <= s.ParityIndex(stripe, s.M-1) {
			t.Fatalf("parity indexes do not grow with the stripe")
		}
		// A stale mark sits between its stripe's parity and the next
		// stripe's, on its parity unit's store, and is no unit.
		for j := range s.M {
			m := s.MarkIndex(stripe, j)
			if !s.IsMark(m) || s.IsMark(s.ParityIndex(stripe, j)) || m <= s.ParityIndex(stripe, s.M-1) || m >= s.ParityIndex(stripe+1, 0) {
				t.Fatalf("mark %d of stripe %d at index %d: out of place", j, stripe, m)
			}
			if st, pp := s.Unit(m); st != stripe || pp != s.K+j {
				t.Fatalf("mark index %d maps to (%d, %d), want (%d, %d)", m, st, pp, stripe, s.K+j)
			}
		}
	})
}

func TestParseScheme(t *testing.T) {
	for _, bad := range []string{"", "4", "4+", "+1", "a+b", "0+1", "4+0", "4+-1", "99+1"} {
		if _, err := erasure.ParseScheme(bad); err == nil {
			t.Errorf("ParseScheme(%q) accepted", bad)
		}
	}
	s, err := erasure.ParseScheme("4+1")
	if err != nil || s != (erasure.Scheme{K: 4, M: 1}) {
		t.Fatalf("ParseScheme(4+1) = %v, %v", s, err)
	}
	if err := s.Validate(4); err == nil {
		t.Fatalf("4+1 on 4 stores accepted")
	}
	if err := s.Validate(5); err != nil {
		t.Fatalf("4+1 on 5 stores: %v", err)
	}
}

// TestPlacedStores: the layout code of a scheme names the unit's one store;
// a replica count names the replicas, as before.
func TestPlacedStores(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genScheme(t)
		stores := rapid.IntRange(s.Width(), s.Width()+4).Draw(t, "stores")
		ino := core.Ino(rapid.Uint64().Draw(t, "ino"))
		index := rapid.Uint64Range(0, 1<<34).Draw(t, "index")
		got := erasure.PlacedStores(ino, index, stores, s.Code())
		if len(got) != 1 || got[0] != s.StoreOf(ino, index, stores) {
			t.Fatalf("PlacedStores(%s) = %v, want [%d]", s, got, s.StoreOf(ino, index, stores))
		}
		r := rapid.IntRange(1, stores).Draw(t, "r")
		want := core.ChunkReplicas(ino, index, stores, r)
		if got := erasure.PlacedStores(ino, index, stores, uint32(r)); !slices.Equal(got, want) {
			t.Fatalf("PlacedStores(replicas %d) = %v, want %v", r, got, want)
		}
	})
}

// TestParityRangeHoles: parity computed with holes (nil or empty units,
// coded unit by unit) equals parity computed with the holes as zeros.
func TestParityRangeHoles(t *testing.T) {
	for _, s := range []erasure.Scheme{{K: 4, M: 1}, {K: 3, M: 2}} {
		codec, err := erasure.NewCodec(s)
		if err != nil {
			t.Fatal(err)
		}
		const n = 1000
		with, without := make([][]byte, s.K), make([][]byte, s.K)
		for p := range s.K {
			without[p] = make([]byte, n)
			if p%2 == 1 {
				continue // a hole
			}
			with[p] = make([]byte, n-p*10) // short: zeros past its end
			for i := range with[p] {
				with[p][i] = byte(i*p + 7)
			}
			copy(without[p], with[p])
		}
		a, err1 := codec.ParityRange(with, n)
		b, err2 := codec.ParityRange(without, n)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		for j := range a {
			if string(a[j]) != string(b[j]) {
				t.Fatalf("%s: parity %d differs with holes", s, j)
			}
		}
	}
}
