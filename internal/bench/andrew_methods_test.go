package bench

import (
	"slices"
	"testing"
	"time"
)

// TestAndrewRequestsByMethod: a phase's requests by method are what its
// counters grew by; a method one repeat did not call has zeros there, in
// a repeat before its first call as after its last, so that every row has
// one sample per repeat; the report shows them by phase, without the
// methods a phase did not call.
func TestAndrewRequestsByMethod(t *testing.T) {
	n := len(andrewPhases)
	counters := func(by map[string]float64) phaseCounters {
		return phaseCounters{cpu: map[string]time.Duration{}, requests: by, hasRequests: true}
	}
	var first, second andrewRun
	first.times, second.times = make([]float64, n), make([]float64, n)
	// Repeat 0: phase 0 makes 3 mkdirs and 2 lookups; phase 1 nothing.
	first.addCounters(0, n, counters(map[string]float64{"lookup": 10}), counters(map[string]float64{"lookup": 12, "mkdir": 3}))
	first.addCounters(1, n, counters(map[string]float64{"lookup": 12, "mkdir": 3}), counters(map[string]float64{"lookup": 12, "mkdir": 3}))
	// Repeat 1: phase 0 makes 4 lookups and its first open, no mkdir.
	second.addCounters(0, n, counters(map[string]float64{"lookup": 20, "mkdir": 9}), counters(map[string]float64{"lookup": 24, "mkdir": 9, "open": 1}))
	if got := first.requests[0]; got != 5 {
		t.Errorf("phase 0's requests %v, want 5", got)
	}
	s := &andrewSeries{target: "t", rows: make(map[string][]Result)}
	s.add(first)
	s.add(second)
	want := map[string][]float64{"lookup": {2, 4}, "mkdir": {3, 0}, "open": {0, 1}}
	for m, samples := range want {
		rows := s.rows[andrewMethodSuffix(m)]
		if len(rows) != n+1 {
			t.Fatalf("%s: %d rows, want %d phases and the total", m, len(rows), n+1)
		}
		if got := rows[0].Samples; !slices.Equal(got, samples) {
			t.Errorf("%s, phase 0: samples %v, want %v", m, got, samples)
		}
		if got := rows[1].Samples; !slices.Equal(got, []float64{0, 0}) {
			t.Errorf("%s, phase 1: samples %v, want zeros", m, got)
		}
	}
	rs := s.results()
	cases := andrewMethodCases(andrewMethodRows(rs))
	wantCases := []string{andrewPhases[0] + ", requests: lookup", andrewPhases[0] + ", requests: mkdir", andrewPhases[0] + ", requests: open"}
	if !slices.Equal(cases[:3], wantCases) {
		t.Errorf("report cases start %q, want %q", cases[:3], wantCases)
	}
	for _, c := range cases {
		if c == "total"+andrewMethodSuffix("lookup") || c == andrewPhases[1]+andrewMethodSuffix("lookup") {
			t.Errorf("the report lists %q (a total, or a method no repeat called in the phase)", c)
		}
	}
	if tables := andrewTables(rs); len(tables) == 0 || tables[len(tables)-1].Title == "" {
		t.Error("no table of requests by method")
	}
}
