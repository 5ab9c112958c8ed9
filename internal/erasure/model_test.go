package erasure_test

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"

	"github.com/weftfs/weft/internal/erasure"
)

// units is a model of what the stores hold for one file: unit index ->
// bytes (absent: the store lacks it, which reads as zeros).
type units map[uint64][]byte

func (u units) read(index uint64, off, n int) []byte {
	b := u[index]
	if off >= len(b) {
		return nil
	}
	return b[off:min(len(b), off+n)]
}

func (u units) write(index uint64, off int, p []byte) {
	b := u[index]
	if len(b) < off+len(p) {
		b = append(b, make([]byte, off+len(p)-len(b))...)
	}
	copy(b[off:], p)
	u[index] = b
}

// ecFile drives the parity-update path the client uses: a write of a range
// of one data unit reads the same range of the stripe's other data units,
// computes that range's parity, and writes the data and parity ranges; a
// shrink cuts the data (as the meta server's reclaim does) and applies
// Scheme.ShrinkTo.
type ecFile struct {
	s     erasure.Scheme
	c     *erasure.Codec
	cs    int
	u     units
	model []byte // the file's content
}

func (f *ecFile) write(t *rapid.T, off int, p []byte) {
	for len(p) > 0 {
		idx := uint64(off / f.cs)
		in := off % f.cs
		n := min(f.cs-in, len(p))
		stripe, pos := f.s.Stripe(idx)
		data := make([][]byte, f.s.K)
		for q := range f.s.K {
			if q == pos {
				data[q] = p[:n]
			} else {
				data[q] = f.u.read(f.s.DataIndex(stripe, q), in, n)
			}
		}
		parity, err := f.c.ParityRange(data, n)
		if err != nil {
			t.Fatal(err)
		}
		f.u.write(idx, in, p[:n])
		for j, pb := range parity {
			f.u.write(f.s.ParityIndex(stripe, j), in, pb)
		}
		off += n
		p = p[n:]
	}
}

func (f *ecFile) modelWrite(off int, p []byte) {
	if len(f.model) < off+len(p) {
		f.model = append(f.model, make([]byte, off+len(p)-len(f.model))...)
	}
	copy(f.model[off:], p)
}

func (f *ecFile) shrink(t *rapid.T, size int) {
	if size >= len(f.model) {
		return
	}
	f.model = f.model[:size]
	// The meta server's reclaim: data chunks past the end go, the one
	// holding it is cut; parity units stay (0 < from < ParityBase).
	count := uint64((size + f.cs - 1) / f.cs)
	for idx := range f.u {
		if !erasure.IsParity(idx) && idx >= count {
			delete(f.u, idx)
		}
	}
	if size%f.cs != 0 {
		tail := uint64(size / f.cs)
		if b := f.u[tail]; len(b) > size%f.cs {
			f.u[tail] = b[:size%f.cs]
		}
	}
	sh := f.s.ShrinkTo(uint64(size), int64(f.cs))
	if sh.Rewrite {
		data := make([][]byte, f.s.K)
		for q := range f.s.K {
			data[q] = f.u.read(f.s.DataIndex(sh.Stripe, q), 0, f.cs)
		}
		parity, err := f.c.ParityRange(data, f.cs)
		if err != nil {
			t.Fatal(err)
		}
		for j, pb := range parity {
			f.u[f.s.ParityIndex(sh.Stripe, j)] = pb
		}
	}
	for idx := range f.u {
		if idx >= sh.DropFrom {
			delete(f.u, idx)
		}
	}
}

// check: every stripe's parity is that of its data, and losing any m units
// of a stripe still gives back every byte of the file.
func (f *ecFile) check(t *rapid.T) {
	stripes := (len(f.model) + f.cs*f.s.K - 1) / (f.cs * f.s.K)
	for idx := range f.u {
		if st, _ := f.s.Unit(idx); int(st) >= stripes {
			t.Fatalf("unit %d of stripe %d is left past the file's %d stripes", idx, st, stripes)
		}
	}
	for st := range uint64(stripes) {
		all := make([][]byte, f.s.Width())
		for p := range all {
			all[p] = f.u.read(f.s.UnitIndex(st, p), 0, f.cs)
		}
		if ok, err := f.c.Verify(all, f.cs); err != nil || !ok {
			t.Fatalf("stripe %d: parity does not match the data (%v)", st, err)
		}
		lost := rapid.SliceOfNDistinct(rapid.IntRange(0, f.s.Width()-1), f.s.M, f.s.M, rapid.ID[int]).Draw(t, "lost")
		got := make([][]byte, f.s.Width())
		for p := range got {
			got[p] = f.u.read(f.s.UnitIndex(st, p), 0, f.cs)
			if got[p] == nil {
				got[p] = []byte{} // known: a hole
			}
		}
		for _, p := range lost {
			got[p] = nil
		}
		if err := f.c.Reconstruct(got, f.cs); err != nil {
			t.Fatalf("stripe %d, lost %v: %v", st, lost, err)
		}
		for p := range f.s.K {
			lo := (int(st)*f.s.K + p) * f.cs
			want := make([]byte, f.cs)
			if lo < len(f.model) {
				copy(want, f.model[lo:min(len(f.model), lo+f.cs)])
			}
			if !bytes.Equal(got[p], want) {
				t.Fatalf("stripe %d unit %d rebuilt (lost %v) differs from the file", st, p, lost)
			}
		}
	}
}

// TestParityUpdateModel runs random partial writes, holes (writes past the
// end) and truncates through the parity-update path and checks, after each,
// that parity matches data and any m lost units rebuild the file's bytes.
func TestParityUpdateModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genScheme(t)
		c, err := erasure.NewCodec(s)
		if err != nil {
			t.Fatal(err)
		}
		f := &ecFile{s: s, c: c, cs: rapid.SampledFrom([]int{8, 16, 64}).Draw(t, "chunk"), u: units{}}
		limit := f.cs * s.K * 4
		for range rapid.IntRange(1, 30).Draw(t, "ops") {
			if rapid.IntRange(0, 3).Draw(t, "op") == 0 {
				size := rapid.IntRange(0, len(f.model)).Draw(t, "size")
				f.shrink(t, size)
			} else {
				off := rapid.IntRange(0, limit).Draw(t, "off")
				p := rapid.SliceOfN(rapid.Byte(), 1, 3*f.cs).Draw(t, "data")
				f.write(t, off, p)
				f.modelWrite(off, p)
			}
			f.check(t)
		}
	})
}

// TestReconstructTooFew: with more than m units unknown, reconstruction
// fails rather than inventing bytes.
func TestReconstructTooFew(t *testing.T) {
	c, err := erasure.NewCodec(erasure.Scheme{K: 4, M: 1})
	if err != nil {
		t.Fatal(err)
	}
	units := [][]byte{[]byte("a"), nil, []byte("c"), nil, []byte("p")}
	if err := c.Reconstruct(units, 1); err == nil {
		t.Fatal("rebuilt a stripe with 2 of 5 units unknown under 4+1")
	}
}
