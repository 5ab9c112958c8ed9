package erasure

import (
	"github.com/klauspost/reedsolomon"

	"github.com/weftfs/weft/internal/errs"
)

// Codec computes and uses the parity of one scheme. It is safe for
// concurrent use.
type Codec struct {
	s   Scheme
	enc reedsolomon.Encoder
}

// NewCodec returns the codec of s.
func NewCodec(s Scheme) (*Codec, error) {
	if err := s.Validate(0); err != nil {
		return nil, err
	}
	// With one parity unit the parity is the XOR of the data units (the
	// cheapest code there is: a stripe with holes costs a copy).
	enc, err := reedsolomon.New(s.K, s.M, reedsolomon.WithFastOneParityMatrix())
	if err != nil {
		return nil, errs.Wrap(errs.Invalid, "erasure codec", s.String(), err)
	}
	return &Codec{s: s, enc: enc}, nil
}

// Scheme returns the codec's scheme.
func (c *Codec) Scheme() Scheme { return c.s }

// ParityRange returns the m parity units' bytes of a range of n bytes, from
// the k data units' bytes in it: data[p] may be shorter than n or nil (a
// hole or a short chunk: zeros past its end).
func (c *Codec) ParityRange(data [][]byte, n int) ([][]byte, error) {
	if len(data) != c.s.K {
		return nil, errs.New(errs.Invalid, "erasure parity", "%d data units for %s", len(data), c.s)
	}
	shards := make([][]byte, c.s.Width())
	for j := c.s.K; j < len(shards); j++ {
		shards[j] = make([]byte, n)
	}
	if n == 0 {
		return shards[c.s.K:], nil
	}
	holes := 0
	for _, d := range data {
		if len(d) == 0 {
			holes++
		}
	}
	if holes > 0 {
		// Parity is linear: the sum of each data unit's share. A hole's
		// share is zero, so a stripe with holes (a file shorter than a
		// stripe) costs neither zero-filled copies nor their coding.
		for p, d := range data {
			if len(d) == 0 {
				continue
			}
			if err := c.enc.EncodeIdx(padded(d, n), p, shards[c.s.K:]); err != nil {
				return nil, errs.Wrap(errs.Invalid, "erasure parity", c.s.String(), err)
			}
		}
		return shards[c.s.K:], nil
	}
	for p, d := range data {
		shards[p] = padded(d, n)
	}
	if err := c.enc.Encode(shards); err != nil {
		return nil, errs.Wrap(errs.Invalid, "erasure parity", c.s.String(), err)
	}
	return shards[c.s.K:], nil
}

// Reconstruct fills in the units of a range of n bytes that are missing:
// units[p] is position p's bytes (shorter than n: zeros past its end), or
// nil when unknown. At least k must be known; otherwise it fails with
// errs.IO and changes nothing. Every unit is n bytes afterwards.
func (c *Codec) Reconstruct(units [][]byte, n int) error {
	if len(units) != c.s.Width() {
		return errs.New(errs.Invalid, "erasure reconstruct", "%d units for %s", len(units), c.s)
	}
	known := 0
	for _, u := range units {
		if u != nil {
			known++
		}
	}
	if known < c.s.K {
		return errs.New(errs.IO, "erasure reconstruct", "%d of the %d units of a stripe are readable; %s needs %d", known, c.s.Width(), c.s, c.s.K)
	}
	for p, u := range units {
		if u != nil {
			units[p] = padded(u, n)
		}
	}
	if n == 0 {
		for p := range units {
			units[p] = []byte{}
		}
		return nil
	}
	if err := c.enc.Reconstruct(units); err != nil {
		return errs.Wrap(errs.IO, "erasure reconstruct", c.s.String(), err)
	}
	return nil
}

// Verify reports whether the units of a range (all known, shorter ones
// zero-padded) are consistent: the parity is that of the data.
func (c *Codec) Verify(units [][]byte, n int) (bool, error) {
	if len(units) != c.s.Width() {
		return false, errs.New(errs.Invalid, "erasure verify", "%d units for %s", len(units), c.s)
	}
	if n == 0 {
		return true, nil
	}
	shards := make([][]byte, len(units))
	for p, u := range units {
		shards[p] = padded(u, n)
	}
	ok, err := c.enc.Verify(shards)
	if err != nil {
		return false, errs.Wrap(errs.Invalid, "erasure verify", c.s.String(), err)
	}
	return ok, nil
}

// padded returns b as exactly n bytes: a copy, zero-filled past len(b)
// when shorter, b itself cut when long enough.
func padded(b []byte, n int) []byte {
	if len(b) >= n {
		return b[:n]
	}
	out := make([]byte, n)
	copy(out, b)
	return out
}

// SendParity is ParityRange for parity that is sent and then dropped (a
// write's): the units it returns may share memory with data (read them,
// never change them), and those it makes come from alloc, which need not
// zero them. It reports which units came from alloc, for the caller to
// give back. It costs nothing for the common partial stripe of a short
// file, one data unit among holes under m = 1 (the XOR of one unit is the
// unit), and no allocation otherwise: the seqio profile had about a tenth
// of a partial-stripe write in ParityRange's zeroed allocations.
func (c *Codec) SendParity(data [][]byte, n int, alloc func(int) []byte) (parity [][]byte, made []bool, _ error) {
	if len(data) != c.s.K {
		return nil, nil, errs.New(errs.Invalid, "erasure parity", "%d data units for %s", len(data), c.s)
	}
	parity = make([][]byte, c.s.M)
	made = make([]bool, c.s.M)
	var live []int // data units with bytes in the range
	full := true   // every data unit holds all n bytes
	for p, d := range data {
		if len(d) > 0 {
			live = append(live, p)
		}
		full = full && len(d) >= n
	}
	if n == 0 {
		for j := range parity {
			parity[j] = []byte{}
		}
		return parity, made, nil
	}
	if c.s.M == 1 && len(live) == 1 && len(data[live[0]]) >= n {
		parity[0] = data[live[0]][:n]
		return parity, made, nil
	}
	for j := range parity {
		parity[j] = alloc(n)[:n]
		made[j] = true
	}
	if full {
		shards := make([][]byte, c.s.Width())
		for p, d := range data {
			shards[p] = d[:n]
		}
		copy(shards[c.s.K:], parity) // Encode overwrites the parity units
		if err := c.enc.Encode(shards); err != nil {
			return nil, nil, errs.Wrap(errs.Invalid, "erasure parity", c.s.String(), err)
		}
		return parity, made, nil
	}
	// EncodeIdx adds one unit's share to parity that starts at zero; a
	// hole's share is zero.
	for _, u := range parity {
		clear(u)
	}
	for _, p := range live {
		if err := c.enc.EncodeIdx(padded(data[p], n), p, parity); err != nil {
			return nil, nil, errs.Wrap(errs.Invalid, "erasure parity", c.s.String(), err)
		}
	}
	return parity, made, nil
}
