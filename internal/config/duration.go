package config

import (
	"fmt"
	"strconv"
	"time"
)

// Duration is a length of time in the cluster file: a string such as "2s"
// or "500ms" (Go's time.ParseDuration), or an integer number of
// milliseconds.
type Duration time.Duration

// UnmarshalTOML accepts a duration string or an integer of milliseconds.
func (d *Duration) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		*d = Duration(time.Duration(v) * time.Millisecond)
		return nil
	case string:
		p, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("duration %q: want a number with a unit, such as \"2s\" or \"500ms\"", v)
		}
		*d = Duration(p)
		return nil
	default:
		return fmt.Errorf("duration must be a string such as \"2s\" or an integer of milliseconds, not %T", v)
	}
}

// MarshalTOML writes the duration as a string ("2s").
func (d Duration) MarshalTOML() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).String())), nil
}
