package bench

import (
	"strings"
	"testing"
)

// TestFindTablesAndGoals checks how the find benchmark's results are laid
// out: latency by tree size with GNU find's speed-up, the index's cost on
// the create rate, the server sweep, and both plots.
func TestFindTablesAndGoals(t *testing.T) {
	res := func(c, target string, x float64, unit string, v ...float64) Result {
		return Result{Bench: "find", Case: c, Target: target, X: x, Unit: unit, Samples: v}
	}
	rs := []Result{
		res(findSelective.label, findWeft, 10_000, "s", 0.002, 0.004),
		res(findSelective.label, findGNU, 10_000, "s", 0.1, 0.1),
		res(findSelective.label, findWeft, 1_000_000, "s", 0.05),
		res(findSelective.label, findGNU, 1_000_000, "s", 5),
		res(findAll.label, findWeft, 1_000_000, "s", 2),
		res(findRateCase+", 1000000 files, 16 goroutines", findIndex, 1_000_000, "creates/s", 900),
		res(findRateCase+", 1000000 files, 16 goroutines", findNoIndex, 1_000_000, "creates/s", 1000),
		res(findVsServers+findSelective.label+", 100000 files", findWeft, 1, "s", 0.02),
		res(findVsServers+findSelective.label+", 100000 files", findWeft, 2, "s", 0.01),
	}
	var md strings.Builder
	for _, tb := range findTables(rs) {
		tb.markdown(&md)
	}
	for _, want := range []string{
		"| 10,000 |  |  |  | 0.003 (0.002–0.004) | 0.10 | 33× |", // median of 2 and 4 ms against 100 ms
		"| 1,000,000 |  |  |  | 0.05 | 5.00 | 100× | 2.00 |  |  |",
		"| case | 1 server | 2 servers |",
		"| 900 | 1,000 | 10.0% |",
		"| 1 in 10,000 (-name 'f???0000'), 100000 files | 0.02 | 0.01 |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("tables lack %q:\n%s", want, md.String())
		}
	}
	goals := strings.Join(findGoals(rs), "\n")
	for _, want := range []string{"0.050 s (goal: under 1 s at 1,000,000: met)", "100× faster", "costs 10.0% of the create rate", "≤ 15%: met"} {
		if !strings.Contains(goals, want) {
			t.Errorf("goals lack %q:\n%s", want, goals)
		}
	}
	figs := findFigures(rs)
	if len(figs) != 2 || len(figs[0].Series) != 3 || len(figs[1].Series) != 1 || len(figs[1].Series[0].Points) != 2 {
		t.Errorf("figures: %+v", figs)
	}
}
