package bench

// fusemeta: issue 3's metadata workload, mdtest-like. Two processes create
// zero-length files in ONE directory, then stat them, then remove them;
// ops/s per phase for every target, against the goals of the issue (weft's
// creates and removes at least 3× JuiceFS's and sshfs's, its stats at least
// JuiceFS's).

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// fusemetaRole is the fusemeta worker's role (workerEnv).
const fusemetaRole = "fusemeta"

var fusemetaPhases = []string{"create", "stat", "remove"}

// fusemetaDone is the word a worker says at the end of each phase.
var fusemetaDone = map[string]string{"create": "created", "stat": "statted", "remove": "removed"}

func fusemetaBenchmark() Benchmark {
	return Benchmark{
		Name:  "fusemeta",
		Group: GroupFUSE,
		Seed:  "issue 3, FUSE mount against peers",
		Doc: "mdtest-like metadata workload: 2 processes create zero-length files in ONE directory " +
			"(open O_CREAT|O_EXCL, close), then stat them, then remove them; ops/s per phase",
		Notes: []string{
			"2 worker processes (the weft binary re-run as a worker) × 20,000 files each (--quick: 200) in one " +
				"shared directory; each process works on its own names. A phase is timed from releasing both " +
				"processes to the last one's end, and its rate is all files of both processes over that time. The " +
				"stat phase follows the create phase with nothing dropped in between, as mdtest does (entries the " +
				"kernel still caches are answered without the file system). No sync at the end of a phase. weft " +
				"runs in sync durability (the goals); in async too, except with --quick (an extra row); and as separate " +
				"processes over TCP, in sync (weft (none)) and with the mount in writeback mode (weft (writeback)). " +
				"Median over repeats " +
				"with min–max.",
		},
		Run:     runFusemeta,
		Tables:  fusemetaTables,
		Paper:   []Table{issueNumbers},
		Figures: fusemetaFigures,
		Goals:   fusemetaGoals,
	}
}

// fusemetaSize is the number of processes and of files per process.
func fusemetaSize(quick bool) (procs, files int) {
	if quick {
		return 2, 200
	}
	return 2, 20000
}

func runFusemeta(ctx context.Context, env *Env) ([]Result, error) {
	procs, files := fusemetaSize(env.Quick)
	bin, err := env.weftBinary()
	if err != nil {
		return nil, err
	}
	reps := env.repeats()
	targets := env.leaseTargets()
	for _, t := range env.targets(weftWritebackLong) {
		if t.Kind == kindWeft && !env.Quick {
			targets = append(targets, t)
		}
	}
	env.progress(len(targets) * (1 + reps))
	var out []Result
	err = env.eachTarget(ctx, targets, nil, func(m *Mount) error {
		rows := newCaseRows("fusemeta", m.Target.Name, "ops/s", fusemetaPhases)
		for r := range reps {
			env.step(m.Target.Name)
			rates, err := fusemetaOnce(ctx, bin, filepath.Join(m.Dir, fmt.Sprintf("md%d", r)), procs, files)
			if err != nil {
				return err
			}
			rows.add(rates)
		}
		out = append(out, rows...)
		return nil
	})
	return out, err
}

// fusemetaOnce runs the three phases once in a new directory dir (removed
// again at the end) and returns the rate of each in ops/s.
func fusemetaOnce(ctx context.Context, bin, dir string, procs, files int) ([]float64, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	args := make([]string, procs)
	for i := range args {
		args[i] = fmt.Sprintf("%d p%d %s", files, i, dir)
	}
	g, err := startWorkers(ctx, bin, fusemetaRole, args)
	if err != nil {
		return nil, err
	}
	defer g.close()
	if err := g.wait("ready"); err != nil {
		return nil, err
	}
	rates := make([]float64, len(fusemetaPhases))
	for i, p := range fusemetaPhases {
		took, err := g.phase(fusemetaDone[p])
		if err != nil {
			return nil, fmt.Errorf("%s phase: %w", p, err)
		}
		rates[i] = float64(procs*files) / took.Seconds()
	}
	return rates, os.Remove(dir)
}

// runFusemetaWorker is one process of the workload: args are "FILES PREFIX
// DIR"; it creates DIR/PREFIX.0 … DIR/PREFIX.(FILES-1), stats them and
// removes them, one phase per release.
func runFusemetaWorker(in io.Reader, out io.Writer, args string) error {
	f := strings.SplitN(args, " ", 3)
	if len(f) != 3 {
		return fmt.Errorf("want %s=\"FILES PREFIX DIR\", got %q", workerArgsEnv, args)
	}
	files, err := strconv.Atoi(f[0])
	if err != nil || files < 0 {
		return fmt.Errorf("bad file count %q", f[0])
	}
	names := make([]string, files)
	for i := range names {
		names[i] = filepath.Join(f[2], fmt.Sprintf("%s.%d", f[1], i))
	}
	return runWorkerPhases(in, out, fusemetaPhases, fusemetaDone, func(phase string) error {
		return fusemetaPhase(phase, names)
	})
}

// fusemetaPhase runs one phase on every name with plain system calls, as
// mdtest's C does (no Go file objects, no poller).
func fusemetaPhase(phase string, names []string) error {
	var st syscall.Stat_t
	for _, n := range names {
		var err error
		switch phase {
		case "create":
			var fd int
			fd, err = syscall.Open(n, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o644)
			if err == nil {
				err = syscall.Close(fd)
			}
		case "stat":
			err = syscall.Stat(n, &st)
			if err == nil && st.Size != 0 {
				err = fmt.Errorf("size %d, want 0", st.Size)
			}
		case "remove":
			err = syscall.Unlink(n)
		default:
			return fmt.Errorf("unknown phase %q", phase)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", phase, n, err)
		}
	}
	return nil
}

func fusemetaTables(rs []Result) []Table {
	return []Table{caseTable(rs, fusemetaPhases, "ops/s",
		"Zero-length files in one directory, 2 processes, ops/s (median over repeats, min–max):")}
}

func fusemetaFigures(rs []Result) []Figure {
	return []Figure{barFigure("fusemeta", "2 processes, zero-length files in one directory", "ops/s", rs, byCase, byTarget)}
}

// fusemetaGoals: creates and removes ≥ 3× both JuiceFS configurations and
// sshfs (issue 3), and in writeback mode ≥ 4× them and ≥ 0.8× go-fuse's
// loopback (issue 14); stats ≥ JuiceFS.
func fusemetaGoals(rs []Result) []string {
	var out []string
	for _, p := range []string{"create", "remove"} {
		for _, peer := range []string{kindJuiceFSSQLite, kindJuiceFSRedis, kindSSHFS} {
			out = append(out, goalAtLeast(rs, "fusemeta "+p+"s", p, weftSync.name, peer, 3, false))
			out = append(out, goalAtLeast(rs, "fusemeta "+p+"s", p, weftWriteback.name, peer, 4, false))
		}
		out = append(out, goalAtLeast(rs, "fusemeta "+p+"s", p, weftWriteback.name, kindLoopback, 0.8, false))
	}
	for _, peer := range []string{kindJuiceFSSQLite, kindJuiceFSRedis} {
		out = append(out, goalAtLeast(rs, "fusemeta stats", "stat", weftSync.name, peer, 1, false))
	}
	return out
}

// goalAtLeast is a goal line "what: weft / peer: r× (goal ≥ k×: met)" for the
// medians of case c. With lowerIsBetter (seconds), the ratio is peer /
// weft, so that above 1 means weft is faster either way. A side without
// samples makes the line say what is missing.
func goalAtLeast(rs []Result, what, c, weft, peer string, k float64, lowerIsBetter bool) string {
	label := fmt.Sprintf("%s, %s vs %s", what, weft, peer)
	w, okW := find(rs, c, weft)
	p, okP := find(rs, c, peer)
	switch {
	case !okW || len(w.Samples) == 0:
		return label + ": not measured (" + weft + " has no result)"
	case !okP || len(p.Samples) == 0:
		return label + ": not measured (" + peer + " has no result)"
	}
	a, b := w.Median(), p.Median()
	if lowerIsBetter {
		a, b = b, a
	}
	return ratio(label, a, b, "≥ "+strconv.FormatFloat(k, 'f', -1, 64)+"×", a >= k*b)
}

// issueNumbers are the peers' numbers issue 3 quotes, measured on this
// machine before weft's mount existed.
var issueNumbers = Table{
	Title: "**The issue's numbers** (issue 3, measured on this machine on 2026-11-22, 2 processes × 20,000 " +
		"files in one directory; PostMark's settings not stated):",
	Header: []string{"target", "creates/s", "stats/s", "removes/s", "PostMark tx/s"},
	Rows: [][]string{
		{"JuiceFS", "~1,500", "~12,000–13,000", "~1,300–1,800", "~450–600"},
		{"sshfs", "1,500", "41,000", "2,900", "689"},
		{"go-fuse loopback (the FUSE ceiling)", "7,300", "37,000", "12,800", "4,000"},
	},
}

// peerTargets are the targets of issue 3's benchmarks: weft in sync mode
// (the goals are about it) and, except with --quick, in async mode as an
// extra row; the others as asked.
func (e *Env) peerTargets() []Target {
	if e.Quick {
		return e.targets(weftSync)
	}
	return e.targets(weftSync, weftAsync)
}

// leaseTargets are peerTargets and the mount's writeback mode next to sync,
// both as separate processes over TCP (weft (none) is sync there), as
// leases need.
func (e *Env) leaseTargets() []Target {
	targets := e.peerTargets()
	for _, t := range e.targets(weftNone, weftWriteback) {
		if t.Kind == kindWeft {
			targets = append(targets, t)
		}
	}
	return targets
}

// caseRows are the results of one target, one per case, filled a sample of
// every case at a time.
type caseRows []Result

func newCaseRows(bench, target, unit string, cases []string) caseRows {
	rows := make(caseRows, len(cases))
	for i, c := range cases {
		rows[i] = Result{Bench: bench, Case: c, Target: target, Unit: unit}
	}
	return rows
}

// add appends samples[i] to the row of case i.
func (rows caseRows) add(samples []float64) {
	for i := range rows {
		rows[i].Samples = append(rows[i].Samples, samples[i])
	}
}

// caseTable is a table with a row per target and a column per case, its
// headers "CASE, UNIT".
func caseTable(rs []Result, cases []string, unit, title string) Table {
	t := pivot(rs, "target", byTarget, byCase, nil, cases)
	for i, h := range t.Header[1:] {
		t.Header[i+1] = h + ", " + unit
	}
	t.Title = title
	return t
}
