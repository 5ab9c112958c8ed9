package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestQuickRun runs the suite at its smallest and checks that the report and
// the JSON are written and every number is a positive measurement.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every benchmark")
	}
	out := t.TempDir()
	rep, err := Run(context.Background(), []string{"all"}, Options{Out: out, Repeats: 1, Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Skipped) > 0 {
		t.Fatalf("skipped: %v", rep.Skipped)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range All() {
		if !strings.Contains(string(md), "### "+b.Name) {
			t.Errorf("report.md has no table for %s", b.Name)
		}
	}
	js, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Results) < 10 || len(back.Goals) < 5 {
		t.Fatalf("results.json has %d results and %d goals", len(back.Results), len(back.Goals))
	}
	for _, r := range back.Results {
		for _, s := range r.Samples {
			if !(s > 0) {
				t.Errorf("%s/%s/%s: sample %v is not positive", r.Bench, r.Case, r.Target, s)
			}
		}
	}
}

func TestUnknownBenchmark(t *testing.T) {
	_, err := Run(context.Background(), []string{"nope"}, Options{Out: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "unknown benchmark") {
		t.Fatalf("got %v", err)
	}
}
