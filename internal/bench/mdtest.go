package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// mdtest: seed 002's experiment. C client instances (library, no FUSE) create
// K zero-length files in ONE directory, stat them in random order, then
// remove them in random order, for N = 1, 2, 4, 8 meta servers, each server
// a process of its own capped at a fixed share of a core (cgroup CPU quota),
// so that the servers, not this two-core machine, bound the rate. The
// baseline is what the seed compared with: the same K files spread over N
// directories, one owned by each server, with no splitting.

const (
	mdtestCPU     = 0.1 // cores per meta server process
	mdtestClients = 8   // client instances, each with its own partition maps
	// mdtestStreams is the requests each client keeps in flight. A server
	// that has spent its quota stops until its period ends, and requests
	// pile up behind it; enough must be in flight that every other server
	// still finds a full quota's work queued when its period begins.
	mdtestStreams = 64
)

// mdtestFiles is K: the files of one run.
func (e *Env) mdtestFiles() int {
	switch {
	case e.MdtestFiles > 0:
		return e.MdtestFiles
	case e.Quick:
		return 2000
	}
	return 20000
}

func (e *Env) mdtestServers() []int {
	switch {
	case len(e.MdtestServers) > 0:
		return e.MdtestServers
	case e.Quick:
		return []int{1, 2}
	}
	return []int{1, 2, 4, 8}
}

// mdtestAllServers is every server count a table may have a row for.
var mdtestAllServers = []int{1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64}

const (
	mdtestOne  = "weft, 1 directory"
	mdtestMany = "weft, N directories (baseline)"
)

func mdtestBenchmark() Benchmark {
	return Benchmark{
		Name: "mdtest",
		Seed: "seed 002, GIGA+ on PanFS, mdtest",
		Doc:  "mdtest in one shared directory against the number of meta servers, vs N directories",
		Notes: []string{
			fmt.Sprintf("Each meta server is a process of its own (weft cluster start) capped at %.2f core by a cgroup CPU quota and run with GOMAXPROCS=1 (as a server with a fraction of a core should be), one store server; "+
				"%d client instances in the bench process (library, no FUSE), each with its own partition maps and %d requests in flight; durability async "+
				"(the servers' CPU, not one shared disk's fsync, is what the experiment scales).", mdtestCPU, mdtestClients, mdtestStreams),
			"The single directory's split threshold is K/256 (at least 16), so that it spans every server after about 3% of the creates; the cluster default is 4000. The baseline's N directories are made in a cluster with threshold 2 (so that their parent splits over every server, and each server owns one of them), which then restarts with a threshold above K: they never split.",
			"Redirects are requests a server sent back because the client's partition map was stale; entries per server are max / mean over servers after the create phase.",
			"Create rate at the end of the run: the last 10% of creates against the first 10%, single directory, largest N.",
		},
		Run: runMdtest,
		Tables: func(rs []Result) []Table {
			var out []Table
			for _, phase := range []string{"create", "stat", "remove"} {
				t := Table{Title: "mdtest " + phase + " (ops/s)", Header: []string{"meta servers", mdtestOne, mdtestMany, "1 dir / N dirs", "redirects per 1,000 ops"}}
				for _, n := range mdtestAllServers {
					one, ok1 := find(rs, fmt.Sprintf("%s, N=%d", phase, n), mdtestOne)
					many, ok2 := find(rs, fmt.Sprintf("%s, N=%d", phase, n), mdtestMany)
					red, _ := find(rs, fmt.Sprintf("%s redirects, N=%d", phase, n), mdtestOne)
					if !ok1 && !ok2 {
						continue
					}
					row := []string{fmt.Sprint(n), cell(one, ok1), cell(many, ok2), "", cell(red, len(red.Samples) > 0)}
					if ok1 && ok2 && many.Median() > 0 {
						row[3] = fmt.Sprintf("%.2f", one.Median()/many.Median())
					}
					t.Rows = append(t.Rows, row)
				}
				out = append(out, t)
			}
			t := Table{Title: "mdtest entries per meta server after creates (single directory)", Header: []string{"meta servers", "max", "mean"}}
			for _, n := range mdtestAllServers {
				mx, ok := find(rs, fmt.Sprintf("entries max, N=%d", n), mdtestOne)
				mean, _ := find(rs, fmt.Sprintf("entries mean, N=%d", n), mdtestOne)
				if ok {
					t.Rows = append(t.Rows, []string{fmt.Sprint(n), cell(mx, true), cell(mean, true)})
				}
			}
			return append(out, t)
		},
		Goals: mdtestGoals,
		Figures: func(rs []Result) []Figure {
			var figs []Figure
			for _, phase := range []string{"create", "stat", "remove"} {
				var sub []Result
				for _, r := range rs {
					if r.Unit == "ops/s" && len(r.Case) > len(phase) && r.Case[:len(phase)+1] == phase+"," {
						sub = append(sub, r)
					}
				}
				f := lineFigure("mdtest-"+phase, "mdtest "+phase+": ops/s against meta servers ("+fmt.Sprint(mdtestCPU)+" core each)",
					"meta servers", "ops/s", sub, func(r Result) string { return r.Target })
				figs = append(figs, f)
			}
			return figs
		},
	}
}

func mdtestGoals(rs []Result) []string {
	var out []string
	c1, ok1 := find(rs, "create, N=1", mdtestOne)
	for _, g := range []struct {
		n    int
		want float64
	}{{4, 3.2}, {8, 5.5}} {
		cn, ok := find(rs, fmt.Sprintf("create, N=%d", g.n), mdtestOne)
		if ok && ok1 {
			out = append(out, ratio(fmt.Sprintf("single-directory creates/s, N=%d / N=1", g.n), cn.Median(), c1.Median(),
				fmt.Sprintf("≥ %.1f×", g.want), cn.Median() >= g.want*c1.Median()))
		}
	}
	for _, n := range mdtestAllServers {
		for _, phase := range []string{"create", "stat", "remove"} {
			one, ok1 := find(rs, fmt.Sprintf("%s, N=%d", phase, n), mdtestOne)
			many, ok2 := find(rs, fmt.Sprintf("%s, N=%d", phase, n), mdtestMany)
			if ok1 && ok2 {
				out = append(out, ratio(fmt.Sprintf("%s, N=%d: one directory / N directories", phase, n), one.Median(), many.Median(),
					"≥ 0.8×", one.Median() >= 0.8*many.Median()))
			}
		}
		for _, phase := range []string{"stat", "remove"} {
			if red, ok := find(rs, fmt.Sprintf("%s redirects, N=%d", phase, n), mdtestOne); ok {
				out = append(out, fmt.Sprintf("%s, N=%d: %.2f redirects per 1,000 ops after warm-up (goal < 1: %s)",
					phase, n, red.Median(), verdict(red.Median() < 1)))
			}
		}
	}
	if r, ok := find(rs, "create rate, last 10% / first 10%", mdtestOne); ok {
		out = append(out, fmt.Sprintf("create rate of the last 10%% / first 10%%: %.2f (goal ≥ 0.8: %s)", r.Median(), verdict(r.Median() >= 0.8)))
	}
	return out
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func runMdtest(ctx context.Context, env *Env) ([]Result, error) {
	exe, err := env.weftBinary()
	if err != nil {
		return nil, err
	}
	k := env.mdtestFiles()
	var out []Result
	add := func(r Result, v float64) {
		for i := range out {
			if out[i].Case == r.Case && out[i].Target == r.Target {
				out[i].Samples = append(out[i].Samples, v)
				return
			}
		}
		r.Samples = []float64{v}
		out = append(out, r)
	}
	capped := true
	servers := env.mdtestServers()
	for rep := range env.repeats() {
		for _, n := range servers {
			for _, layout := range []string{mdtestOne, mdtestMany} {
				if n == 1 && layout == mdtestMany {
					// One server: one directory is the baseline.
					continue
				}
				dir := filepath.Join(env.Dir, fmt.Sprintf("mdtest-%d-%d-%d", rep, n, len(layout)))
				m, err := runMdtestOnce(ctx, exe, dir, n, k, layout == mdtestMany, &capped)
				os.RemoveAll(dir)
				if err != nil {
					return out, errs.Wrap(errs.KindOf(err), "mdtest", fmt.Sprintf("N=%d %s", n, layout), err)
				}
				targets := []string{layout}
				if n == 1 {
					targets = []string{mdtestOne, mdtestMany}
				}
				for _, t := range targets {
					for _, ph := range m.phases {
						add(Result{Bench: "mdtest", Case: fmt.Sprintf("%s, N=%d", ph.name, n), Target: t, Unit: "ops/s", X: float64(n)}, ph.rate)
						add(Result{Bench: "mdtest", Case: fmt.Sprintf("%s redirects, N=%d", ph.name, n), Target: t, Unit: "per 1,000 ops"}, ph.redirectsPerK)
					}
				}
				if layout == mdtestOne {
					add(Result{Bench: "mdtest", Case: fmt.Sprintf("entries max, N=%d", n), Target: layout, Unit: "entries"}, m.entriesMax)
					add(Result{Bench: "mdtest", Case: fmt.Sprintf("entries mean, N=%d", n), Target: layout, Unit: "entries"}, m.entriesMean)
					if n == servers[len(servers)-1] {
						add(Result{Bench: "mdtest", Case: "create rate, last 10% / first 10%", Target: layout, Unit: "ratio"}, m.tailRatio)
					}
				}
			}
		}
	}
	if !capped {
		env.run.note("mdtest: the meta servers ran WITHOUT a CPU cap (no cgroup CPU controller or not root): this machine's two cores, not the servers, bound these rates")
	}
	return out, nil
}

type mdtestPhase struct {
	name          string
	rate          float64
	redirectsPerK float64
}

type mdtestRun struct {
	phases                  []mdtestPhase
	entriesMax, entriesMean float64
	tailRatio               float64
}

// mdtestSplitThreshold is the single directory's split threshold for K
// files: small enough that the directory spans 8 servers after about 3% of
// the creates, so that the run measures the spread directory rather than
// its first splits.
func mdtestSplitThreshold(k int) int { return max(k/256, 16) }

// runMdtestOnce starts an n-meta-server cluster in dir, runs the three
// phases and stops the cluster.
func runMdtestOnce(ctx context.Context, exe, dir string, n, k int, spread bool, capped *bool) (*mdtestRun, error) {
	opts := cluster.ProcsOptions{
		Binary: exe, Dir: dir, Meta: n, Store: 1, Durability: "async",
		SplitThreshold: mdtestSplitThreshold(k), Backend: "mem",
	}
	var dirs []core.Ino
	if spread {
		// The baseline's directories, one owned by each server, are
		// subdirectories of a parent that splits over every server, so
		// they are made with the smallest threshold; then the cluster
		// restarts with a threshold above K, so that none of them splits.
		opts.SplitThreshold = config.MinSplitThreshold
		var err error
		if dirs, err = mdtestSpreadDirs(ctx, opts, n, capped); err != nil {
			return nil, err
		}
		opts.SplitThreshold = k + 1
	}
	procs, err := startMdtestCluster(ctx, opts, capped)
	if err != nil {
		return nil, err
	}
	defer procs.KillAll()
	cfg := procs.Config()
	clients := make([]*client.Client, mdtestClients)
	for i := range clients {
		c, err := client.New(cluster.ClientConfig(cfg, core.Root, nil))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		clients[i] = c
	}
	if !spread {
		a, err := clients[0].MkdirAt(ctx, core.RootIno, "mdtest", 0o755)
		if err != nil {
			return nil, err
		}
		dirs = []core.Ino{a.Ino}
	}
	names := make([]string, k)
	for i := range names {
		names[i] = fmt.Sprintf("file.mdtest.%d.%d", i%mdtestClients, i)
	}
	dirOf := func(i int) core.Ino { return dirs[i%len(dirs)] }
	run := &mdtestRun{}
	var marks [11]time.Time
	phase := func(name string, order []int, op func(c *client.Client, i int) error) error {
		before := redirects(clients)
		var next, done atomic.Int64
		start := time.Now()
		marks[0] = start
		var markMu sync.Mutex
		var wg sync.WaitGroup
		errc := make(chan error, len(clients)*mdtestStreams)
		for w := range len(clients) * mdtestStreams {
			c := clients[w%len(clients)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					j := int(next.Add(1)) - 1
					if j >= len(order) || ctx.Err() != nil {
						return
					}
					if err := op(c, order[j]); err != nil {
						errc <- err
						return
					}
					if d := done.Add(1); name == "create" && d%int64(max(k/10, 1)) == 0 && d/int64(max(k/10, 1)) <= 10 {
						markMu.Lock()
						marks[d/int64(max(k/10, 1))] = time.Now()
						markMu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		close(errc)
		if err := <-errc; err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		secs := time.Since(start).Seconds()
		red := float64(redirects(clients)-before) / float64(len(order)) * 1000
		run.phases = append(run.phases, mdtestPhase{name: name, rate: float64(len(order)) / secs, redirectsPerK: red})
		return nil
	}
	seq := make([]int, k)
	for i := range seq {
		seq[i] = i
	}
	err = phase("create", seq, func(c *client.Client, i int) error {
		_, err := c.MknodAt(ctx, dirOf(i), names[i], core.ModeFile|0o644, 0)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !marks[1].IsZero() && !marks[10].IsZero() {
		first := marks[1].Sub(marks[0]).Seconds()
		last := marks[10].Sub(marks[9]).Seconds()
		if last > 0 {
			run.tailRatio = first / last
		}
	}
	var total, most float64
	for id := range n {
		st, err := clients[0].MetaStatus(ctx, id)
		if err != nil {
			return nil, err
		}
		e := float64(st.Entries)
		total += e
		most = max(most, e)
	}
	run.entriesMax, run.entriesMean = most, total/float64(n)
	shuffled := slices.Clone(seq)
	rand.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
	err = phase("stat", shuffled, func(c *client.Client, i int) error {
		_, err := c.LookupAt(ctx, dirOf(i), names[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	rand.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
	err = phase("remove", shuffled, func(c *client.Client, i int) error {
		return c.UnlinkAt(ctx, dirOf(i), names[i])
	})
	if err != nil {
		return nil, err
	}
	if err := procs.Stop(); err != nil {
		return nil, err
	}
	return run, nil
}

func redirects(cs []*client.Client) uint64 {
	var n uint64
	for _, c := range cs {
		n += c.Redirects()
	}
	return n
}

// startMdtestCluster starts the cluster opts describes, with its meta
// servers capped unless an earlier start found that capping cannot work here.
func startMdtestCluster(ctx context.Context, opts cluster.ProcsOptions, capped *bool) (*cluster.Procs, error) {
	if *capped {
		opts.MetaCPU = mdtestCPU
	}
	procs, err := cluster.StartProcs(ctx, opts)
	if err != nil && *capped {
		// No cgroup CPU controller here (or not root): run uncapped and
		// say so in the report.
		*capped = false
		os.RemoveAll(opts.Dir)
		opts.MetaCPU = 0
		procs, err = cluster.StartProcs(ctx, opts)
	}
	return procs, err
}

// mdtestSpreadDirs starts the cluster opts describes and returns n
// directories owned by n different meta servers: subdirectories of
// /mdtest, made until it has split over every server (a directory is owned
// by the server of the partition its entry went to). It stops the cluster
// before it returns.
func mdtestSpreadDirs(ctx context.Context, opts cluster.ProcsOptions, n int, capped *bool) ([]core.Ino, error) {
	procs, err := startMdtestCluster(ctx, opts, capped)
	if err != nil {
		return nil, err
	}
	defer procs.KillAll()
	c, err := client.New(cluster.ClientConfig(procs.Config(), core.Root, nil))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	parent, err := c.MkdirAt(ctx, core.RootIno, "mdtest", 0o755)
	if err != nil {
		return nil, err
	}
	byServer := make([]core.Ino, n)
	found := 0
	for i := 0; found < n; i++ {
		if i > 1<<20 {
			return nil, errs.New(errs.Other, "mdtest", "could not spread directories over %d servers", n)
		}
		a, err := c.MkdirAt(ctx, parent.Ino, fmt.Sprintf("d%d", i), 0o755)
		if err != nil {
			return nil, err
		}
		if s := a.Ino.Server(); s < n && byServer[s] == 0 {
			byServer[s] = a.Ino
			found++
		}
	}
	return byServer, procs.Stop()
}
