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
