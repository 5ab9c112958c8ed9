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
	if !Poll(within, cond) {
		tb.Fatalf("not within %v: %s", within, what)
	}
}

// Poll polls cond until it is true or within passes, and reports which:
// Until for a goroutine other than the test's (a hook the system under
// test calls), which must not fail the test itself.
func Poll(within time.Duration, cond func() bool) bool {
	err := poll(within, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	return err == nil
}

// NoError polls try until it returns nil, failing tb with the last error if
// within passes first.
func NoError(tb testing.TB, within time.Duration, what string, try func() error) {
	tb.Helper()
	if err := poll(within, try); err != nil {
		tb.Fatalf("not within %v: %s: %v", within, what, err)
	}
}

// poll calls try until it returns nil or within passes; the last error.
func poll(within time.Duration, try func() error) error {
	deadline := time.Now().Add(within)
	// Poll often at first (most conditions hold soon), then back off so a
	// slow condition does not spin.
	every := time.Millisecond
	for {
		err := try()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(every)
		<-t.C
		every = min(2*every, 100*time.Millisecond)
	}
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

var errNotYet error = notYet{}
