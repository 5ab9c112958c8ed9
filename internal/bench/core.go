package bench

// The core benchmarks of the transport, the metadata path and the data path,
// each against the thing that bounds it on this machine.

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
)

func rpcBenchmark() Benchmark {
	return Benchmark{
		Name: "rpc",
		Doc:  "64-byte round trip on loopback: weft's transport vs a raw TCP ping-pong",
		Run: func(ctx context.Context, env *Env) ([]Result, error) {
			n := 20000
			if env.Quick {
				n = 2000
			}
			med := []Result{
				{Bench: "rpc", Case: "64 B round trip, median", Target: "weft rpc", Unit: "µs"},
				{Bench: "rpc", Case: "64 B round trip, median", Target: "raw TCP", Unit: "µs"},
			}
			p99 := []Result{
				{Bench: "rpc", Case: "64 B round trip, p99", Target: "weft rpc", Unit: "µs"},
				{Bench: "rpc", Case: "64 B round trip, p99", Target: "raw TCP", Unit: "µs"},
			}
			for range env.Repeats {
				rl, raw, err := rpc.MeasureRoundTrip(ctx, n, 64)
				if err != nil {
					return nil, err
				}
				for i, l := range [][]time.Duration{rl, raw} {
					slices.Sort(l)
					med[i].Samples = append(med[i].Samples, us(l[len(l)/2]))
					p99[i].Samples = append(p99[i].Samples, us(l[len(l)*99/100]))
				}
			}
			return append(med, p99...), nil
		},
		Goals: func(rs []Result) []string {
			a, _ := find(rs, "64 B round trip, median", "weft rpc")
			b, _ := find(rs, "64 B round trip, median", "raw TCP")
			return []string{ratio("rpc round trip / raw TCP round trip (median)", a.Median(), b.Median(), "≤ 1.5×", a.Median() <= 1.5*b.Median())}
		},
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// startWeft runs an embedded cluster (disk backend, the given durability)
// in dir and returns a root client's configuration for it and a function
// that stops it.
func startWeft(ctx context.Context, dir, durability string) (client.Config, func(), error) {
	emb, err := cluster.StartEmbedded(ctx, cluster.EmbeddedOptions{Dir: dir, Durability: durability, Backend: "disk"})
	if err != nil {
		return client.Config{}, nil, err
	}
	return cluster.ClientConfig(emb.Config(), core.Root, nil), func() { emb.Close() }, nil
}

const metaWorkers = 16

func metaBenchmark() Benchmark {
	return Benchmark{
		Name: "meta",
		Doc: "16 goroutines, zero-length files in one directory through the library (one meta " +
			"server, sync mode) vs raw synced Pebble inserts of the same keys at the same concurrency",
		Run: func(ctx context.Context, env *Env) ([]Result, error) {
			files := 20000
			if env.Quick {
				files = 2000
			}
			phases := []string{"create", "stat", "remove"}
			res := map[string]*Result{}
			for _, p := range append(phases, "raw insert") {
				target := "weft"
				if p == "raw insert" {
					target = "raw pebble (sync)"
				}
				res[p] = &Result{Bench: "meta", Case: fmt.Sprintf("%s, %d files, %d goroutines", p, files, metaWorkers), Target: target, Unit: "ops/s"}
			}
			for r := range env.Repeats {
				rates, err := metaRun(ctx, filepath.Join(env.Dir, fmt.Sprint("weft", r)), files)
				if err != nil {
					return nil, err
				}
				for i, p := range phases {
					res[p].Samples = append(res[p].Samples, rates[i])
				}
				raw, err := rawPebbleRun(filepath.Join(env.Dir, fmt.Sprint("pebble", r)), files)
				if err != nil {
					return nil, err
				}
				res["raw insert"].Samples = append(res["raw insert"].Samples, raw)
			}
			var out []Result
			for _, p := range append(phases, "raw insert") {
				out = append(out, *res[p])
			}
			return out, nil
		},
		Goals: func(rs []Result) []string {
			var create, raw Result
			for _, r := range rs {
				switch {
				case r.Target == "weft" && len(r.Case) > 6 && r.Case[:6] == "create":
					create = r
				case r.Target != "weft":
					raw = r
				}
			}
			return []string{ratio("library creates / raw synced Pebble inserts", create.Median(), raw.Median(), "≥ 1/3", create.Median()*3 >= raw.Median())}
		},
	}
}

// metaRun creates, stats and removes files in one directory with
// metaWorkers goroutines and returns the three rates.
func metaRun(ctx context.Context, dir string, files int) ([]float64, error) {
	cc, stop, err := startWeft(ctx, dir, "sync")
	if err != nil {
		return nil, err
	}
	defer stop()
	c, err := client.New(cc)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	d, err := c.MkdirAt(ctx, core.RootIno, "bench", 0o755)
	if err != nil {
		return nil, err
	}
	name := func(i int) string { return fmt.Sprintf("file.%07d", i) }
	ops := []func(i int) error{
		func(i int) error {
			f, err := c.CreateAt(ctx, d.Ino, name(i), os.O_WRONLY|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			return f.Close()
		},
		func(i int) error { _, err := c.LookupAt(ctx, d.Ino, name(i)); return err },
		func(i int) error { return c.UnlinkAt(ctx, d.Ino, name(i)) },
	}
	var rates []float64
	for _, op := range ops {
		rate, err := parallel(files, op)
		if err != nil {
			return nil, err
		}
		rates = append(rates, rate)
	}
	return rates, nil
}

// parallel runs op(0..n-1) on metaWorkers goroutines and returns ops/s.
func parallel(n int, op func(i int) error) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	start := time.Now()
	for range metaWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := op(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), first
}

// rawPebbleRun inserts files keys shaped like directory entries (dir inode,
// name, ~100-byte value) with Sync from metaWorkers goroutines: the rate at
// which this disk and Pebble can make single-key commits durable.
func rawPebbleRun(dir string, files int) (float64, error) {
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: quietLogger{}})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	value := make([]byte, 100)
	return parallel(files, func(i int) error {
		return db.Set([]byte(fmt.Sprintf("E\x00\x00\x00\x00\x00\x00\x00\x02file.%07d", i)), value, pebble.Sync)
	})
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// Targets of the putget benchmark.
const (
	cpPlain   = "cp (local disk, page cache)"
	cpSync    = "cp + fsync (local disk)"
	putSync   = "weft put (sync mode: durable at close)"
	putAsync  = "weft put (async mode)"
	getTarget = "weft get"
	// The same with the same-host path off: the bytes go through loopback
	// TCP, as they do between machines.
	putSyncTCP  = "weft put over TCP (sync mode)"
	putAsyncTCP = "weft put over TCP (async mode)"
	getTCP      = "weft get over TCP"
	// With a base build: weft put and get as processes of each build.
	putProcess = "weft put (process)"
	getProcess = "weft get (process)"
)

func putGetBenchmark() Benchmark {
	return Benchmark{
		Name: "putget",
		Doc: "copy a file into weft and out again through the library (what weft put/get do) " +
			"vs cp on the local disk, with and without fsync",
		Run: func(ctx context.Context, env *Env) ([]Result, error) {
			size := int64(1 << 30)
			if env.Quick {
				size = 64 << 20
			}
			src := filepath.Join(env.Dir, "source")
			if err := randomFile(src, size); err != nil {
				return nil, err
			}
			// The servers run in a weft up process when there is a weft
			// binary, as users run them; under go test, in this process.
			bin := upBinary(env)
			where := "servers in a weft up process"
			if bin == "" {
				where = "servers in the benchmark's process"
			}
			// Per durability mode, a client with the same-host path (what
			// weft put and get use on the store's machine) and one without.
			weft := map[string][]*client.Client{}
			for _, mode := range []string{"sync", "async"} {
				dir := filepath.Join(env.Dir, "weft-"+mode)
				var cc client.Config
				var stop func()
				var err error
				if bin != "" {
					cc, stop, err = startUpProcess(ctx, bin, dir, mode)
				} else {
					cc, stop, err = startWeft(ctx, dir, mode)
				}
				if err != nil {
					return nil, err
				}
				defer stop()
				for _, tcp := range []bool{false, true} {
					cc.NoSameHost = tcp
					c, err := client.New(cc)
					if err != nil {
						return nil, err
					}
					defer c.Close()
					weft[mode] = append(weft[mode], c)
				}
			}
			label := fmt.Sprintf("%d MiB file, %s", size>>20, where)
			res := map[string]*Result{}
			order := []string{cpPlain, cpSync, putSync, putAsync, getTarget, putSyncTCP, putAsyncTCP, getTCP}
			for _, t := range order {
				res[t] = &Result{Bench: "putget", Case: label, Target: t, Unit: "MB/s"}
			}
			dst := filepath.Join(env.Dir, "copy")
			// Every target writes into memory freed just before, untimed:
			// by the removal of dst, or for weft put by truncating its
			// file, whose old chunk files the stores delete. (On a VM that
			// reports free memory to its host, memory that stays free for a
			// few seconds costs a host fault per page when it is used
			// again: a cost of the machine that would otherwise fall on
			// whichever target writes longest after the last delete.)
			const name = "/big"
			type step struct {
				target string
				put    *client.Client // the client weft put runs with; nil: the step writes dst
				fn     func() error
			}
			timed := func(st step) error {
				// Untimed: write back what the previous target left dirty
				// (weft put in async mode leaves 1 GiB), so that no target
				// runs while the kernel flushes another one's file.
				syscall.Sync()
				if st.put == nil {
					// cp and weft get write dst: remove the last copy
					// first, untimed. (Overwriting it would make ext4
					// flush the new file at close, as it does for a file
					// replaced by truncation, and time that flush.)
					if err := os.Remove(dst); err != nil && !os.IsNotExist(err) {
						return err
					}
				} else if err := st.put.Truncate(ctx, name, 0); err != nil && !errs.Is(err, errs.NotExist) {
					// weft put writes name: its last copy's chunks go
					// first, untimed, as dst's removal does for cp.
					return err
				}
				t := time.Now()
				if err := st.fn(); err != nil {
					return fmt.Errorf("%s: %w", st.target, err)
				}
				res[st.target].Samples = append(res[st.target].Samples, float64(size)/1e6/time.Since(t).Seconds())
				return nil
			}
			put := func(target string, c *client.Client) step {
				return step{target, c, func() error { return copyIn(ctx, c, src, name) }}
			}
			get := func(target string, c *client.Client) step {
				return step{target, nil, func() error { return copyOut(ctx, c, name, dst) }}
			}
			for range env.Repeats {
				steps := []step{
					{cpPlain, nil, func() error { return cp(ctx, src, dst, false) }},
					{cpSync, nil, func() error { return cp(ctx, src, dst, true) }},
					put(putSync, weft["sync"][0]),
					put(putAsync, weft["async"][0]),
					get(getTarget, weft["sync"][0]),
					put(putSyncTCP, weft["sync"][1]),
					put(putAsyncTCP, weft["async"][1]),
					get(getTCP, weft["sync"][1]),
				}
				for _, st := range steps {
					if err := timed(st); err != nil {
						return nil, err
					}
				}
			}
			for _, cs := range weft {
				if err := cs[0].Unlink(ctx, name); err != nil {
					return nil, err
				}
			}
			os.Remove(dst)
			var out []Result
			for _, t := range order {
				out = append(out, *res[t])
			}
			switch {
			case env.BaseWeft != "" && bin != "":
				// weft put and get as processes of each build, the
				// builds' steps interleaved.
				env.step("base build")
				base, err := putgetBaseInterleaved(ctx, env, bin, src, dst, size)
				if err != nil {
					env.skip("base build", err)
				}
				out = append(out, base...)
			case env.BaseWeft != "":
				// The library runs in this process: the base build
				// measures itself, after the others (cp's base column
				// shows how far the machine drifted meanwhile).
				env.step("base build")
				base, err := runBaseBench(ctx, env, "putget")
				if err != nil {
					env.skip("base build", err)
				}
				out = append(out, base...)
			}
			return out, nil
		},
		Goals: func(rs []Result) []string {
			m := map[string]float64{}
			for _, r := range rs {
				m[r.Target] = r.Median()
			}
			return []string{
				ratio("weft put (sync) / cp + fsync", m[putSync], m[cpSync], "≥ 0.5×", m[putSync] >= m[cpSync]/2),
				ratio("weft put (async) / cp", m[putAsync], m[cpPlain], "≥ 0.5×", m[putAsync] >= m[cpPlain]/2),
				ratio("weft get / cp", m[getTarget], m[cpPlain], "≥ 0.5×", m[getTarget] >= m[cpPlain]/2),
			}
		},
	}
}

// cp runs cp(1), then with sync makes the copy durable as weft's sync mode
// does at close.
func cp(ctx context.Context, src, dst string, sync bool) error {
	if out, err := exec.CommandContext(ctx, "cp", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp: %v: %s", err, out)
	}
	if !sync {
		return nil
	}
	f, err := os.OpenFile(dst, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func randomFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func copyIn(ctx context.Context, c *client.Client, local, name string) error {
	src, err := os.Open(local)
	if err != nil {
		return err
	}
	defer src.Close()
	_, err = c.WriteFrom(ctx, name, src, 0o644, nil)
	return err
}

func copyOut(ctx context.Context, c *client.Client, name, local string) error {
	dst, err := os.Create(local)
	if err != nil {
		return err
	}
	if _, err := c.ReadTo(ctx, name, dst, nil); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
