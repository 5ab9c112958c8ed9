package core

import "hash/fnv"

// GIGA+ placement (DESIGN: namespace). A directory's entries are split into
// partitions by the low bits of the name hash; partition i of directory d
// lives on meta server (d.Server() + i) mod N, so a server holds at most one
// partition of a directory and a directory splits into at most N partitions.

// NameHash is the GIGA+ hash of an entry name: FNV-1a finished with the
// splitmix64 mixer, because splits look at one bit at a time starting from the
// lowest and FNV's low bits are weak. Part of the on-disk format.
func NameHash(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// PartitionOf returns the partition that holds hash in a directory whose
// partition bitmap is bitmap: hash mod 2^r for the largest r whose partition
// exists (a partition that has not split yet still holds the names of its
// future children).
func PartitionOf(hash uint64, bitmap []byte) uint32 {
	for r := BitmapRadix(bitmap); r > 0; r-- {
		p := uint32(hash & (1<<uint(r) - 1))
		if BitmapHas(bitmap, p) {
			return p
		}
	}
	return 0
}

// BitmapRadix is the number of hash bits that the highest partition of
// bitmap needs: partitions below 2^r.
func BitmapRadix(bitmap []byte) int {
	for i := len(bitmap) - 1; i >= 0; i-- {
		if b := bitmap[i]; b != 0 {
			hi := i*8 + 7
			for b&0x80 == 0 {
				b <<= 1
				hi--
			}
			r := 0
			for 1<<r <= hi {
				r++
			}
			return r
		}
	}
	return 0
}

// BitmapHas reports whether partition p is set in bitmap.
func BitmapHas(bitmap []byte, p uint32) bool {
	i := p / 8
	return int(i) < len(bitmap) && bitmap[i]&(1<<(p%8)) != 0
}

// BitmapSet returns bitmap with partition p set (grown as needed).
func BitmapSet(bitmap []byte, p uint32) []byte {
	i := int(p / 8)
	for len(bitmap) <= i {
		bitmap = append(bitmap, 0)
	}
	bitmap[i] |= 1 << (p % 8)
	return bitmap
}

// BitmapGrows reports whether b names a partition a does not: or-ing b
// into a would change it. (Zero bytes past a's end name nothing.)
func BitmapGrows(a, b []byte) bool {
	for i, x := range b {
		if x != 0 && (i >= len(a) || x&^a[i] != 0) {
			return true
		}
	}
	return false
}

// PartitionHolds reports whether the partition with this index and radix
// holds the names whose hash is h: their low radix bits are its index.
func PartitionHolds(part, radix uint32, h uint64) bool {
	if radix >= 32 {
		return false
	}
	return uint32(h&(1<<radix-1)) == part
}

// BitmapOr returns a with every partition of b set too.
func BitmapOr(a, b []byte) []byte {
	for len(a) < len(b) {
		a = append(a, 0)
	}
	for i, x := range b {
		a[i] |= x
	}
	return a
}

// PartitionServer is the meta server of partition p of dir in a cluster of n
// meta servers.
func PartitionServer(dir Ino, p uint32, n int) int {
	return (dir.Server() + int(p)) % n
}

// NameServer is the meta server that holds name in dir according to bitmap.
func NameServer(dir Ino, name string, bitmap []byte, n int) int {
	if n == 1 {
		return 0
	}
	return PartitionServer(dir, PartitionOf(NameHash(name), bitmap), n)
}
