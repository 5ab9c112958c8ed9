// Package bench is weft's benchmark suite: each benchmark runs weft side by
// side with what it is measured against (a raw TCP ping-pong, raw Pebble,
// the local disk, later the peers), repeats every measurement, and writes
// results.json (every sample) and report.md (medians with min–max).
//
// Numbers from one run are compared as ratios within that run: these
// machines are shared and noisy, so an absolute time from another run means
// little.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// Options configure a run.
type Options struct {
	Out     string // directory for results.json and report.md
	Repeats int    // samples per measurement (default 3)
	Quick   bool   // small sizes, for CI
	Log     *slog.Logger
	Args    []string // the command line, recorded in the results
}

// Sample set of one measurement of one target.
type Result struct {
	Bench   string    `json:"bench"`
	Case    string    `json:"case"`   // e.g. "create", "64B round trip"
	Target  string    `json:"target"` // e.g. "weft", "raw pebble"
	Unit    string    `json:"unit"`   // e.g. "ops/s", "µs", "MB/s"
	Samples []float64 `json:"samples"`
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

// Benchmark is one entry of the suite.
type Benchmark struct {
	Name string
	Doc  string
	Run  func(ctx context.Context, env *Env) ([]Result, error)
	// Goals explain the results as ratios, for the report.
	Goals func(results []Result) []string
}

// Env is what a benchmark gets: a scratch directory and the options.
type Env struct {
	Dir string
	Options
}

// All returns the suite in report order.
func All() []Benchmark {
	return []Benchmark{rpcBenchmark(), metaBenchmark(), putGetBenchmark()}
}

// Report is a run's output.
type Report struct {
	Started  time.Time `json:"started"`
	Machine  Machine   `json:"machine"`
	Args     []string  `json:"args"`
	Results  []Result  `json:"results"`
	Goals    []string  `json:"goals"`
	Skipped  []string  `json:"skipped,omitempty"`
	Duration string    `json:"duration"`
}

// Machine describes where a run happened.
type Machine struct {
	CPUs    int    `json:"cpus"`
	Model   string `json:"cpu_model"`
	Memory  string `json:"memory"`
	Kernel  string `json:"kernel"`
	Go      string `json:"go"`
	DataDir string `json:"data_dir"`
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
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	scratch, err := os.MkdirTemp(opts.Out, "scratch-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	rep := &Report{Started: time.Now(), Machine: describeMachine(scratch), Args: opts.Args}
	for _, b := range chosen {
		opts.Log.Info("running", "bench", b.Name)
		dir := filepath.Join(scratch, b.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		res, err := b.Run(ctx, &Env{Dir: dir, Options: opts})
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
		os.RemoveAll(dir)
	}
	rep.Duration = time.Since(rep.Started).Round(time.Second).String()
	if err := rep.write(opts.Out); err != nil {
		return nil, err
	}
	return rep, nil
}

func choose(names []string) ([]Benchmark, error) {
	all := All()
	if len(names) == 0 || slices.Contains(names, "all") {
		return all, nil
	}
	var out []Benchmark
	for _, n := range names {
		i := slices.IndexFunc(all, func(b Benchmark) bool { return b.Name == n })
		if i < 0 {
			var known []string
			for _, b := range all {
				known = append(known, b.Name)
			}
			return nil, errs.New(errs.Invalid, "bench", "unknown benchmark %q (known: %s)", n, strings.Join(known, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

func (r *Report) write(dir string) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		return err
	}
	r.Markdown(f)
	return f.Close()
}

// Markdown writes the report as tables: one per benchmark, medians with
// min–max, then the goals as measured ratios.
func (r *Report) Markdown(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "Run %s, %s, on %d CPUs (%s), %s RAM, kernel %s, %s; data under %s.\n\n",
		r.Started.Format("2006-01-02 15:04 MST"), r.Duration, m.CPUs, m.Model, m.Memory, m.Kernel, m.Go, m.DataDir)
	fmt.Fprintf(w, "Command: `%s`\n", strings.Join(r.Args, " "))
	bench := ""
	for _, res := range r.Results {
		if res.Bench != bench {
			bench = res.Bench
			fmt.Fprintf(w, "\n### %s\n\n| case | target | median | min – max | samples |\n|---|---|---:|---:|---:|\n", bench)
		}
		s := slices.Clone(res.Samples)
		slices.Sort(s)
		fmt.Fprintf(w, "| %s | %s | %s %s | %s – %s | %d |\n", res.Case, res.Target,
			num(res.Median()), res.Unit, num(s[0]), num(s[len(s)-1]), len(s))
	}
	if len(r.Goals) > 0 {
		fmt.Fprintf(w, "\n### Goals\n\n")
		for _, g := range r.Goals {
			fmt.Fprintf(w, "- %s\n", g)
		}
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "\nSkipped: %s\n", s)
	}
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func describeMachine(dataDir string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), DataDir: dataDir}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				m.Model = strings.TrimSpace(line[strings.IndexByte(line, ':')+1:])
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0]); len(f) >= 2 {
			var kb float64
			fmt.Sscan(f[1], &kb)
			m.Memory = fmt.Sprintf("%.0f GiB", kb/(1<<20))
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
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
