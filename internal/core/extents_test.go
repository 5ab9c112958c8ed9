package core

import (
	"testing"

	"pgregory.net/rapid"
)

// TestExtentsModel checks Extents against a byte map: after any sequence of
// adds and trims, the extents hold exactly the bytes the map does, are well
// formed, and answer Overlaps as the map would.
func TestExtentsModel(t *testing.T) {
	const size = 64
	rapid.Check(t, func(t *rapid.T) {
		var e Extents
		var model [size]bool
		for range rapid.IntRange(0, 30).Draw(t, "steps") {
			a := uint64(rapid.IntRange(0, size).Draw(t, "a"))
			b := uint64(rapid.IntRange(0, size).Draw(t, "b"))
			if rapid.IntRange(0, 4).Draw(t, "op") == 0 {
				e = e.Trim(a)
				for i := a; i < size; i++ {
					model[i] = false
				}
			} else {
				e = e.Add(a, b)
				for i := a; i < b; i++ {
					model[i] = true
				}
			}
			if err := e.Check(); err != nil {
				t.Fatalf("%v: %v", e, err)
			}
			for i := range uint64(size) {
				if got := e.Overlaps(i, i+1); got != model[i] {
					t.Fatalf("%v: byte %d in extents = %v, model %v", e, i, got, model[i])
				}
			}
			lo := uint64(rapid.IntRange(0, size).Draw(t, "lo"))
			hi := uint64(rapid.IntRange(0, size).Draw(t, "hi"))
			want := false
			for i := lo; i < hi; i++ {
				want = want || model[i]
			}
			if got := e.Overlaps(lo, hi); got != want {
				t.Fatalf("%v: Overlaps(%d, %d) = %v, want %v", e, lo, hi, got, want)
			}
		}
	})
}

func TestExtentsCheckRefuses(t *testing.T) {
	for _, e := range []Extents{{1}, {2, 2}, {3, 1}, {0, 4, 4, 8}, {0, 4, 2, 8}} {
		if e.Check() == nil {
			t.Errorf("%v accepted", e)
		}
	}
	if err := (Extents{0, 4, 5, 8}).Check(); err != nil {
		t.Errorf("good extents refused: %v", err)
	}
}

func TestExtentsUnionSequential(t *testing.T) {
	var e Extents
	for i := range uint64(100) {
		s, end := ChunkExtent(i, 4<<20)
		e = e.Add(s, end)
	}
	if e.Len() != 1 || e[0] != 0 || e[1] != 100*4<<20 {
		t.Fatalf("sequential chunks gave %v, want one range", e)
	}
	e = e.Union(Extents{1 << 40, 1<<40 + 1})
	if e.Len() != 2 {
		t.Fatalf("union: %v", e)
	}
}
