package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the suite's worker process (the
// checkpoint benchmark re-runs its binary).
func TestMain(m *testing.M) {
	if ran, err := RunWorker(os.Stdin, os.Stdout); ran {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// buildWeft compiles the weft binary for the weft FUSE target, or returns ""
// if it cannot (the target is then skipped, which the test allows).
func buildWeft(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "weft")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/weftfs/weft/cmd/weft").CombinedOutput()
	if err != nil {
		t.Logf("cannot build weft, its FUSE target will be skipped: %v: %s", err, out)
		return ""
	}
	return bin
}

// TestQuickRun runs the whole suite at its smallest on weft and the local
// disk, and checks that the report, the JSON and the plots are written,
// every benchmark has its section, the local disk has rows in every
// file-system benchmark whose tools are here, and every number is a
// positive measurement.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every benchmark")
	}
	out := t.TempDir()
	weft := buildWeft(t)
	if weft == "" {
		weft = "/nonexistent/weft" // the weft target is then skipped with that reason
	}
	start := time.Now()
	rep, err := Run(context.Background(), []string{"all", GroupFUSE, GroupOps}, Options{
		Out: out, Repeats: 1, Quick: true, Targets: []string{"weft,local"}, RepairBytes: 8 << 20,
		Cache: t.TempDir(), Weft: weft, Args: []string{"weft", "bench", "all", "--quick"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("quick run took %v", time.Since(start).Round(time.Second))
	for _, s := range rep.Skipped {
		t.Logf("skipped: %s", s)
		// Only the weft FUSE target (until weft up --mount exists) and
		// benchmarks whose Debian packages are missing may be skipped.
		if !strings.HasPrefix(s, "target weft") && !strings.Contains(s, "not installed") && !strings.Contains(s, "linux-source") && !strings.Contains(s, "needs root") {
			t.Errorf("unexpected skip: %s", s)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range All() {
		if !strings.Contains(string(md), "### "+b.Name+"\n") {
			t.Errorf("report.md has no section for %s", b.Name)
		}
	}
	if !strings.Contains(string(md), "The paper's numbers") {
		t.Error("report.md shows no paper numbers")
	}
	js, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Results) < 50 || len(back.Goals) < 5 {
		t.Fatalf("results.json has %d results and %d goals", len(back.Results), len(back.Goals))
	}
	for _, r := range back.Results {
		for _, s := range r.Samples {
			// Rates and times are positive; counts (redirects per 1,000
			// ops) may be zero, never negative, and so may the CPU a
			// target's processes spent on a read the kernel's page cache
			// answered (fio's warm read), or a short phase of andrew.
			if !(s > 0) && !(s == 0 && (isCount(r.Unit) || r.Unit == fioCPUUnit || r.Unit == andrewCPUUnit || r.Unit == andrewRequestsUnit)) {
				t.Errorf("%s/%s/%s: sample %v is not positive", r.Bench, r.Case, r.Target, s)
			}
		}
		if len(r.Samples) == 0 && !strings.HasPrefix(r.Note, "not yet available") {
			t.Errorf("%s/%s/%s has neither samples nor a reason", r.Bench, r.Case, r.Target)
		}
	}
	checkTargetRows(t, back, "local")
	if !slices.ContainsFunc(back.Skipped, func(s string) bool { return strings.HasPrefix(s, "target weft") }) {
		checkTargetRows(t, back, "weft")
	}
	checkFigures(t, out, back.Figures)
}

// checkTargetRows checks that target has measured rows in every file-system
// benchmark that was not skipped for want of a tool.
func checkTargetRows(t *testing.T, rep Report, target string) {
	t.Helper()
	for _, b := range []string{"seqread", "andrew", "checkpoint", "untar", "postmark", "latfs", "seqio",
		"fusemeta", "fusepostmark", "fio", "fuseuntar"} {
		if slices.ContainsFunc(rep.Skipped, func(s string) bool { return strings.HasPrefix(s, b+":") }) {
			continue
		}
		if !slices.ContainsFunc(rep.Results, func(r Result) bool {
			return r.Bench == b && len(r.Samples) > 0 && (r.Target == target || strings.HasPrefix(r.Target, target+" ("))
		}) {
			t.Errorf("%s has no rows for %s", b, target)
		}
	}
}

func checkFigures(t *testing.T, dir string, figures []string) {
	t.Helper()
	for _, want := range []string{"micro.svg", "micro.png", "seqread.svg", "andrew.png", "latfs-create.svg", "seqio-read.png", "checkpoint.svg"} {
		if !slices.Contains(figures, want) {
			t.Errorf("no figure %s among %v", want, figures)
		}
	}
	for _, f := range figures {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(f) {
		case ".png":
			if len(b) < 1000 || string(b[1:4]) != "PNG" {
				t.Errorf("%s is not a PNG image", f)
			}
		case ".svg":
			if !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), "@font-face") {
				t.Errorf("%s is not an SVG with embedded fonts", f)
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

func TestParseTargets(t *testing.T) {
	got, err := parseTargets([]string{"weft,juicefs", "local", "weft"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"weft", "juicefs-sqlite", "juicefs-redis", "local"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got, _ := parseTargets(nil); !slices.Equal(got, []string{"weft", "local"}) {
		t.Errorf("default targets are %v", got)
	}
	if _, err := parseTargets([]string{"zfs"}); err == nil || !strings.Contains(err.Error(), "unknown target") {
		t.Errorf("unknown target accepted: %v", err)
	}
}

func TestPivotShapesTables(t *testing.T) {
	rs := []Result{
		{Case: "read", Target: "b", Samples: []float64{3, 1, 2}},
		{Case: "read", Target: "a", Samples: []float64{1500}},
		{Case: "write", Target: "a", Note: "not yet available (x)"},
	}
	tb := pivot(rs, "op", byCase, byTarget, nil, []string{"a", "b"})
	want := [][]string{{"read", "1,500", "2.00 (1.00–3.00)"}, {"write", "not yet available (x)", ""}}
	if !slices.Equal(tb.Header, []string{"op", "a", "b"}) {
		t.Errorf("header %v", tb.Header)
	}
	for i := range want {
		if i >= len(tb.Rows) || !slices.Equal(tb.Rows[i], want[i]) {
			t.Errorf("rows %q, want %q", tb.Rows, want)
			break
		}
	}
}

func TestNumberFormat(t *testing.T) {
	for v, want := range map[float64]string{1234567: "1,234,567", 999: "999", 12.34: "12.3", 0.5: "0.50", 0.0123: "0.0123", 0: "0"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestAndrewTreeShape checks the full tree's plan against the paper's
// numbers without writing it.
func TestAndrewTreeShape(t *testing.T) {
	p := planTree(andrewFull)
	if len(p.dirs) != 690 || len(p.files) != 10528 || len(p.sources) != 681 {
		t.Fatalf("%d dirs, %d files, %d sources", len(p.dirs), len(p.files), len(p.sources))
	}
	var small, overLimit int
	var total, largest int64
	for _, f := range p.files {
		size := f.size
		if f.source != 0 {
			size = 6100
		}
		total += size
		largest = max(largest, size)
		if size < 64<<10 {
			small++
		}
		if size >= 900<<10 {
			overLimit++
		}
	}
	if frac := float64(small) / float64(len(p.files)); frac < 0.965 || frac > 0.975 {
		t.Errorf("%.3f of the files are under 64 KB, want 0.97", frac)
	}
	if overLimit != 1 || largest < 1900<<10 || largest > 2100<<10 {
		t.Errorf("%d files of 900 KB or more, largest %d", overLimit, largest)
	}
	if total < 120<<20 || total > 134<<20 {
		t.Errorf("%d bytes in all, want ~127 MB", total)
	}
	// Deterministic: the same plan every time.
	q := planTree(andrewFull)
	if q.files[100] != p.files[100] || q.dirs[600] != p.dirs[600] {
		t.Error("the plan changes between calls")
	}
}

func TestCheckpointWorkersKeepBarriers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}
	ctx := context.Background()
	if _, err := checkpointPhase(ctx, self, "write", files, 3<<20); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() != 3<<20 {
			t.Fatalf("%s: %v, %v", f, st, err)
		}
	}
	if _, err := checkpointPhase(ctx, self, "read", []string{files[1], files[0]}, 3<<20); err != nil {
		t.Fatal(err)
	}
	// A reader of a file of the wrong size fails the phase.
	if _, err := checkpointPhase(ctx, self, "read", files, 4<<20); err == nil {
		t.Fatal("short file read without error")
	}
}

func testEnv(t *testing.T, targets ...string) *Env {
	t.Helper()
	kinds, err := parseTargets(targets)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Out: t.TempDir(), Weft: "/nonexistent/weft", Cache: t.TempDir(), Log: discardLogger()}
	st, err := newRunState(opts, kinds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.closeAll)
	return &Env{Dir: t.TempDir(), Options: opts, bench: "test", run: st}
}

// TestTargetsAreTornDownAndFailuresSkipped mounts a tmpfs target and a weft
// target that cannot start: the first is measured and unmounted, the second
// is reported as skipped, and the benchmark goes on.
func TestTargetsAreTornDownAndFailuresSkipped(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	env := testEnv(t, "tmpfs", "weft")
	var mounted []string
	err := env.eachTarget(context.Background(), env.targets(), nil, func(m *Mount) error {
		if !isMounted(m.Dir) {
			t.Errorf("%s: %s is not a mount point", m.Target.Name, m.Dir)
		}
		mounted = append(mounted, m.Dir)
		return os.WriteFile(filepath.Join(m.Dir, "f"), []byte("x"), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(mounted) != 1 {
		t.Fatalf("mounted %v, want the tmpfs only", mounted)
	}
	if isMounted(mounted[0]) {
		t.Errorf("%s still mounted after the benchmark", mounted[0])
	}
	skipped := env.run.skippedList()
	if len(skipped) != 1 || !strings.HasPrefix(skipped[0], "target weft skipped (in test)") {
		t.Errorf("skipped: %q", skipped)
	}
}

func TestUnescapeMountPath(t *testing.T) {
	if got := unescapeMountPath(`/tmp/a\040b`); got != "/tmp/a b" {
		t.Errorf("got %q", got)
	}
	if !isMounted("/") && !isMounted("/proc") {
		t.Error("neither / nor /proc is a mount point")
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// isCount reports whether unit counts events, so that zero is a measurement.
func isCount(unit string) bool { return strings.HasPrefix(unit, "per ") }

// TestChoose checks how names and groups select benchmarks.
func TestChoose(t *testing.T) {
	names := func(bs []Benchmark) []string {
		var out []string
		for _, b := range bs {
			out = append(out, b.Name)
		}
		return out
	}
	all, err := choose(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names(all), "mdtest") || slices.Contains(names(all), "fuseuntar") {
		t.Errorf("no name chose %v: want the seeds' suite without the fuse group", names(all))
	}
	fuse, err := choose([]string{GroupFUSE})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(fuse); !slices.Equal(got, []string{"fusemeta", "fusepostmark", "fio", "fuseuntar"}) {
		t.Errorf("fuse chose %v", got)
	}
	both, err := choose([]string{"fio", "all", "fio"})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(both); len(got) != len(all)+1 || !slices.Contains(got, "fio") {
		t.Errorf("fio and all chose %v", names(both))
	}
	if _, err := choose([]string{"mdtest", "nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("an unknown name gave %v", err)
	}
}

// TestInterleavedSteps: with steps, each round runs a step on every target
// before the next step (starting one target later each round), and a
// target whose step fails runs no further step or round.
func TestInterleavedSteps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	env := testEnv(t, "tmpfs")
	ts := []Target{{Name: "a", Kind: kindTmpfs}, {Name: "b", Kind: kindTmpfs}, {Name: "c", Kind: kindTmpfs}}
	var order []string
	err := env.eachTargetInterleavedSteps(context.Background(), ts, 2, 3, func(m *Mount, rep, step int) error {
		order = append(order, fmt.Sprintf("%d.%d%s", rep, step, m.Target.Name))
		if m.Target.Name == "b" && rep == 0 && step == 1 {
			return errors.New("b fails")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "0.0a 0.0b 0.0c 0.1a 0.1b 0.1c 0.2a 0.2c 1.0c 1.0a 1.1c 1.1a 1.2c 1.2a"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("calls %q; want %q", got, want)
	}
}

// TestInterleavedTargets: eachTargetInterleaved mounts every target at once
// (a weft target that cannot start is skipped), starts each round one
// target later than the last, stops calling a target whose repeat failed,
// and unmounts everything at the end.
func TestInterleavedTargets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	env := testEnv(t, "tmpfs", "weft")
	ts := []Target{{Name: "a", Kind: kindTmpfs}, {Name: "b", Kind: kindTmpfs}, {Name: "weft", Kind: kindWeft}, {Name: "c", Kind: kindTmpfs}}
	dirs := map[string]string{}
	var order []string
	err := env.eachTargetInterleaved(context.Background(), ts, 3, func(m *Mount, rep int) error {
		order = append(order, fmt.Sprintf("%d%s", rep, m.Target.Name))
		dirs[m.Target.Name] = m.Dir
		for name, d := range dirs {
			if !isMounted(d) {
				t.Errorf("round %d, %s: %s's %s is not mounted", rep, m.Target.Name, name, d)
			}
		}
		if m.Target.Name == "b" && rep == 1 {
			return errors.New("b fails")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(order, " "), "0a 0b 0c 1b 1c 1a 2c 2a"; got != want {
		t.Errorf("calls %q; want %q", got, want)
	}
	for name, d := range dirs {
		if isMounted(d) {
			t.Errorf("%s's %s still mounted after the benchmark", name, d)
		}
	}
	skipped := strings.Join(env.run.skippedList(), "\n")
	if !strings.Contains(skipped, "target weft skipped") || !strings.Contains(skipped, "target b skipped (in test): b fails") {
		t.Errorf("skipped: %q", skipped)
	}
}
