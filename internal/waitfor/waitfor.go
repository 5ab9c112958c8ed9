// Package waitfor is how weft's tests wait for something the system does in
// the background (a reclaim, a repair, a keepalive): they poll a condition
// until it holds or a deadline passes, and fail naming what did not happen.
// A sleep standing for "long enough" is never the synchronisation.
package waitfor

import (
	"testing"
	"time"
)

// Until polls cond until it is true, failing tb if within passes first.
func Until(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	NoError(tb, within, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// NoError polls try until it returns nil, failing tb with the last error if
// within passes first.
func NoError(tb testing.TB, within time.Duration, what string, try func() error) {
	tb.Helper()
	deadline := time.Now().Add(within)
	// Poll often at first (most conditions hold soon), then back off so a
	// slow condition does not spin.
	every := time.Millisecond
	for {
		err := try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				tb.Fatalf("not within %v: %s", within, what)
			}
			tb.Fatalf("not within %v: %s: %v", within, what, err)
		}
		t := time.NewTimer(every)
		<-t.C
		every = min(2*every, 100*time.Millisecond)
	}
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

var errNotYet error = notYet{}
