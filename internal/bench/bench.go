// Package bench is weft's benchmark suite (weft bench): each seed's evaluation
// reproduced on this machine, with weft side by side with what a user would
// pick instead, plus the core benchmarks of weft's own layers against what
// bounds them (a raw TCP ping-pong, raw Pebble, cp on the local disk).
//
// A benchmark measures targets: mount points the suite prepares itself and
// always tears down, in bounded time, even when a benchmark fails or the run
// is interrupted (target*.go): weft's FUSE mount (weft up --mount, run as a
// child process), a local directory, tmpfs, sshfs against a private sshd,
// JuiceFS with SQLite and with Redis metadata, and go-fuse's loopback file
// system (the FUSE ceiling). Benchmarks that measure weft's library (micro,
// the chunk size sweep) run an embedded cluster in this process, and put the
// injected-latency link (package linksim) between client and servers to
// stand for a LAN or a DSL line. A target that cannot be set up is reported
// as skipped with its reason, and the run goes on.
//
// Every measurement is repeated; the report gives medians with min–max, in
// tables shaped like the seed's, with the paper's own numbers beside them
// (paper.go), and plots for every figure-shaped result (plot.go). Numbers
// from one run are compared as ratios within that run: these machines are
// shared and noisy, so an absolute time from another run means little.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// Options configure a run.
type Options struct {
	Out     string // directory for results.json, report.md and the plots
	Repeats int    // samples per measurement (default 3)
	Quick   bool   // small sizes, for CI
	Log     *slog.Logger
	Args    []string // the command line, recorded in the results

	// Targets names what the file-system benchmarks measure (see
	// TargetNames); empty means weft and local.
	Targets []string
	// Cache keeps what the suite installs or generates once (JuiceFS, the
	// loopback binary, the Andrew tree, the untar tarball). Empty means
	// $XDG_CACHE_HOME/weft-bench or ~/.cache/weft-bench.
	Cache string
	// Weft is the weft binary that runs the weft FUSE target and the
	// benchmarks' worker processes; empty means this executable.
	Weft string
	// BaseWeft, if set, is a weft binary built from an older commit: each
	// weft FUSE target gets a "(base)" column run with it, and the goals
	// give new/base ratios, so a change's cost is measured in one run.
	BaseWeft string
	// Progress, if set, receives progress bars (a terminal).
	Progress io.Writer
	// ProgressEvery is how often a run without Progress logs which
	// benchmark still runs (default 30s).
	ProgressEvery time.Duration
	// MdtestFiles is mdtest's K, the files of one run (0: 20,000; 2,000
	// with Quick).
	MdtestFiles int
	// UntarEntries is how many entries of the kernel tree fuseuntar
	// unpacks (0: the whole tree, 300 with Quick).
	UntarEntries int
	// MdtestServers lists the meta server counts mdtest runs (empty: 1, 2,
	// 4, 8; 1, 2 with Quick).
	MdtestServers []int
	// FindFiles are the tree sizes the find benchmark measures at, the
	// largest being its full tree (empty: 10,000 and 100,000; 2,000 and
	// 10,000 with Quick).
	FindFiles []int
	// FindServers lists the meta server counts of find's server sweep
	// (empty: 1, 2, 4, 8; 1, 2 with Quick).
	FindServers []int
	// RepairBytes is what the repair benchmark writes before it empties a
	// store (0: 1 GiB; 64 MiB with Quick).
	RepairBytes int64
	// InstallDeps lets the suite install missing Debian packages (sshd,
	// sshfs, redis-server, postmark, linux-source) with apt-get when it runs
	// as root.
	InstallDeps bool
}

// Result is the sample set of one measurement of one target.
type Result struct {
	Bench   string    `json:"bench"`
	Case    string    `json:"case"`   // e.g. "create", "64B round trip"
	Target  string    `json:"target"` // e.g. "weft", "raw pebble"
	Unit    string    `json:"unit"`   // e.g. "ops/s", "µs", "MB/s"
	Samples []float64 `json:"samples"`
	// X is the measurement's position on a figure's x axis (bytes read,
	// file size), when it has one.
	X float64 `json:"x,omitempty"`
	// Note explains a row without samples ("not yet available: ...").
	Note string `json:"note,omitempty"`
}

// Median returns the median sample.
func (r Result) Median() float64 {
	s := slices.Clone(r.Samples)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Range returns the smallest and largest sample.
func (r Result) Range() (lo, hi float64) {
	if len(r.Samples) == 0 {
		return 0, 0
	}
	return slices.Min(r.Samples), slices.Max(r.Samples)
}

// Benchmark is one entry of the suite.
type Benchmark struct {
	Name string
	Doc  string
	// Group is "" for the benchmarks that "all" runs (the core numbers and
	// the seeds' evaluations), else the name that runs the group (Groups).
	Group string
	Run   func(ctx context.Context, env *Env) ([]Result, error)
	// Goals explain the results as ratios, for the report.
	Goals func(results []Result) []string

	// Seed names the evaluation the benchmark reproduces, if any.
	Seed string
	// Notes say how the benchmark is run and where it differs from the
	// paper.
	Notes []string
	// Tables shape the results like the seed's table; nil lists every
	// result as a row.
	Tables func(results []Result) []Table
	// Paper holds the seed's published numbers, with its hardware.
	Paper []Table
	// Figures are the plots drawn from the results.
	Figures func(results []Result) []Figure
}

// Env is what a benchmark gets: a scratch directory, the options, and the
// run's shared state (targets, tools, progress, skip list).
type Env struct {
	Dir string
	Options
	bench string
	run   *runState
}

// GroupFUSE names the FUSE issue's table against peers: its prescribed
// sizes (a whole kernel untar, 20,000 PostMark transactions, 40,000 files)
// take longer than "all" may.
const GroupFUSE = "fuse"

// Groups are the names that choose several benchmarks at once.
var Groups = []string{"all", GroupFUSE, GroupOps}

// All returns the suite in report order.
func All() []Benchmark {
	return []Benchmark{
		rpcBenchmark(), metaBenchmark(), putGetBenchmark(),
		microBenchmark(), leasesBenchmark(), seqreadBenchmark(), andrewBenchmark(), securityBenchmark(), mdtestBenchmark(),
		checkpointBenchmark(), untarBenchmark(), postmarkBenchmark(),
		latfsBenchmark(), seqioBenchmark(), imapBenchmark(),
		fusemetaBenchmark(), fusePostmarkBenchmark(), fioBenchmark(), fuseUntarBenchmark(),
		repairBenchmark(), findBenchmark(), durabilityBenchmark(),
	}
}

// Report is a run's output.
type Report struct {
	Started  time.Time         `json:"started"`
	Machine  Machine           `json:"machine"`
	Args     []string          `json:"args"`
	Targets  []string          `json:"targets"`
	Versions map[string]string `json:"versions"`
	Results  []Result          `json:"results"`
	Goals    []string          `json:"goals"`
	Skipped  []string          `json:"skipped,omitempty"`
	Notes    []string          `json:"notes,omitempty"`
	Figures  []string          `json:"figures,omitempty"` // files written next to the report
	// Took is how long each benchmark ran, in seconds.
	Took     map[string]float64 `json:"took"`
	Duration string             `json:"duration"`
}

// Run runs the named benchmarks ("all" for every one) and writes the report.
func Run(ctx context.Context, names []string, opts Options) (*Report, error) {
	if opts.Repeats <= 0 {
		opts.Repeats = 3
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Out == "" {
		return nil, errs.New(errs.Invalid, "bench", "no output directory")
	}
	chosen, err := choose(names)
	if err != nil {
		return nil, err
	}
	targets, err := parseTargets(opts.Targets)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	out, err := filepath.Abs(opts.Out)
	if err != nil {
		return nil, err
	}
	opts.Out = out
	scratch, err := os.MkdirTemp(opts.Out, "scratch-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	st, err := newRunState(opts, targets)
	if err != nil {
		return nil, err
	}
	// Whatever a benchmark left mounted or running goes away here, also
	// when the run is interrupted.
	defer st.closeAll()

	rep := &Report{Started: time.Now(), Machine: describeMachine(scratch), Args: opts.Args, Targets: opts.Targets,
		Took: map[string]float64{}}
	if len(rep.Targets) == 0 {
		rep.Targets = defaultTargets
	}
	beat, stopBeat := context.WithCancel(ctx)
	beatDone := make(chan struct{})
	go func() {
		defer close(beatDone)
		st.heartbeat(beat)
	}()
	defer func() {
		stopBeat()
		<-beatDone
	}()
	for i, b := range chosen {
		opts.Log.Info("running", "bench", b.Name, "of", fmt.Sprintf("%d/%d", i+1, len(chosen)))
		st.startBench(b.Name)
		dir := filepath.Join(scratch, b.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		env := &Env{Dir: dir, Options: opts, bench: b.Name, run: st}
		began := time.Now()
		res, err := b.Run(ctx, env)
		rep.Took[b.Name] = time.Since(began).Seconds()
		st.endProgress()
		st.closeAll()
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %v", b.Name, err))
			opts.Log.Warn("benchmark failed", "bench", b.Name, "err", err)
			continue
		}
		rep.Results = append(rep.Results, res...)
		if b.Goals != nil {
			rep.Goals = append(rep.Goals, b.Goals(res)...)
		}
		rep.Goals = append(rep.Goals, baseGoals(res)...)
		os.RemoveAll(dir)
	}
	rep.Skipped = append(rep.Skipped, st.skippedList()...)
	rep.Notes = append(rep.Notes, st.notes()...)
	rep.Versions = st.versionMap()
	rep.Duration = time.Since(rep.Started).Round(time.Second).String()
	if err := rep.write(opts.Out); err != nil {
		return nil, err
	}
	return rep, nil
}

// choose returns the benchmarks names (and groups) select, in suite order:
// "all" (or no name) selects those of no group.
func choose(names []string) ([]Benchmark, error) {
	if len(names) == 0 {
		names = []string{"all"}
	}
	all := All()
	var known []string
	for _, b := range all {
		known = append(known, b.Name)
	}
	for _, n := range names {
		if !slices.Contains(known, n) && !slices.Contains(Groups, n) {
			return nil, errs.New(errs.Invalid, "bench", "unknown benchmark %q (known: %s; groups: %s)",
				n, strings.Join(known, ", "), strings.Join(Groups, ", "))
		}
	}
	var out []Benchmark
	for _, b := range all {
		group := b.Group
		if group == "" {
			group = "all"
		}
		if slices.Contains(names, b.Name) || slices.Contains(names, group) {
			out = append(out, b)
		}
	}
	return out, nil
}

// ratio formats a/b as a goal line.
func ratio(what string, a, b float64, goal string, ok bool) string {
	verdict := "met"
	if !ok {
		verdict = "NOT met"
	}
	return fmt.Sprintf("%s: %.2f× (goal %s: %s)", what, a/b, goal, verdict)
}

// find returns the result of case c for target t.
func find(rs []Result, c, t string) (Result, bool) {
	for _, r := range rs {
		if r.Case == c && r.Target == t {
			return r, true
		}
	}
	return Result{}, false
}

// repeats is how many samples a benchmark takes: the run's setting, but at
// least 2 so a row never rests on one sample.
func (e *Env) repeats() int { return max(e.Repeats, 2) }
