package bench

// andrew: seed 001's Andrew benchmark with a Linux-kernel-shaped tree, per
// phase and per target.

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The phases, as the paper numbers them.
var andrewPhases = []string{"I mkdir ×5", "II copy", "III recursive list", "IV read twice", "V make"}

// andrewCPUUnit is the unit of the rows that give the CPU time (user and
// system) of a target's own processes (its servers and mount daemon) in
// each phase; their cases are the phase's name with andrewCPUSuffix.
const (
	andrewCPUUnit   = "CPU s"
	andrewCPUSuffix = ", CPU"
)

// andrewRequestsUnit is the unit of the rows that count the requests the
// target's servers served in each phase (their cases: the phase's name
// with andrewRequestsSuffix): the same work in every mode, or a mode asks
// for more.
const (
	andrewRequestsUnit   = "requests"
	andrewRequestsSuffix = ", requests"
)

func andrewBenchmark() Benchmark {
	return Benchmark{
		Name: "andrew",
		Seed: "seed 001, Snapdragon's Fig. 14, Andrew benchmark with Linux kernel source",
		Doc: "Andrew benchmark on a generated tree shaped like the paper's kernel source: I make its " +
			"directories 5 times, II copy its files into one copy, III list all copies recursively " +
			"(lstat of every entry), IV read every copied file twice, V run make, which compiles the " +
			"tree's C sources with gcc",
		Notes: []string{
			"The tree is generated deterministically (andrewtree.go): 690 directories, 10,528 files, ~127 MB, " +
				"97% of the files under 64 KB, all but a few under 900 KB, the largest ~2 MB; 681 of the files are " +
				"C sources, and make builds an object and a dependency file for each (make dep and make in one pass, " +
				"gcc -MMD, make -j with one job per CPU): 1,362 new files. --quick uses a tree a twentieth of the size. " +
				"The source tree sits in the benchmark cache on the local disk, in the page cache. Seconds per phase, " +
				"median over repeats with min–max; each repeat runs in a fresh directory of the same mount.",
			"weft runs once per security mode (seed 001's secure vs non-secure comparison), each as separate " +
				"processes (weft cluster start: one meta and one store server, then weft mount) so that every call " +
				"crosses a real connection: none is plaintext with no checks; secure authenticates every connection " +
				"(mutual TLS 1.3) and MACs every record and capability; private also encrypts (TLS 1.3 AES-GCM). " +
				"The modes are mounted at once and take each phase in turn (phase I on every mode, then phase II on " +
				"every mode, ...; each repeat starts one mode later than the last), so that a phase's samples of the " +
				"modes lie seconds apart and meet the same load; other targets run after them, one after the other. " +
				"The CPU rows add up the user and system time of each mode's processes (mount daemon, meta server, " +
				"store server) over the phase, and the request rows what the servers served (their metrics), in all and by method.",
		},
		Run:     runAndrew,
		Goals:   andrewGoals,
		Tables:  andrewTables,
		Paper:   []Table{paperAndrew},
		Figures: andrewFigures,
	}
}

func runAndrew(ctx context.Context, env *Env) ([]Result, error) {
	shape := andrewFull
	if env.Quick {
		shape = andrewQuick
	}
	for _, tool := range []string{"gcc", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("andrew's phase V needs %s (Debian build-essential)", tool)
		}
	}
	env.run.version("gcc", commandVersion("gcc", "--version"))
	tree, err := loadAndrewTree(env.run.tools.cache, shape)
	if err != nil {
		return nil, fmt.Errorf("generating the tree: %w", err)
	}
	reps := env.repeats()
	targets := env.targets(weftNone, weftSecure, weftPrivate)
	// The modes are compared with each other (secure within 5% of none):
	// they run interleaved, the peers one after the other.
	var modes, peers []Target
	for _, t := range targets {
		if t.Kind == kindWeft {
			modes = append(modes, t)
		} else {
			peers = append(peers, t)
		}
	}
	env.progress(len(targets) * (1 + reps*len(andrewPhases)))
	results := make(map[string]*andrewSeries)
	counted := false
	// begin starts repeat rep on m, in a fresh directory.
	begin := func(m *Mount, rep int) (*andrewRepeat, error) {
		dir := filepath.Join(m.Dir, fmt.Sprintf("run%d", rep))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		return newAndrewRepeat(env, tree, dir, m), nil
	}
	// end adds what repeat a measured to its target's results.
	end := func(a *andrewRepeat) {
		res, ok := results[a.m.Target.Name]
		if !ok {
			res = &andrewSeries{target: a.m.Target.Name, rows: make(map[string][]Result)}
			results[a.m.Target.Name] = res
		}
		if !counted {
			n, b := buildOutputs(a.dir)
			env.note(fmt.Sprintf("andrew: the tree has %d directories, %d files, %.0f MB; make wrote %d files, %.1f MB "+
				"(the paper: 690, 10,528, ~127 MB; 1,362 files, 13 MB).", len(tree.Dirs), len(tree.Files), float64(tree.Bytes)/1e6, n, float64(b)/1e6))
			counted = true
		}
		res.add(a.run)
	}
	failed := make(map[string]bool) // skipped: no row
	// The modes take each phase in turn (phase I on every mode, then phase
	// II on every mode, ...): a mode's sample of a phase lies seconds from
	// the others', not a whole repeat (minutes), so the load it meets is
	// theirs. A phase's CPU seconds follow the load (the servers' and the
	// mount's context switches cost more on a busy machine): measured a
	// repeat apart, phase I's CPU differed between modes by as much as
	// within one (docs/benchmarks.md, issue 13).
	current := make(map[string]*andrewRepeat) // by target: its current repeat
	err = env.eachTargetInterleavedSteps(ctx, modes, reps, len(andrewPhases), func(m *Mount, rep, phase int) error {
		a := current[m.Target.Name]
		if phase == 0 {
			var err error
			if a, err = begin(m, rep); err != nil {
				failed[m.Target.Name] = true
				return err
			}
			current[m.Target.Name] = a
		}
		if err := a.phase(ctx, phase); err != nil {
			failed[m.Target.Name] = true
			return err
		}
		if phase == len(andrewPhases)-1 {
			end(a)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = env.eachTarget(ctx, peers, nil, func(m *Mount) error {
		for rep := range reps {
			a, err := begin(m, rep)
			if err == nil {
				for i := range andrewPhases {
					if err = a.phase(ctx, i); err != nil {
						break
					}
				}
			}
			if err != nil {
				failed[m.Target.Name] = true
				return err
			}
			end(a)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, t := range targets {
		if res, ok := results[t.Name]; ok && !failed[t.Name] {
			out = append(out, res.results()...)
		}
	}
	return out, nil
}

// andrewRun is what one repeat measured, per phase: its seconds and, if
// the target's processes are known, their CPU seconds (all of them, and
// by role: mount, meta, store) and the requests its servers served.
type andrewRun struct {
	times    []float64
	cpu      map[string][]float64 // by andrewCPUSuffix + role; the suffix alone: all processes
	requests []float64
	methods  map[string][]float64 // the requests by method (requestsByMethod)
}

// andrewSeries gathers one target's repeats: rows by case suffix ("" for
// the seconds), each the phases' results and then the total's.
type andrewSeries struct {
	target string
	order  []string
	rows   map[string][]Result
	runs   int // repeats added so far
}

func (a *andrewSeries) add(run andrewRun) {
	a.addPhases("", "s", run.times)
	// The total first, then the roles in a fixed order.
	for _, suffix := range andrewCPURows(run.cpu) {
		a.addPhases(suffix, andrewCPUUnit, run.cpu[suffix])
	}
	if run.requests != nil {
		a.addPhases(andrewRequestsSuffix, andrewRequestsUnit, run.requests)
	}
	a.addMethods(run.methods)
	a.runs++
}

// addMethods adds one repeat's requests by method. A method first served
// in this repeat served none in the earlier ones (the counters only grow),
// and one served before but not now none in this one: both are zeros,
// not missing samples.
func (a *andrewSeries) addMethods(methods map[string][]float64) {
	if methods == nil {
		return
	}
	zeros := make([]float64, len(andrewPhases))
	for _, m := range slices.Sorted(maps.Keys(methods)) {
		suffix := andrewMethodSuffix(m)
		if _, ok := a.rows[suffix]; !ok {
			for range a.runs {
				a.addPhases(suffix, andrewRequestsUnit, zeros)
			}
		}
		a.addPhases(suffix, andrewRequestsUnit, methods[m])
	}
	for _, suffix := range a.order {
		if strings.HasPrefix(suffix, andrewMethodPrefix) && len(a.rows[suffix][0].Samples) == a.runs {
			a.addPhases(suffix, andrewRequestsUnit, zeros)
		}
	}
}

// andrewMethodPrefix begins the case suffix of the rows of one method's
// requests.
const andrewMethodPrefix = andrewRequestsSuffix + ": "

func andrewMethodSuffix(method string) string { return andrewMethodPrefix + method }

// addPhases adds one repeat's value of each phase, and their total, to the
// rows of suffix.
func (a *andrewSeries) addPhases(suffix, unit string, phases []float64) {
	res, ok := a.rows[suffix]
	if !ok {
		for _, p := range append(append([]string{}, andrewPhases...), "total") {
			res = append(res, Result{Bench: "andrew", Case: p + suffix, Target: a.target, Unit: unit})
		}
		a.order = append(a.order, suffix)
	}
	var total float64
	for i, v := range phases {
		res[i].Samples = append(res[i].Samples, v)
		total += v
	}
	res[len(phases)].Samples = append(res[len(phases)].Samples, total)
	a.rows[suffix] = res
}

func (a *andrewSeries) results() []Result {
	var out []Result
	for _, suffix := range a.order {
		out = append(out, a.rows[suffix]...)
	}
	return out
}

// andrewCPURows are the keys of cpu in report order: all processes, then
// each role.
func andrewCPURows(cpu map[string][]float64) []string {
	var out []string
	for _, k := range []string{andrewCPUSuffix, andrewCPUSuffix + " mount", andrewCPUSuffix + " meta", andrewCPUSuffix + " store"} {
		if _, ok := cpu[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

// andrewRepeat is one repeat of the five phases in dir on m, run a phase
// at a time, and what it measured so far.
type andrewRepeat struct {
	env    *Env
	tree   *andrewTree
	dir    string
	m      *Mount
	copies []string
	run    andrewRun
}

func newAndrewRepeat(env *Env, tree *andrewTree, dir string, m *Mount) *andrewRepeat {
	a := &andrewRepeat{env: env, tree: tree, dir: dir, m: m, copies: make([]string, 5)}
	for i := range a.copies {
		a.copies[i] = filepath.Join(dir, fmt.Sprintf("copy%d", i))
	}
	return a
}

// work is phase i's work.
func (a *andrewRepeat) work(ctx context.Context, i int) error {
	switch i {
	case 0: // I: the directories, five times
		for _, c := range a.copies {
			if err := os.Mkdir(c, 0o755); err != nil {
				return err
			}
			for _, d := range a.tree.Dirs {
				if err := os.Mkdir(filepath.Join(c, d), 0o755); err != nil {
					return err
				}
			}
		}
		return nil
	case 1:
		return copyFiles(ctx, a.tree, a.copies[0])
	case 2: // III: ls -lR of every copy
		for _, c := range a.copies {
			if err := listTree(c); err != nil {
				return err
			}
		}
		return nil
	case 3: // IV: every copied file, twice
		for range 2 {
			if err := readFiles(ctx, a.copies[0], a.tree.Files); err != nil {
				return err
			}
		}
		return nil
	case 4:
		return runMake(ctx, a.copies[0])
	}
	return fmt.Errorf("andrew has no phase %d", i)
}

// phase runs phase i (the phases in order, each once) and records what it
// measured.
func (a *andrewRepeat) phase(ctx context.Context, i int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n := len(andrewPhases)
	if a.run.times == nil {
		a.run.times = make([]float64, n)
	}
	a.env.step(a.m.Target.Name + ": " + andrewPhases[i])
	before, err := readPhaseCounters(ctx, a.m, true)
	if err != nil {
		return fmt.Errorf("phase %s: %w", andrewPhases[i], err)
	}
	start := time.Now()
	if err := a.work(ctx, i); err != nil {
		return fmt.Errorf("phase %s: %w", andrewPhases[i], err)
	}
	a.run.times[i] = time.Since(start).Seconds()
	after, err := readPhaseCounters(ctx, a.m, false)
	if err != nil {
		return fmt.Errorf("phase %s: %w", andrewPhases[i], err)
	}
	a.run.addCounters(i, n, before, after)
	return nil
}

// phaseCounters are a target's counters at a phase's start or end.
type phaseCounters struct {
	cpu         map[string]time.Duration // by role; nil if the processes are unknown
	requests    map[string]float64       // by method
	hasRequests bool
}

// readPhaseCounters reads m's counters at a phase's start or end. The
// servers' CPU times are read nearest the phase (after the request
// counters at its start, before them at its end), so that serving the
// scrape of the counters is not charged to the phase.
func readPhaseCounters(ctx context.Context, m *Mount, start bool) (phaseCounters, error) {
	var c phaseCounters
	var err error
	readRequests := func() error {
		if c.requests, c.hasRequests, err = m.Requests(ctx); err != nil {
			return fmt.Errorf("request counts: %w", err)
		}
		return nil
	}
	if start {
		if err := readRequests(); err != nil {
			return c, err
		}
	}
	if c.cpu, _, err = m.CPUByProcess(); err != nil {
		return c, fmt.Errorf("CPU time: %w", err)
	}
	if !start {
		if err := readRequests(); err != nil {
			return c, err
		}
	}
	return c, nil
}

// addCounters records what phase i (of n) used: after less before.
func (r *andrewRun) addCounters(i, n int, before, after phaseCounters) {
	if after.cpu != nil {
		if r.cpu == nil {
			r.cpu = make(map[string][]float64)
		}
		var all time.Duration
		for role, d := range after.cpu {
			used := d - before.cpu[role]
			all += used
			k := andrewCPUSuffix + " " + role
			if r.cpu[k] == nil {
				r.cpu[k] = make([]float64, n)
			}
			r.cpu[k][i] = used.Seconds()
		}
		if r.cpu[andrewCPUSuffix] == nil {
			r.cpu[andrewCPUSuffix] = make([]float64, n)
		}
		r.cpu[andrewCPUSuffix][i] = all.Seconds()
	}
	if after.hasRequests {
		if r.requests == nil {
			r.requests = make([]float64, n)
			r.methods = make(map[string][]float64)
		}
		r.requests[i] = sumRequests(after.requests) - sumRequests(before.requests)
		for m, v := range after.requests {
			if d := v - before.requests[m]; d != 0 {
				if r.methods[m] == nil {
					r.methods[m] = make([]float64, n)
				}
				r.methods[m][i] = d
			}
		}
	}
}

func copyFiles(ctx context.Context, tree *andrewTree, dst string) error {
	buf := make([]byte, 256<<10)
	for _, f := range tree.Files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := copyFile(filepath.Join(tree.Root, f), filepath.Join(dst, f), buf); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, buf []byte) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(struct{ io.Writer }{out}, in, buf); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// listTree reads every directory under root and lstats every entry.
func listTree(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		_, err = os.Lstat(path)
		return err
	})
}

func readFiles(ctx context.Context, root string, files []string) error {
	buf := make([]byte, readBuf)
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		in, err := os.Open(filepath.Join(root, f))
		if err != nil {
			return err
		}
		for {
			if _, err = in.Read(buf); err != nil {
				break
			}
		}
		in.Close()
		if err != io.EOF {
			return err
		}
	}
	return nil
}

func runMake(ctx context.Context, dir string) error {
	cmd := exec.CommandContext(ctx, "make", "-s", "-j", fmt.Sprint(runtime.NumCPU()))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("make: %v: %s", err, lastLine(out))
	}
	return nil
}

// buildOutputs counts the files make wrote under dir (objects and
// dependency files) and their bytes.
func buildOutputs(dir string) (n int, bytes int64) {
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".o") || strings.HasSuffix(path, ".d")) {
			n++
			if info, err := d.Info(); err == nil {
				bytes += info.Size()
			}
		}
		return nil
	})
	return n, bytes
}

func andrewTables(rs []Result) []Table {
	times := filter(rs, func(r Result) bool { return r.Unit == "s" })
	t := pivot(times, "phase (s)", byCase, byTarget, andrewCases(""), nil)
	t.Title = "Seconds per phase (median over repeats, min–max):"
	ts := []Table{t}
	cpu := andrewRows(rs, andrewCPUSuffix)
	if len(cpu) > 0 {
		c := pivot(cpu, "phase (CPU s)", byCase, byTarget, andrewCases(andrewCPUSuffix), nil)
		c.Title = "CPU seconds of the target's own processes (its servers and the mount daemon; user and system) " +
			"per phase, median over repeats, min–max. What a mode adds here bounds what it can add to a phase's " +
			"time, whatever the machine's load:"
		ts = append(ts, c)
	}
	var byRole []Result
	var roleCases []string
	for _, role := range []string{"mount", "meta", "store"} {
		byRole = append(byRole, andrewRows(rs, andrewCPUSuffix+" "+role)...)
		roleCases = append(roleCases, andrewCases(andrewCPUSuffix+" "+role)...)
	}
	if len(byRole) > 0 {
		c := pivot(byRole, "phase, process (CPU s)", byCase, byTarget, roleCases, nil)
		c.Title = "The same CPU seconds by process:"
		ts = append(ts, c)
	}
	if req := andrewRows(rs, andrewRequestsSuffix); len(req) > 0 {
		c := pivot(req, "phase (requests)", byCase, byTarget, andrewCases(andrewRequestsSuffix), nil)
		c.Title = "Requests the target's servers served per phase (all methods), median over repeats, min–max:"
		ts = append(ts, c)
	}
	if by := andrewMethodRows(rs); len(by) > 0 {
		c := pivot(by, "phase: method (requests)", byCase, byTarget, andrewMethodCases(by), nil)
		c.Title = "The same requests by method (a status other than ok follows the method), median over repeats, " +
			"min–max. Read leases last 2 s: a phase that takes longer renews more of them, and asks again the " +
			"names and attributes they covered (lease_acquire, lookup, getattr):"
		ts = append(ts, c)
	}
	return ts
}

// andrewMethodRows are the rows of requests by method, but the totals'.
func andrewMethodRows(rs []Result) []Result {
	return filter(rs, func(r Result) bool {
		p, suffix, ok := strings.Cut(r.Case, andrewMethodPrefix)
		return ok && suffix != "" && p != "total"
	})
}

// andrewMethodCases are the cases of rows in report order: by phase, then
// by method; a method no target called in the phase has no row.
func andrewMethodCases(rows []Result) []string {
	var out []string
	for _, p := range andrewPhases {
		var cases []string
		for _, r := range rows {
			called := slices.ContainsFunc(r.Samples, func(v float64) bool { return v != 0 })
			if called && strings.HasPrefix(r.Case, p+andrewMethodPrefix) && !slices.Contains(cases, r.Case) {
				cases = append(cases, r.Case)
			}
		}
		slices.Sort(cases)
		out = append(out, cases...)
	}
	return out
}

// andrewCases are the cases of the rows of suffix: each phase's, then the
// total's.
func andrewCases(suffix string) []string {
	var out []string
	for _, p := range append(append([]string{}, andrewPhases...), "total") {
		out = append(out, p+suffix)
	}
	return out
}

// andrewRows are the results of rs among the cases of suffix.
func andrewRows(rs []Result, suffix string) []Result {
	cases := andrewCases(suffix)
	return filter(rs, func(r Result) bool { return slices.Contains(cases, r.Case) })
}

// andrewGoals are seed 001's headline, per phase: secure at most 5% slower
// than none, private at most 15%: ratios none / mode of the seconds of at
// least 0.95 and 0.87.
func andrewGoals(rs []Result) []string {
	var out []string
	for _, p := range append(append([]string{}, andrewPhases...), "total") {
		out = append(out,
			goalAtLeast(rs, "andrew "+p, p, weftSecure.name, weftNone.name, 0.95, true),
			goalAtLeast(rs, "andrew "+p, p, weftPrivate.name, weftNone.name, 0.87, true))
		if _, ok := find(rs, p+andrewCPUSuffix, weftSecure.name); ok {
			out = append(out, andrewCPUGoal(rs, p, weftSecure.name, 0.05), andrewCPUGoal(rs, p, weftPrivate.name, 0.15))
		}
	}
	return out
}

// andrewCPUGoal bounds what mode costs in phase p by CPU: the CPU seconds
// its processes used beyond none's, as a share of none's seconds in the
// phase. Even if every added CPU second lay on the phase's critical path,
// the phase would be at most that much slower; a load that blurs the
// seconds (repeats of one mode 10-100% apart on a shared machine) hardly
// moves a process's own CPU time.
func andrewCPUGoal(rs []Result, p, mode string, most float64) string {
	label := fmt.Sprintf("andrew %s, CPU %s adds to %s, as a share of %s's seconds", p, mode, weftNone.name, weftNone.name)
	c, okC := find(rs, p+andrewCPUSuffix, mode)
	n, okN := find(rs, p+andrewCPUSuffix, weftNone.name)
	t, okT := find(rs, p, weftNone.name)
	if !okC || !okN || !okT || len(c.Samples) == 0 || len(n.Samples) == 0 || len(t.Samples) == 0 || t.Median() <= 0 {
		return label + ": not measured"
	}
	share := (c.Median() - n.Median()) / t.Median()
	verdict := "met"
	if share > most {
		verdict = "NOT met"
	}
	return fmt.Sprintf("%s: %+.1f%% (%.2f s − %.2f s of %.2f s; goal ≤ %.0f%%: %s)",
		label, 100*share, c.Median(), n.Median(), t.Median(), 100*most, verdict)
}

func andrewFigures(rs []Result) []Figure {
	phases := filter(rs, func(r Result) bool { return r.Case != "total" && r.Unit == "s" })
	return []Figure{barFigure("andrew", "Andrew benchmark: seconds per phase", "seconds", phases, byCase, byTarget)}
}
