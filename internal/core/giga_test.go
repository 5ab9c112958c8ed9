package core

import (
	"bytes"
	"testing"
)

func TestBitmapRadix(t *testing.T) {
	for _, c := range []struct {
		parts []uint32
		want  int
	}{{nil, 0}, {[]uint32{0}, 0}, {[]uint32{0, 1}, 1}, {[]uint32{0, 1, 2}, 2}, {[]uint32{0, 1, 2, 3}, 2}, {[]uint32{0, 4}, 3}, {[]uint32{0, 9}, 4}} {
		var b []byte
		for _, p := range c.parts {
			b = BitmapSet(b, p)
		}
		if got := BitmapRadix(b); got != c.want {
			t.Errorf("radix of %v = %d, want %d", c.parts, got, c.want)
		}
	}
}

func TestPartitionOf(t *testing.T) {
	b := BitmapSet(BitmapSet(BitmapSet(nil, 0), 1), 2) // 0 split into 1 then 2; 1 not split
	for h, want := range map[uint64]uint32{0: 0, 4: 0, 1: 1, 3: 1, 2: 2, 6: 2, 7: 1} {
		if got := PartitionOf(h, b); got != want {
			t.Errorf("PartitionOf(%d) = %d, want %d", h, got, want)
		}
	}
	if PartitionServer(MakeIno(3, 5), 2, 4) != 1 {
		t.Error("partition 2 of a server-3 directory in a 4-server cluster is not on server 1")
	}
}

func TestBitmapGrows(t *testing.T) {
	for _, tc := range []struct {
		a, b []byte
		want bool
	}{
		{nil, nil, false},
		{[]byte{1}, []byte{1, 0, 0}, false}, // zero bytes past a's end name nothing
		{[]byte{1}, []byte{3}, true},
		{[]byte{3}, []byte{1}, false},
		{[]byte{1}, []byte{1, 4}, true},
	} {
		if got := BitmapGrows(tc.a, tc.b); got != tc.want {
			t.Errorf("BitmapGrows(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if grew := !bytes.Equal(trimZeros(BitmapOr(append([]byte(nil), tc.a...), tc.b)), trimZeros(tc.a)); grew != tc.want {
			t.Errorf("BitmapOr(%v, %v) changed it: %v, BitmapGrows says %v", tc.a, tc.b, grew, tc.want)
		}
	}
}

func trimZeros(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

func TestPartitionHolds(t *testing.T) {
	if !PartitionHolds(0, 0, 12345) || !PartitionHolds(5, 3, 0b1101) || PartitionHolds(4, 3, 0b1101) || PartitionHolds(0, 40, 0) {
		t.Error("PartitionHolds disagrees with the low radix bits of the hash")
	}
}
