package bench

// find: the search issue's numbers at a small size. A tree of files in
// directories on an in-process cluster of four meta servers; the create
// rate with and without the search index, side by side; weft find against
// GNU find over a FUSE mount of the same tree, for a selective query (one
// match) and a broad one.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
)

func findBenchmark() Benchmark {
	return Benchmark{
		Name: "find",
		Seed: "seed 000 (Ringer), metadata search",
		Doc: "weft find against GNU find over a FUSE mount of the same tree (files in directories of 1,000, " +
			"4 meta servers in this process), for one match (-name of one file) and for every file (-type f); " +
			"and the create rate of the same tree with and without the search index",
		Notes: []string{
			"--quick builds 10,000 files, else 100,000 (the issue's goal is 1,000,000). Creates run from 16 " +
				"goroutines through the library, zero-length files, sync durability. GNU find runs as root over a " +
				"mount of a second client, one run after a warm-up (the kernel's attribute cache lasts 1 s, so it " +
				"still asks the meta servers for most entries); rows are missing where FUSE is not available.",
		},
		Run: runFindBench,
	}
}

func runFindBench(ctx context.Context, env *Env) ([]Result, error) {
	files := 100_000
	if env.Quick {
		files = 10_000
	}
	reps := env.repeats()
	env.progress(2*reps + 1)
	rates := map[bool]*Result{}
	for _, index := range []bool{true, false} {
		name := "weft, search index"
		if !index {
			name = "weft, no index"
		}
		rates[index] = &Result{Bench: "find", Case: fmt.Sprintf("create %d files, %d goroutines", files, findWorkers), Target: name, Unit: "creates/s"}
	}
	var out []Result
	var keep *findCluster
	for r := range reps {
		for _, index := range []bool{false, true} {
			env.step(fmt.Sprintf("create, index %v, run %d", index, r+1))
			fc, err := startFindCluster(ctx, filepath.Join(env.Dir, fmt.Sprintf("c%d-%v", r, index)), !index)
			if err != nil {
				return nil, err
			}
			rate, err := fc.build(ctx, files)
			if err != nil {
				return nil, errors.Join(err, fc.Close())
			}
			rates[index].Samples = append(rates[index].Samples, rate)
			if index && r == reps-1 {
				keep = fc
			} else if err := fc.Close(); err != nil {
				return nil, err
			}
		}
	}
	out = append(out, *rates[true], *rates[false])
	defer keep.Close()
	env.step("search")
	found, err := keep.searches(ctx, env, files, reps)
	return append(out, found...), err
}

// findCluster is the benchmark's in-process cluster.
type findCluster struct {
	closes []func() error
	cfg    *config.Cluster
	c      *client.Client
}

func startFindCluster(ctx context.Context, dir string, noIndex bool) (_ *findCluster, err error) {
	fc := &findCluster{cfg: config.Default()}
	defer func() {
		if err != nil {
			err = errors.Join(err, fc.Close())
		}
	}()
	var lns []net.Listener
	for range findMetas + 1 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	for i := range findMetas {
		fc.cfg.Meta = append(fc.cfg.Meta, config.DefaultMetaServer(lns[i].Addr().String(), filepath.Join(dir, fmt.Sprintf("meta%d", i))))
	}
	fc.cfg.Store = []config.StoreServer{config.DefaultStoreServer(lns[findMetas].Addr().String(), filepath.Join(dir, "store"))}
	st, err := cluster.StartStore(ctx, fc.cfg, 0, cluster.Options{Listener: lns[findMetas]})
	if err != nil {
		for _, l := range lns[:findMetas] {
			l.Close()
		}
		return fc, err
	}
	fc.closes = append(fc.closes, st.Close)
	for i := range findMetas {
		m, err := cluster.StartMeta(ctx, fc.cfg, i, cluster.Options{Listener: lns[i], NoSearchIndex: noIndex})
		if err != nil {
			for _, l := range lns[i+1 : findMetas] {
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

// build creates files zero-length files in directories of findPerDir
// under /tree and returns the create rate.
func (fc *findCluster) build(ctx context.Context, files int) (float64, error) {
	dirs := (files + findPerDir - 1) / findPerDir
	for d := range dirs {
		if err := fc.c.MkdirAll(ctx, fmt.Sprintf("/tree/d%03d", d), 0o755); err != nil {
			return 0, err
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, findWorkers)
	start := time.Now()
	for range findWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= files {
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
	return float64(files) / took.Seconds(), nil
}

// searches times weft find and GNU find over a mount on the built tree.
func (fc *findCluster) searches(ctx context.Context, env *Env, files, reps int) ([]Result, error) {
	target := fmt.Sprintf("f%07d", files/2)
	queries := []struct {
		name string
		args []string
	}{
		{fmt.Sprintf("one match (-name) in %d files", files), []string{"-name", target}},
		{fmt.Sprintf("every file (-type f), %d files", files), []string{"-type", "f"}},
	}
	var out []Result
	mnt, unmount, mountErr := fc.mount(env)
	if mountErr == nil {
		defer unmount()
	}
	for _, q := range queries {
		e, err := search.Parse(append([]string{"/tree"}, q.args...), search.Env{NowNs: time.Now().UnixNano()})
		if err != nil {
			return nil, err
		}
		wr := Result{Bench: "find", Case: q.name, Target: "weft find", Unit: "s"}
		gr := Result{Bench: "find", Case: q.name, Target: "GNU find over the mount", Unit: "s"}
		for range reps {
			start := time.Now()
			n := 0
			if err := fc.c.Find(ctx, "/tree", &e.Query, func(client.FindResult) error { n++; return nil }); err != nil {
				return nil, err
			}
			wr.Samples = append(wr.Samples, time.Since(start).Seconds())
			wr.Note = fmt.Sprintf("%d matches", n)
			if mountErr != nil {
				continue
			}
			start = time.Now()
			cmd := exec.CommandContext(ctx, "find", append([]string{filepath.Join(mnt, "tree")}, q.args...)...)
			cmd.Stdout = nil
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("find over the mount: %w", err)
			}
			gr.Samples = append(gr.Samples, time.Since(start).Seconds())
		}
		out = append(out, wr)
		if mountErr == nil {
			out = append(out, gr)
		} else {
			env.Log.Info("find: no mount to compare with", "err", mountErr)
		}
	}
	return out, nil
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
	// A warm-up run, so that both finds start from the same caches.
	_ = exec.Command("find", filepath.Join(dir, "tree"), "-name", "none").Run()
	return dir, func() {
		if err := m.Unmount(true); err != nil {
			m.Abort()
		}
	}, nil
}
