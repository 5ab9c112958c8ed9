package bench

// fusepostmark and fuseuntar: issue 3's application workloads on every
// target, PostMark at the issue's size in transactions per second, and
// untar then rm -rf of the whole Linux source tarball, against the goals of
// the issue (PostMark at least 3× JuiceFS; untar faster than JuiceFS and
// sshfs).

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

func fusePostmarkBenchmark() Benchmark {
	return Benchmark{
		Name:  "fusepostmark",
		Group: GroupFUSE,
		Seed:  "issue 3, FUSE mount against peers",
		Doc:   "PostMark (Debian's postmark) with 2,000 files and 20,000 transactions; transactions per second",
		Notes: []string{
			"PostMark 1.51, 2,000 files of 500 B–10 KB in one directory, 20,000 transactions, seed 42 (--quick: " +
				"100 files, 250 transactions). Transactions per second is the transaction phase alone, timed by " +
				"this benchmark from PostMark's progress output (PostMark's own figure has a resolution of one " +
				"second); \"run + sync\" is the whole run (create the files, transactions, delete the files) and a " +
				"sync -f of the target. weft runs in sync durability (the goal) and, except with --quick, in async (an extra row). Median " +
				"over repeats with min–max.",
		},
		Run:     runFusePostmark,
		Tables:  fusePostmarkTables,
		Paper:   []Table{issueNumbers},
		Figures: fusePostmarkFigures,
		Goals:   fusePostmarkGoals,
	}
}

func fuseUntarBenchmark() Benchmark {
	return Benchmark{
		Name:  "fuseuntar",
		Group: GroupFUSE,
		Seed:  "issue 3, FUSE mount against peers",
		Doc:   "Untar of a whole Linux source tarball (Debian's linux-source), then rm -rf of the tree; seconds",
		Notes: []string{
			"The tarball is Debian's linux-source (/usr/src/linux-source-*.tar.xz), decompressed once into the " +
				"benchmark cache and read into the page cache before the runs, with every regular file and " +
				"directory and without its symlinks and hard links (as the untar benchmark, which explains why; " +
				"--quick: its first 300 entries). tar -xf, then sync -f of the target; rm -rf, then sync -f. " +
				"weft runs in sync durability (the goal) and, except with --quick, in async (an extra row). Median over repeats with min–max.",
		},
		Run:     runFuseUntar,
		Tables:  fuseUntarTables,
		Figures: fuseUntarFigures,
		Goals:   fuseUntarGoals,
	}
}

// PostMark's cases.
const (
	pmRate = "transactions/s"
	pmRun  = "run + sync, s"
)

func runFusePostmark(ctx context.Context, env *Env) ([]Result, error) {
	pm, err := env.run.tools.debian(ctx, "postmark", "postmark")
	if err != nil {
		return nil, err
	}
	env.run.version("postmark", "PostMark "+postmarkVersion(pm))
	files, transactions := 2000, 20000
	if env.Quick {
		files, transactions = 100, 250
	}
	reps := env.repeats()
	targets := env.macroTargets()
	env.progress(len(targets) * (1 + reps))
	var out []Result
	err = env.eachTarget(ctx, targets, nil, func(m *Mount) error {
		rate := Result{Bench: "fusepostmark", Case: pmRate, Target: m.Target.Name, Unit: "tx/s"}
		whole := Result{Bench: "fusepostmark", Case: pmRun, Target: m.Target.Name, Unit: "s"}
		for r := range reps {
			env.step(m.Target.Name)
			dir := filepath.Join(m.Dir, fmt.Sprintf("pm%d", r))
			conf := filepath.Join(env.Dir, fmt.Sprintf("postmark-%d.conf", r))
			tx, all, err := postmarkOnce(ctx, pm, conf, dir, files, transactions)
			if err != nil {
				return err
			}
			rate.Samples = append(rate.Samples, float64(transactions)/tx.Seconds())
			whole.Samples = append(whole.Samples, all.Seconds())
		}
		out = append(out, rate, whole)
		return nil
	})
	return out, err
}

// postmarkOnce runs PostMark in a new directory dir with its configuration
// written to conf, then syncs dir's file system. It returns the time of the
// transaction phase, from PostMark's progress output, and of the whole
// run with the sync.
func postmarkOnce(ctx context.Context, pm, conf, dir string, files, transactions int) (tx, all time.Duration, err error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return 0, 0, err
	}
	// Relative to its working directory: PostMark 1.51 crashes on a location
	// of more than about 90 bytes.
	if err := os.WriteFile(conf, []byte(postmarkScript(filepath.Base(dir), files, transactions)), 0o644); err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pm, conf)
	cmd.Dir = filepath.Dir(dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	// PostMark flushes its progress as it goes: "Creating files...Done",
	// "Performing transactions....Done", "Deleting files...Done".
	w := newPhaseWatch("Performing transactions", "Deleting files")
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	_, copyErr := io.Copy(w, stdout)
	if err := cmd.Wait(); err != nil {
		return 0, 0, fmt.Errorf("postmark: %v: %s", err, lastLine([]byte(stderr.String()+w.text())))
	}
	if copyErr != nil {
		return 0, 0, copyErr
	}
	if err := run(ctx, 10*time.Minute, "sync", "-f", dir); err != nil {
		return 0, 0, err
	}
	all = time.Since(start)
	seen := w.times()
	if seen[0].IsZero() || seen[1].IsZero() {
		return 0, 0, fmt.Errorf("postmark printed no transaction phase: %s", lastLine([]byte(w.text())))
	}
	return seen[1].Sub(seen[0]), all, nil
}

// postmarkScript is PostMark's configuration: files of 500 B–10 KB in
// location, a fixed seed.
func postmarkScript(location string, files, transactions int) string {
	return strings.Join([]string{
		"set location " + location,
		fmt.Sprintf("set number %d", files),
		fmt.Sprintf("set transactions %d", transactions),
		"set size 500 10000",
		"set seed 42",
		"run",
		"quit",
		"",
	}, "\n")
}

// phaseWatch is a writer that notes when each of its markers first appears
// in what is written to it.
type phaseWatch struct {
	mu      sync.Mutex
	markers []string
	seen    []time.Time
	buf     strings.Builder
}

func newPhaseWatch(markers ...string) *phaseWatch {
	return &phaseWatch{markers: markers, seen: make([]time.Time, len(markers))}
}

func (w *phaseWatch) Write(p []byte) (int, error) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for i, m := range w.markers {
		if w.seen[i].IsZero() && strings.Contains(w.buf.String(), m) {
			w.seen[i] = now
		}
	}
	return len(p), nil
}

func (w *phaseWatch) times() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time(nil), w.seen...)
}

func (w *phaseWatch) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func fusePostmarkTables(rs []Result) []Table {
	t := pivot(rs, "target", byTarget, byCase, nil, []string{pmRate, pmRun})
	t.Title = "PostMark (median over repeats, min–max):"
	return []Table{t}
}

func fusePostmarkFigures(rs []Result) []Figure {
	sub := filter(rs, func(r Result) bool { return r.Case == pmRate })
	return []Figure{barFigure("fusepostmark", "PostMark", "transactions/s", sub, byCase, byTarget)}
}

// fusePostmarkGoals: PostMark ≥ 3× JuiceFS in sync mode (issue 3), ≥ 5×
// in writeback mode (issue 14).
func fusePostmarkGoals(rs []Result) []string {
	var out []string
	for _, peer := range []string{kindJuiceFSSQLite, kindJuiceFSRedis} {
		out = append(out, goalAtLeast(rs, "fusepostmark transactions/s", pmRate, weftSync.name, peer, 3, false))
		out = append(out, goalAtLeast(rs, "fusepostmark transactions/s", pmRate, weftWriteback.name, peer, 5, false))
	}
	return out
}

// untarWhole stands for "every entry" of the kernel tarball (it has fewer
// than 100,000).
const untarWhole = 1000000

// fuseuntar's cases.
const (
	untarCase  = "untar, s"
	deleteCase = "rm -rf, s"
)

func runFuseUntar(ctx context.Context, env *Env) ([]Result, error) {
	entries := untarWhole
	switch {
	case env.UntarEntries > 0:
		entries = env.UntarEntries
	case env.Quick:
		entries = 300
	}
	tarball, err := untarInput(ctx, env, entries)
	if err != nil {
		return nil, err
	}
	if err := readAll(tarball); err != nil {
		return nil, err
	}
	reps := env.repeats()
	targets := env.macroTargets()
	env.progress(len(targets) * (1 + 2*reps))
	var out []Result
	err = env.eachTarget(ctx, targets, nil, func(m *Mount) error {
		u := Result{Bench: "fuseuntar", Case: untarCase, Target: m.Target.Name, Unit: "s"}
		d := Result{Bench: "fuseuntar", Case: deleteCase, Target: m.Target.Name, Unit: "s"}
		for r := range reps {
			dir := filepath.Join(m.Dir, fmt.Sprintf("u%d", r))
			env.step(m.Target.Name + ": untar")
			took, err := untarTree(ctx, tarball, dir)
			if err != nil {
				return err
			}
			u.Samples = append(u.Samples, took.Seconds())
			env.step(m.Target.Name + ": rm -rf")
			if took, err = removeTree(ctx, dir); err != nil {
				return err
			}
			d.Samples = append(d.Samples, took.Seconds())
		}
		out = append(out, u, d)
		return nil
	})
	return out, err
}

// untarTree extracts tarball into the new directory dir and syncs its file
// system; it returns the time both took.
func untarTree(ctx context.Context, tarball, dir string) (time.Duration, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := run(ctx, 60*time.Minute, "tar", "-xf", tarball, "-C", dir); err != nil {
		return 0, err
	}
	if err := run(ctx, 10*time.Minute, "sync", "-f", dir); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// removeTree runs rm -rf dir and syncs the file system it was on; it
// returns the time both took.
func removeTree(ctx context.Context, dir string) (time.Duration, error) {
	start := time.Now()
	if err := run(ctx, 60*time.Minute, "rm", "-rf", dir); err != nil {
		return 0, err
	}
	if err := run(ctx, 10*time.Minute, "sync", "-f", filepath.Dir(dir)); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func fuseUntarTables(rs []Result) []Table {
	t := pivot(rs, "target", byTarget, byCase, nil, []string{untarCase, deleteCase})
	t.Title = "Untar and rm -rf of the Linux source tree, seconds including sync (median over repeats, min–max):"
	return []Table{t}
}

func fuseUntarFigures(rs []Result) []Figure {
	return []Figure{barFigure("fuseuntar", "Untar and rm -rf of a Linux source tree", "seconds", rs, byCase, byTarget)}
}

// fuseUntarGoals: untar faster than JuiceFS and sshfs (shown as their time
// over weft's, so above 1× is faster).
func fuseUntarGoals(rs []Result) []string {
	var out []string
	for _, peer := range []string{kindJuiceFSSQLite, kindJuiceFSRedis, kindSSHFS} {
		out = append(out, goalAtLeast(rs, "fuseuntar speed (peer's time / weft's)", untarCase, weftSync.name, peer, 1, true))
	}
	for _, peer := range []string{kindJuiceFSSQLite, kindJuiceFSRedis} {
		out = append(out, goalAtLeast(rs, "fuseuntar speed (peer's time / weft's)", untarCase, weftWriteback.name, peer, 2, true))
	}
	return out
}

// macroTargets are the whole-workload benchmarks' targets: peerTargets,
// and (except with Quick, which keeps CI's run short) the mount's
// writeback mode next to sync in separate processes.
func (e *Env) macroTargets() []Target {
	if e.Quick {
		return e.peerTargets()
	}
	return e.leaseTargets()
}
