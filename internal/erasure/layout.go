package erasure

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// ParityBase is the chunk index of the first parity unit of a file: data
// indexes stay below it (files are at most 2^50 bytes, chunks at least 64
// KiB, so data indexes stay below 2^34).
const ParityBase uint64 = 1 << 62

// Limits of a scheme: reedsolomon takes at most 256 shards; a stripe's
// units need that many distinct stores, so real schemes are far smaller.
const (
	MaxData   = 32
	MaxParity = 8
)

// Scheme is k data units and m parity units per stripe.
type Scheme struct {
	K, M int
}

// Width is how many units, and so distinct stores, a stripe has.
func (s Scheme) Width() int { return s.K + s.M }

// Enabled reports whether s is an erasure scheme (the zero Scheme means
// replication).
func (s Scheme) Enabled() bool { return s.K > 0 }

func (s Scheme) String() string { return fmt.Sprintf("ec:%d+%d", s.K, s.M) }

// Validate checks s against a cluster of stores store servers.
func (s Scheme) Validate(stores int) error {
	const op = "erasure scheme"
	switch {
	case s.K < 1 || s.K > MaxData:
		return errs.New(errs.Invalid, op, "%d data units: want 1..%d", s.K, MaxData)
	case s.M < 1 || s.M > MaxParity:
		return errs.New(errs.Invalid, op, "%d parity units: want 1..%d", s.M, MaxParity)
	case stores > 0 && s.Width() > stores:
		return errs.New(errs.Invalid, op, "%s needs %d distinct store servers for a stripe; the cluster has %d", s, s.Width(), stores)
	}
	return nil
}

// ParseScheme parses "K+M" (the part after "ec:").
func ParseScheme(text string) (Scheme, error) {
	ks, ms, ok := strings.Cut(text, "+")
	k, err1 := strconv.Atoi(ks)
	m, err2 := strconv.Atoi(ms)
	if !ok || err1 != nil || err2 != nil {
		return Scheme{}, errs.New(errs.Invalid, "erasure scheme", "%q: want K+M, such as 4+1", text)
	}
	s := Scheme{K: k, M: m}
	return s, s.Validate(0)
}

// IsParity reports whether chunk index holds a parity unit.
func IsParity(index uint64) bool { return index >= ParityBase }

// Stripe returns the stripe of data chunk index and its position there.
func (s Scheme) Stripe(index uint64) (stripe uint64, pos int) {
	return index / uint64(s.K), int(index % uint64(s.K))
}

// DataIndex is the chunk index of data unit pos (< K) of stripe.
func (s Scheme) DataIndex(stripe uint64, pos int) uint64 {
	return stripe*uint64(s.K) + uint64(pos)
}

// ParityIndex is the chunk index of parity unit j (< M) of stripe. A
// stripe's parity space holds its m parity units and then their m stale
// marks (MarkIndex), so that a deletion from ParityIndex(s, 0) drops the
// marks of the stripes it drops and no others.
func (s Scheme) ParityIndex(stripe uint64, j int) uint64 {
	return ParityBase + stripe*uint64(2*s.M) + uint64(j)
}

// MarkIndex is the chunk index of the stale mark of parity unit j of
// stripe, kept on the parity unit's store. A mark that holds bytes says
// the parity unit may not match the stripe's data: a client's parity cache
// wrote data it has not yet covered with parity (client/stripecache.go).
// Readers do not rebuild from a marked parity unit, and repair rewrites
// the parity from the data and clears the mark.
func (s Scheme) MarkIndex(stripe uint64, j int) uint64 {
	return s.ParityIndex(stripe, j) + uint64(s.M)
}

// IsMark reports whether chunk index holds a stale mark.
func (s Scheme) IsMark(index uint64) bool {
	return IsParity(index) && (index-ParityBase)%uint64(2*s.M) >= uint64(s.M)
}

// UnitIndex is the chunk index of position pos (< Width) of stripe: data
// units first, then parity units.
func (s Scheme) UnitIndex(stripe uint64, pos int) uint64 {
	if pos < s.K {
		return s.DataIndex(stripe, pos)
	}
	return s.ParityIndex(stripe, pos-s.K)
}

// Unit returns the stripe and position of any unit's chunk index. A stale
// mark's is its parity unit's (it lives on the same store).
func (s Scheme) Unit(index uint64) (stripe uint64, pos int) {
	if !IsParity(index) {
		return s.Stripe(index)
	}
	p := index - ParityBase
	return p / uint64(2*s.M), s.K + int(p%uint64(2*s.M))%s.M
}

// Stores returns the Width distinct stores (of 0..stores-1) of a stripe of
// ino, by position.
func (s Scheme) Stores(ino core.Ino, stripe uint64, stores int) []int {
	// The stripe number with the parity bit set as the rendezvous key, so
	// a stripe's stores are not those of the file's chunk of that number
	// under replication (no reason they should agree).
	return core.ChunkReplicas(ino, ParityBase|stripe, stores, s.Width())
}

// StoreOf returns the store that holds the unit at chunk index of ino.
func (s Scheme) StoreOf(ino core.Ino, index uint64, stores int) int {
	stripe, pos := s.Unit(index)
	return s.Stores(ino, stripe, stores)[pos]
}

// StripeOfSize returns the stripe holding the last byte of a file of size
// bytes, and whether there is one (size > 0).
func (s Scheme) StripeOfSize(size uint64, chunkSize int64) (uint64, bool) {
	if size == 0 {
		return 0, false
	}
	return ((size - 1) / uint64(chunkSize)) / uint64(s.K), true
}

// Shrink is what a file's parity needs after the file shrank: the data
// units past the new end are dropped (by the meta server's reclaim) and the
// one holding it is cut, so the parity of the stripe holding the new end
// is recomputed from what is left, and the parity units of the stripes past
// it are dropped.
type Shrink struct {
	// Rewrite says stripe Stripe holds the new end and needs its parity
	// recomputed (over whole units, from the data cut at the new size).
	Rewrite bool
	Stripe  uint64
	// DropFrom is the first parity index to drop (DeleteChunks from it).
	DropFrom uint64
}

// ShrinkTo returns what a shrink to size bytes needs with chunks of
// chunkSize bytes.
func (s Scheme) ShrinkTo(size uint64, chunkSize int64) Shrink {
	stripeBytes := uint64(chunkSize) * uint64(s.K)
	stripe := size / stripeBytes
	if size%stripeBytes == 0 {
		return Shrink{DropFrom: s.ParityIndex(stripe, 0)}
	}
	return Shrink{Rewrite: true, Stripe: stripe, DropFrom: s.ParityIndex(stripe+1, 0)}
}

// codeFlag marks a layout code that names an erasure scheme rather than a
// replica count (see Code).
const codeFlag = 1 << 24

// Code is the scheme as the chunk layout's replication field carries it
// to the meta server (SetAttrRequest.replication, ReclaimRecord): a value
// no replica count reaches, so that a truncate's reclaim cuts the chunk
// holding the new end on the store its stripe puts it on (PlacedStores).
// A meta server that does not know codes cuts it on every store instead
// (core.ChunkReplicas takes at most as many stores as there are).
func (s Scheme) Code() uint32 { return codeFlag | uint32(s.K)<<8 | uint32(s.M) }

// PlacedStores returns the stores that hold chunk index of ino under the
// layout the replication field layout names: a replica count, or an
// erasure scheme's Code (then the one store of the unit).
func PlacedStores(ino core.Ino, index uint64, stores int, layout uint32) []int {
	if layout&codeFlag == 0 {
		return core.ChunkReplicas(ino, index, stores, int(max(layout, 1)))
	}
	s := Scheme{K: int(layout >> 8 & 0xff), M: int(layout & 0xff)}
	if s.Validate(stores) != nil {
		return core.ChunkReplicas(ino, index, stores, stores) // unknown: every store
	}
	return []int{s.StoreOf(ino, index, stores)}
}
