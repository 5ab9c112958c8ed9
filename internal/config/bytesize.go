package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/weftfs/weft/internal/errs"
)

// ByteSize is a number of bytes. In a cluster file it is an integer or a
// string with a unit, such as "64KiB" or "2GiB".
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first so that "KiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseByteSize reads a size such as "4096", "64KiB", "2GiB", "1.5GiB" or
// "500MB". Binary units (KiB, MiB, GiB, TiB, and the short K, M, G, T) are
// powers of 1024; KB, MB, GB and TB are powers of 1000. Units are
// case-insensitive; a space between number and unit is allowed.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			mult = u.mult
			t = strings.TrimSpace(t[:len(t)-len(u.suffix)])
			break
		}
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n < 0 || (n > 0 && mult > math.MaxInt64/n) {
			return 0, errs.New(errs.Invalid, "parse size", "%q is out of range", s)
		}
		return ByteSize(n * mult), nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || math.IsNaN(f) || f*float64(mult) >= math.MaxInt64 {
		return 0, errs.New(errs.Invalid, "parse size", "%q is not a size (examples: 4096, 64KiB, 2GiB)", s)
	}
	return ByteSize(f * float64(mult)), nil
}

// String formats b with the largest binary unit that divides it exactly.
func (b ByteSize) String() string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// UnmarshalTOML accepts an integer or a size string.
func (b *ByteSize) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		if v < 0 {
			return fmt.Errorf("size %d is negative", v)
		}
		*b = ByteSize(v)
		return nil
	case string:
		n, err := ParseByteSize(v)
		if err != nil {
			return err
		}
		*b = n
		return nil
	default:
		return fmt.Errorf("size must be an integer or a string such as \"2GiB\", not %T", v)
	}
}

// MarshalTOML writes a round size as a string ("4MiB") for people to read,
// and any other size as an integer.
func (b ByteSize) MarshalTOML() ([]byte, error) {
	s := b.String()
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return []byte(s), nil
	}
	return []byte(strconv.Quote(s)), nil
}
