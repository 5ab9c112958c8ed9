package bench

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDurabilityBenchmark runs the durability benchmark at its quick size
// and checks that every mode measured every workload, and that the durable
// writes come from the servers: in sync mode each of the 100 creates is
// durable when acknowledged (at least 100 WAL syncs), in async mode the
// final sync makes them durable in a handful.
func TestDurabilityBenchmark(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts weft three times and runs tar and PostMark")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	if _, err := exec.LookPath("postmark"); err != nil {
		if _, err := exec.LookPath("apt-get"); err != nil {
			t.Skip("no postmark, and no apt-get to install it")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, []string{"durability"}, Options{
		Out: t.TempDir(), Repeats: 1, Quick: true, Cache: t.TempDir(), InstallDeps: true, Log: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Skipped {
		if strings.Contains(s, "not installed") {
			t.Skipf("skipped: %s", s)
		}
		t.Errorf("skipped: %s", s)
	}
	median := func(c, target string) float64 {
		t.Helper()
		r, ok := find(rep.Results, c, target)
		if !ok || len(r.Samples) != 2 {
			t.Fatalf("%s / %s: %d samples, want 2 (found: %v)", c, target, len(r.Samples), ok)
		}
		return r.Median()
	}
	for _, m := range durModes {
		for _, w := range durWorkloads {
			if s := median(w+": "+durSeconds, m.name); !(s > 0) {
				t.Errorf("%s / %s: %v s", m.name, w, s)
			}
			total, wal, chunk := median(w+": "+durWrites, m.name), median(w+": "+durWAL, m.name), median(w+": "+durChunk, m.name)
			if total < 1 || wal < 1 || chunk < 0 {
				t.Errorf("%s / %s: %v durable writes (%v WAL + %v store): every workload ends with a sync", m.name, w, total, wal, chunk)
			}
		}
	}
	sync, async := median(durCreate+": "+durWAL, "weft (sync)"), median(durCreate+": "+durWAL, "weft (async)")
	if sync < 100 || async >= sync/10 {
		t.Errorf("create 100 files: %v WAL syncs in sync mode, %v in async: want ≥ 100, and async far fewer", sync, async)
	}
	if untar := median(durUntar+": "+durChunk, "weft (sync)"); untar < 1 {
		t.Errorf("untar in sync mode: %v store syncs, want some (the tree has files above the inline limit)", untar)
	}
	var md strings.Builder
	rep.Markdown(&md)
	if !strings.Contains(md.String(), "the analogue of the paper's block-write table") || !strings.Contains(md.String(), "| create 100 small files | 122 |") {
		t.Error("the report lacks the durable-write table or the paper's")
	}
}
