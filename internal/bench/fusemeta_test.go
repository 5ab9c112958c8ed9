package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// workerTest returns this test binary, which serves as the worker process
// (fusemeta.go's init dispatches the role), and a context that bounds the
// test.
func workerTest(t *testing.T) (string, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return self, ctx
}

// TestFusemetaWorkersRunThePhases runs the metadata workload with two real
// worker processes (this test binary, which dispatches the worker role in
// init) and checks that every phase has a rate and nothing is left.
func TestFusemetaWorkersRunThePhases(t *testing.T) {
	self, ctx := workerTest(t)
	dir := filepath.Join(t.TempDir(), "md")
	rates, err := fusemetaOnce(ctx, self, dir, 2, 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(rates) != 3 || slices.ContainsFunc(rates, func(r float64) bool { return !(r > 0) }) {
		t.Fatalf("rates %v", rates)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s left behind: %v", dir, err)
	}
}

// TestFusemetaWorkerFailureIsReported: a worker that cannot create its
// files (their directory is missing) ends the phase with the worker's own
// error, and a worker with bad arguments refuses to start.
func TestFusemetaWorkerFailureIsReported(t *testing.T) {
	self, ctx := workerTest(t)
	dir := filepath.Join(t.TempDir(), "md")
	g, err := startWorkers(ctx, self, fusemetaRole, []string{"3 p0 " + dir})
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	if err := g.wait("ready"); err != nil {
		t.Fatal(err)
	}
	// dir does not exist: the create phase fails.
	_, err = g.phase("created")
	if err == nil || !strings.Contains(err.Error(), "create "+filepath.Join(dir, "p0.0")) {
		t.Fatalf("got %v", err)
	}
	if err := runFusemetaWorker(strings.NewReader(""), &strings.Builder{}, "x p0 /tmp"); err == nil {
		t.Error("bad file count accepted")
	}
}

func TestParseFioBandwidth(t *testing.T) {
	out := []byte("note: both iodepth >= 1 and synchronous I/O engine are selected\n" +
		`{"fio version": "fio-3.33", "jobs": [{"jobname": "seq", "error": 0,` +
		`"read": {"io_bytes": 0, "bw_bytes": 0}, "write": {"io_bytes": 1048576, "bw_bytes": 500000000}}]}`)
	got, err := parseFioBandwidth(out, "write", 1<<20)
	if err != nil || got != 500 {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := parseFioBandwidth(out, "read", 1<<20); err == nil {
		t.Error("a job that read nothing was accepted")
	}
	if _, err := parseFioBandwidth([]byte("fio: no such file"), "read", 1); err == nil {
		t.Error("output without JSON was accepted")
	}
}

func TestPhaseWatchFindsMarkersAcrossWrites(t *testing.T) {
	w := newPhaseWatch("Performing transactions", "Deleting files")
	for _, s := range []string{"Creating files...Done\nPerform", "ing transactions", "....Done\nDel", "eting files...Done\n"} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	seen := w.times()
	if seen[0].IsZero() || seen[1].IsZero() || seen[1].Before(seen[0]) {
		t.Fatalf("times %v", seen)
	}
}

func TestGoalLines(t *testing.T) {
	rs := []Result{
		{Case: "create", Target: "weft (sync)", Samples: []float64{3000}},
		{Case: "create", Target: "sshfs", Samples: []float64{1000}},
		{Case: "create", Target: "juicefs-sqlite", Samples: []float64{1500}},
		{Case: "untar, s", Target: "weft (sync)", Samples: []float64{10}},
		{Case: "untar, s", Target: "sshfs", Samples: []float64{20}},
	}
	for _, c := range []struct{ got, want string }{
		{goalAtLeast(rs, "creates", "create", "weft (sync)", "sshfs", 3, false), "creates, weft (sync) vs sshfs: 3.00× (goal ≥ 3×: met)"},
		{goalAtLeast(rs, "creates", "create", "weft (sync)", "juicefs-sqlite", 3, false), "creates, weft (sync) vs juicefs-sqlite: 2.00× (goal ≥ 3×: NOT met)"},
		{goalAtLeast(rs, "creates", "create", "weft (sync)", "juicefs-redis", 3, false), "creates, weft (sync) vs juicefs-redis: not measured (juicefs-redis has no result)"},
		{goalAtLeast(rs, "untar", "untar, s", "weft (sync)", "sshfs", 1, true), "untar, weft (sync) vs sshfs: 2.00× (goal ≥ 1×: met)"},
	} {
		if c.got != c.want {
			t.Errorf("got  %q\nwant %q", c.got, c.want)
		}
	}
}
