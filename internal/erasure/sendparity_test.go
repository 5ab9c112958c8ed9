package erasure_test

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"

	"github.com/weftfs/weft/internal/erasure"
)

// TestSendParityMatchesParityRange: for any mix of holes, short units and
// full ones, SendParity's parity is ParityRange's (a full encode with the
// holes as zeros), though its buffers come dirty from alloc, and it never
// changes the data units.
func TestSendParityMatchesParityRange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.SampledFrom([]erasure.Scheme{{K: 4, M: 1}, {K: 3, M: 2}, {K: 2, M: 1}}).Draw(t, "scheme")
		codec, err := erasure.NewCodec(s)
		if err != nil {
			t.Fatal(err)
		}
		n := rapid.IntRange(0, 300).Draw(t, "n")
		data := make([][]byte, s.K)
		for p := range data {
			switch rapid.IntRange(0, 2).Draw(t, "shape") {
			case 0: // a hole
			case 1: // short, possibly empty
				data[p] = rapid.SliceOfN(rapid.Byte(), 0, n).Draw(t, "short")
			default: // full, possibly longer than the range
				data[p] = rapid.SliceOfN(rapid.Byte(), n, n+20).Draw(t, "full")
			}
		}
		before := make([][]byte, len(data))
		for p, d := range data {
			before[p] = bytes.Clone(d)
		}
		want, err := codec.ParityRange(data, n)
		if err != nil {
			t.Fatal(err)
		}
		alloc := func(k int) []byte { return bytes.Repeat([]byte{0xA5}, k+5) } // dirty and too long
		got, made, err := codec.SendParity(data, n, alloc)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != s.M || len(made) != s.M {
			t.Fatalf("%d parity units, %d made; want %d", len(got), len(made), s.M)
		}
		for j := range want {
			if !bytes.Equal(got[j], want[j]) {
				t.Fatalf("%s n=%d: parity %d = %x, want %x", s, n, j, got[j], want[j])
			}
		}
		for p := range data {
			if !bytes.Equal(data[p], before[p]) {
				t.Fatalf("data unit %d changed", p)
			}
		}
	})
}
