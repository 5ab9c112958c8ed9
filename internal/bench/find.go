package bench

// find: the search issue's numbers at a small size. A tree of files in
// directories on an in-process cluster of four meta servers; the create
// rate with and without the search index, side by side; weft find against
// GNU find over a FUSE mount of the same tree, for a selective query (one
// match) and a broad one.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/fusefs"
	"github.com/weftfs/weft/internal/search"
)

const (
	findMetas   = 4
	findWorkers = 16
	findPerDir  = 1000
	// findSweepMax bounds the tree of the server-count sweep, which builds
	// it once per server count.
	findSweepMax = 100_000
)

// The search benchmark's queries: one file by name, one file in 10,000 by
// a pattern (the selective query; names are f%07d, so f???0000
// matches every 10,000th), and every file.
type findQuery struct {
	label, short string
	args         func(files int) []string
}

var (
	findOne = findQuery{"one match (-name NAME)", "one match", func(files int) []string {
		return []string{"-name", fmt.Sprintf("f%07d", files/2)}
	}}
	findSelective = findQuery{"1 in 10,000 (-name 'f???0000')", "1 in 10,000", func(int) []string { return []string{"-name", "f???0000"} }}
	findAll       = findQuery{"every file (-type f)", "every file", func(int) []string { return []string{"-type", "f"} }}
	findQueries   = []findQuery{findOne, findSelective, findAll}
)

// Targets and case prefixes of the find benchmark.
const (
	findWeft      = "weft find"
	findGNU       = "GNU find over the mount"
	findIndex     = "weft, search index"
	findNoIndex   = "weft, no index"
	findVsServers = "meta servers: "
	findRateCase  = "create rate"
)

func findBenchmark() Benchmark {
	return Benchmark{
		Name: "find",
		Seed: "seed 000 (Ringer), metadata search",
		Doc: "weft find against GNU find over a FUSE mount of the same tree (files in directories of 1,000, " +
			"4 meta servers in this process), for one match, one file in 10,000 and every file, as the tree grows; " +
			"the create rate of the same tree with and without the search index; and search latency against the " +
			"meta server count",
		Notes: []string{
			"The tree grows to each of --find-files in turn (default 10,000 and 100,000; --quick: 2,000 and 10,000; the " +
				"issue's goal is 1,000,000): zero-length files created from 16 goroutines through the library, sync " +
				"durability, on 4 meta servers and one store in this process. At each size weft find and GNU find run " +
				"the three queries (weft's Client.Find, which queries every meta server in parallel; GNU find as root over " +
				"a FUSE mount of a second client, after a warm-up; the kernel's attribute cache lasts 1 s, so it still asks " +
				"the meta servers for most entries). GNU find's rows are missing where FUSE is not available.",
			"The create rate is the whole build to the largest size, with and without the index (cluster.Options." +
				"NoSearchIndex), built alternately, once per repeat. The server sweep builds min(largest size, 100,000) " +
				"files on each of --find-servers meta servers (default 1, 2, 4, 8; --quick: 1, 2) and times weft find; " +
				"every server runs in this process, on the machine's cores.",
		},
		Run:     runFindBench,
		Tables:  findTables,
		Figures: findFigures,
		Goals:   findGoals,
	}
}

// findFiles are the sizes the tree is measured at, ascending.
func (e *Env) findFiles() []int {
	s := slices.Clone(e.FindFiles)
	switch {
	case len(s) > 0:
	case e.Quick:
		s = []int{2_000, 10_000}
	default:
		s = []int{10_000, 100_000}
	}
	slices.Sort(s)
	return slices.Compact(s)
}

func (e *Env) findServers() []int {
	switch {
	case len(e.FindServers) > 0:
		return e.FindServers
	case e.Quick:
		return []int{1, 2}
	}
	return []int{1, 2, 4, 8}
}

func runFindBench(ctx context.Context, env *Env) ([]Result, error) {
	sizes, servers := env.findFiles(), env.findServers()
	if sizes[0] <= 0 {
		return nil, fmt.Errorf("find: --find-files must be above 0, got %v", sizes)
	}
	files := sizes[len(sizes)-1]
	reps := env.repeats()
	env.progress(2*reps + len(servers))
	rates := map[bool]*Result{}
	for _, index := range []bool{true, false} {
		name := findIndex
		if !index {
			name = findNoIndex
		}
		rates[index] = &Result{Bench: "find", Case: fmt.Sprintf("%s, %d files, %d goroutines", findRateCase, files, findWorkers),
			Target: name, Unit: "creates/s", X: float64(files)}
	}
	var out []Result
	for r := range reps {
		for _, index := range []bool{false, true} {
			env.step(fmt.Sprintf("create %d files, index %v, run %d", files, index, r+1))
			fc, err := startFindCluster(ctx, filepath.Join(env.Dir, fmt.Sprintf("c%d-%v", r, index)), findMetas, !index)
			if err != nil {
				return nil, err
			}
			var took time.Duration
			var found []Result
			if index && r == reps-1 {
				// The last tree with the index is measured as it grows.
				took, found, err = fc.growAndSearch(ctx, env, sizes, reps)
			} else {
				took, err = fc.build(ctx, 0, files)
			}
			err = errors.Join(err, fc.Close())
			os.RemoveAll(filepath.Join(env.Dir, fmt.Sprintf("c%d-%v", r, index)))
			if err != nil {
				return nil, err
			}
			rates[index].Samples = append(rates[index].Samples, float64(files)/took.Seconds())
			out = append(out, found...)
		}
	}
	out = append(out, *rates[true], *rates[false])
	sweep, err := serverSweep(ctx, env, min(files, findSweepMax), servers, reps)
	return append(out, sweep...), err
}

// growAndSearch builds the tree to each size in turn and runs the queries
// at each; it returns the time spent creating.
func (fc *findCluster) growAndSearch(ctx context.Context, env *Env, sizes []int, reps int) (time.Duration, []Result, error) {
	mnt, unmount, mountErr := fc.mount(env)
	if mountErr == nil {
		defer unmount()
	} else {
		env.Log.Info("find: no mount to compare with", "err", mountErr)
	}
	var took time.Duration
	var out []Result
	made := 0
	for _, n := range sizes {
		d, err := fc.build(ctx, made, n)
		if err != nil {
			return 0, nil, err
		}
		took += d
		made = n
		if mountErr == nil {
			// A warm-up, so that every find starts from the same caches.
			_ = exec.CommandContext(ctx, "find", filepath.Join(mnt, "tree"), "-name", "none").Run()
		}
		for _, q := range findQueries {
			wr, gr, err := fc.search(ctx, q, n, mnt, mountErr == nil, reps)
			if err != nil {
				return 0, nil, err
			}
			out = append(out, wr)
			if len(gr.Samples) > 0 {
				out = append(out, gr)
			}
		}
	}
	return took, out, nil
}

// search times q on a tree of files files, with weft find and, if
// withGNU, GNU find over the mount at mnt, reps times each; the two must
// find as many.
func (fc *findCluster) search(ctx context.Context, q findQuery, files int, mnt string, withGNU bool, reps int) (wr, gr Result, err error) {
	args := q.args(files)
	e, err := search.Parse(append([]string{"/tree"}, args...), search.Env{NowNs: time.Now().UnixNano()})
	if err != nil {
		return wr, gr, err
	}
	wr = Result{Bench: "find", Case: q.label, Target: findWeft, Unit: "s", X: float64(files)}
	gr = Result{Bench: "find", Case: q.label, Target: findGNU, Unit: "s", X: float64(files)}
	var matches int
	for range reps {
		start := time.Now()
		matches = 0
		if err := fc.c.Find(ctx, "/tree", &e.Query, func(client.FindResult) error { matches++; return nil }); err != nil {
			return wr, gr, err
		}
		wr.Samples = append(wr.Samples, time.Since(start).Seconds())
		wr.Note = fmt.Sprintf("%d matches", matches)
		if !withGNU {
			continue
		}
		var lines lineCounter
		cmd := exec.CommandContext(ctx, "find", append([]string{filepath.Join(mnt, "tree")}, args...)...)
		cmd.Stdout = &lines
		start = time.Now()
		if err := cmd.Run(); err != nil {
			return wr, gr, fmt.Errorf("find over the mount: %w", err)
		}
		gr.Samples = append(gr.Samples, time.Since(start).Seconds())
		gr.Note = fmt.Sprintf("%d matches", lines.n)
		if lines.n != matches {
			return wr, gr, fmt.Errorf("find %v on %d files: weft find found %d, GNU find over the mount %d", args, files, matches, lines.n)
		}
	}
	return wr, gr, nil
}

// lineCounter counts the lines written to it.
type lineCounter struct{ n int }

func (l *lineCounter) Write(p []byte) (int, error) {
	l.n += bytes.Count(p, []byte{'\n'})
	return len(p), nil
}

// serverSweep builds a tree of files files on each count of meta servers
// and times weft find's queries on it.
func serverSweep(ctx context.Context, env *Env, files int, servers []int, reps int) ([]Result, error) {
	var out []Result
	for _, n := range servers {
		env.step(fmt.Sprintf("%d files on %d meta servers", files, n))
		dir := filepath.Join(env.Dir, fmt.Sprintf("sweep%d", n))
		fc, err := startFindCluster(ctx, dir, n, false)
		if err != nil {
			return nil, err
		}
		res, err := func() ([]Result, error) {
			took, err := fc.build(ctx, 0, files)
			if err != nil {
				return nil, err
			}
			rate := Result{Bench: "find", Case: fmt.Sprintf("%s%s, %d files", findVsServers, findRateCase, files), Target: findIndex,
				Unit: "creates/s", X: float64(n), Samples: []float64{float64(files) / took.Seconds()}}
			rs := []Result{rate}
			for _, q := range findQueries {
				wr, _, err := fc.search(ctx, q, files, "", false, reps)
				if err != nil {
					return nil, err
				}
				wr.Case = fmt.Sprintf("%s%s, %d files", findVsServers, q.label, files)
				wr.X = float64(n)
				rs = append(rs, wr)
			}
			return rs, nil
		}()
		err = errors.Join(err, fc.Close())
		os.RemoveAll(dir)
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
	}
	return out, nil
}

// findCluster is the benchmark's in-process cluster.
type findCluster struct {
	closes []func() error
	cfg    *config.Cluster
	c      *client.Client
}

func startFindCluster(ctx context.Context, dir string, metas int, noIndex bool) (_ *findCluster, err error) {
	fc := &findCluster{cfg: config.Default()}
	defer func() {
		if err != nil {
			err = errors.Join(err, fc.Close())
		}
	}()
	var lns []net.Listener
	for range metas + 1 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	for i := range metas {
		fc.cfg.Meta = append(fc.cfg.Meta, config.DefaultMetaServer(lns[i].Addr().String(), filepath.Join(dir, fmt.Sprintf("meta%d", i))))
	}
	fc.cfg.Store = []config.StoreServer{config.DefaultStoreServer(lns[metas].Addr().String(), filepath.Join(dir, "store"))}
	st, err := cluster.StartStore(ctx, fc.cfg, 0, cluster.Options{Listener: lns[metas]})
	if err != nil {
		for _, l := range lns[:metas] {
			l.Close()
		}
		return fc, err
	}
	fc.closes = append(fc.closes, st.Close)
	for i := range metas {
		m, err := cluster.StartMeta(ctx, fc.cfg, i, cluster.Options{Listener: lns[i], NoSearchIndex: noIndex})
		if err != nil {
			for _, l := range lns[i+1 : metas] {
				l.Close()
			}
			return fc, err
		}
		fc.closes = append(fc.closes, m.Close)
	}
	if fc.c, err = fc.client(); err != nil {
		return fc, err
	}
	return fc, nil
}

func (fc *findCluster) client() (*client.Client, error) {
	c, err := client.New(cluster.ClientConfig(fc.cfg, core.Root, nil))
	if err != nil {
		return nil, err
	}
	fc.closes = append(fc.closes, c.Close)
	return c, nil
}

// Close stops what started, last first.
func (fc *findCluster) Close() error {
	var all []error
	for i := len(fc.closes) - 1; i >= 0; i-- {
		all = append(all, fc.closes[i]())
	}
	fc.closes = nil
	return errors.Join(all...)
}

// build creates files from..to-1, zero-length, in directories of
// findPerDir under /tree, and returns how long that took.
func (fc *findCluster) build(ctx context.Context, from, to int) (time.Duration, error) {
	for d := from / findPerDir; d*findPerDir < to; d++ {
		if err := fc.c.MkdirAll(ctx, fmt.Sprintf("/tree/d%03d", d), 0o755); err != nil {
			return 0, err
		}
	}
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	errc := make(chan error, findWorkers)
	start := time.Now()
	for range findWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= to {
					return
				}
				f, err := fc.c.Create(ctx, fmt.Sprintf("/tree/d%03d/f%07d", i/findPerDir, i), 0o644)
				if err == nil {
					err = f.Close()
				}
				if err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return 0, err
	}
	return took, nil
}

// mount mounts a second client of the cluster, if this process may.
func (fc *findCluster) mount(env *Env) (string, func(), error) {
	if os.Geteuid() != 0 {
		return "", nil, errors.New("not root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return "", nil, err
	}
	if _, err := exec.LookPath("find"); err != nil {
		return "", nil, err
	}
	c, err := fc.client()
	if err != nil {
		return "", nil, err
	}
	dir := filepath.Join(env.Dir, "mnt")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	m, err := fusefs.New(dir, fusefs.Options{Client: c, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return "", nil, err
	}
	return dir, func() {
		if err := m.Unmount(true); err != nil {
			m.Abort()
		}
	}, nil
}

// findAt returns the result of case c and target t at x.
func findAt(rs []Result, c, t string, x float64) (Result, bool) {
	for _, r := range rs {
		if r.Case == c && r.Target == t && r.X == x && len(r.Samples) > 0 {
			return r, true
		}
	}
	return Result{}, false
}

// findSizes returns the xs of case c's results for target t, ascending.
func findXs(rs []Result, c, t string) []float64 {
	var xs []float64
	for _, r := range rs {
		if r.Case == c && r.Target == t && len(r.Samples) > 0 && !slices.Contains(xs, r.X) {
			xs = append(xs, r.X)
		}
	}
	slices.Sort(xs)
	return xs
}

func findTables(rs []Result) []Table {
	var out []Table
	sizes := findXs(rs, findSelective.label, findWeft)
	if len(sizes) > 0 {
		t := Table{
			Title: "Search latency as the tree grows, 4 meta servers: seconds (median over repeats, min–max), and weft find's " +
				"speed-up over GNU find over the mount",
			Header: []string{"files"},
		}
		for _, q := range findQueries {
			t.Header = append(t.Header, q.label+": weft find", "GNU find", "speed-up")
		}
		for _, n := range sizes {
			row := []string{groupThousands(fmt.Sprint(int(n)))}
			for _, q := range findQueries {
				w, wok := findAt(rs, q.label, findWeft, n)
				g, gok := findAt(rs, q.label, findGNU, n)
				speed := ""
				if wok && gok {
					speed = times(g.Median() / w.Median())
				}
				row = append(row, cell(w, wok), cell(g, gok), speed)
			}
			t.Rows = append(t.Rows, row)
		}
		out = append(out, t)
	}
	var rate Table
	for _, r := range rs {
		if !strings.HasPrefix(r.Case, findRateCase) || r.Target != findIndex {
			continue
		}
		without, ok := find(rs, r.Case, findNoIndex)
		if !ok || len(without.Samples) == 0 || len(r.Samples) == 0 {
			continue
		}
		rate = Table{
			Title:  "Create rate with and without the search index, built alternately (creates/s, median over repeats, min–max):",
			Header: []string{"case", "with the index", "without", "index's cost"},
			Rows: [][]string{{r.Case, cell(r, true), cell(without, true),
				fmt.Sprintf("%.1f%%", 100*(1-r.Median()/without.Median()))}},
		}
	}
	if rate.Header != nil {
		out = append(out, rate)
	}
	var sweep Table
	for _, r := range rs {
		if !strings.HasPrefix(r.Case, findVsServers) {
			continue
		}
		if sweep.Header == nil {
			sweep = Table{Title: "Against the number of meta servers (the same tree built on each; seconds or creates/s, median over repeats):",
				Header: []string{"case"}}
			for _, x := range findXs(rs, r.Case, r.Target) {
				unit := "servers"
				if x == 1 {
					unit = "server"
				}
				sweep.Header = append(sweep.Header, fmt.Sprintf("%d %s", int(x), unit))
			}
		}
		if slices.ContainsFunc(sweep.Rows, func(row []string) bool { return row[0] == strings.TrimPrefix(r.Case, findVsServers) }) {
			continue
		}
		row := []string{strings.TrimPrefix(r.Case, findVsServers)}
		for _, x := range findXs(rs, r.Case, r.Target) {
			v, ok := findAt(rs, r.Case, r.Target, x)
			row = append(row, cell(v, ok))
		}
		sweep.Rows = append(sweep.Rows, row)
	}
	if sweep.Header != nil {
		out = append(out, sweep)
	}
	return out
}

func findFigures(rs []Result) []Figure {
	bySize := filter(rs, func(r Result) bool {
		return (r.Case == findSelective.label || r.Case == findAll.label) && len(r.Samples) > 0
	})
	files := lineFigure("find-files", "Search latency against file count (4 meta servers)", "files", "seconds", bySize,
		func(r Result) string {
			name := strings.TrimSuffix(r.Target, " over the mount")
			for _, q := range findQueries {
				if q.label == r.Case {
					return name + ", " + q.short
				}
			}
			return name + ", " + r.Case
		})
	files.LogX, files.LogY, files.DecimalX = true, true, true
	byServers := filter(rs, func(r Result) bool {
		return strings.HasPrefix(r.Case, findVsServers) && r.Unit == "s" && len(r.Samples) > 0
	})
	servers := lineFigure("find-servers", "weft find latency against meta servers", "meta servers", "seconds", byServers,
		func(r Result) string {
			c := strings.TrimPrefix(r.Case, findVsServers)
			for _, q := range findQueries {
				if strings.HasPrefix(c, q.label) {
					return q.short + strings.TrimPrefix(c, q.label)
				}
			}
			return c
		})
	// Powers of two: 1, 2, 4, 8 servers.
	servers.LogX, servers.LogY = true, true
	return []Figure{files, servers}
}

func findGoals(rs []Result) []string {
	var out []string
	sizes := findXs(rs, findSelective.label, findWeft)
	if len(sizes) > 0 {
		n := sizes[len(sizes)-1]
		w, wok := findAt(rs, findSelective.label, findWeft, n)
		g, gok := findAt(rs, findSelective.label, findGNU, n)
		if wok {
			out = append(out, fmt.Sprintf("find: weft find of one file in 10,000 in %d files: %.3f s (goal: under 1 s at 1,000,000: %s)",
				int(n), w.Median(), metAt(w.Median() < 1, n)))
		}
		if wok && gok {
			out = append(out, fmt.Sprintf("find: weft find %.0f× faster than GNU find over the mount (1 in 10,000, %d files; goal ≥ 10×: %s)",
				g.Median()/w.Median(), int(n), metAt(g.Median()/w.Median() >= 10, n)))
		}
	}
	for _, r := range rs {
		if !strings.HasPrefix(r.Case, findRateCase) || r.Target != findIndex {
			continue
		}
		if without, ok := find(rs, r.Case, findNoIndex); ok && len(without.Samples) > 0 && len(r.Samples) > 0 {
			cost := 1 - r.Median()/without.Median()
			out = append(out, fmt.Sprintf("find: the index costs %.1f%% of the create rate (%s; goal ≤ 15%%: %s)",
				100*cost, r.Case, metAt(cost <= 0.15, r.X)))
		}
	}
	return out
}

// metAt is a goal's verdict, qualified when measured below the goal's
// 1,000,000 files.
func metAt(ok bool, files float64) string {
	v := "met"
	if !ok {
		v = "NOT met"
	}
	if files < 1_000_000 {
		v += fmt.Sprintf(" at %d files", int(files))
	}
	return v
}

// times formats a ratio: whole above 10, one decimal below.
func times(r float64) string {
	if r >= 10 {
		return fmt.Sprintf("%.0f×", r)
	}
	return fmt.Sprintf("%.1f×", r)
}
