package bench

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// TestRepairBenchmark runs the repair benchmark on a tiny data set with
// real server processes: every restore is timed, checked and reported.
func TestRepairBenchmark(t *testing.T) {
	bin := buildWeft(t)
	if bin == "" {
		t.Skip("no weft binary for the server processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, []string{"repair"}, Options{
		Out: t.TempDir(), Repeats: 2, Quick: true, RepairBytes: 4 << 20, Weft: bin, Cache: t.TempDir(),
		Log: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Skipped) > 0 {
		t.Fatalf("skipped: %q", rep.Skipped)
	}
	if len(rep.Results) != 4 {
		t.Fatalf("%d results, want time and rate for 2 targets: %+v", len(rep.Results), rep.Results)
	}
	for _, r := range rep.Results {
		if len(r.Samples) != 2 {
			t.Errorf("%s/%s: %d samples, want 2", r.Target, r.Case, len(r.Samples))
		}
		for _, s := range r.Samples {
			if !(s > 0) {
				t.Errorf("%s/%s: sample %v", r.Target, r.Case, s)
			}
		}
	}
}

// TestCompareWriterFindsADifference checks the read-back check itself: a
// changed byte, a short stream and a long one are errors.
func TestCompareWriterFindsADifference(t *testing.T) {
	set := repairSet{files: 1, size: 1 << 20}
	want, _ := io.ReadAll(set.stream(0))
	if len(want) != 1<<20 {
		t.Fatalf("stream gave %d bytes", len(want))
	}
	w := &compareWriter{want: set.stream(0)}
	if _, err := io.Copy(w, bytes.NewReader(want)); err != nil || w.err != nil {
		t.Fatalf("the written bytes: %v, %v", err, w.err)
	}

	bad := bytes.Clone(want)
	bad[700001] ^= 1
	w = &compareWriter{want: set.stream(0)}
	io.Copy(w, bytes.NewReader(bad))
	if !errs.Is(w.err, errs.Corrupt) || !strings.Contains(w.err.Error(), "byte 700001") {
		t.Errorf("a changed byte gave %v", w.err)
	}

	w = &compareWriter{want: set.stream(0)}
	io.Copy(w, bytes.NewReader(append(want, 0)))
	if w.err == nil {
		t.Error("a longer read gave no error")
	}
}

// TestBaseColumns checks that a base build adds a column beside each weft
// variant, run with the base binary, and that its ratios become goals.
func TestBaseColumns(t *testing.T) {
	env := testEnv(t, "weft", "local")
	env.BaseWeft = "/old/weft"
	var got []string
	for _, tg := range env.targets(weftSync, weftAsync) {
		got = append(got, tg.Name+"@"+tg.Binary)
	}
	want := []string{"weft (sync)@", "weft (sync, base)@/old/weft", "weft (async)@", "weft (async, base)@/old/weft", "local@"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("targets %q, want %q", got, want)
	}
	goals := baseGoals([]Result{
		{Case: "create", Target: "weft (sync)", Samples: []float64{80}},
		{Case: "create", Target: "weft (sync, base)", Samples: []float64{100}},
		{Case: "create", Target: "local", Samples: []float64{500}},
	})
	if len(goals) != 1 || !strings.Contains(goals[0], "0.80×") || !strings.Contains(goals[0], "NOT met") {
		t.Errorf("goals %q", goals)
	}
}
