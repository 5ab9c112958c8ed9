package bench

// latfs: seed 004's HBench-OS lat_fs, create then delete 2,000 files of 0, 1,
// 4, 10 and 16 KiB; ms per create and per delete; weft's mem backend against
// its disk backend, the local disk and tmpfs.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
)

var latfsSizes = []int{0, 1, 4, 10, 16} // KiB

func latfsBenchmark() Benchmark {
	return Benchmark{
		Name: "latfs",
		Seed: "seed 004, Network RamDisk's Figs. 8 and 9, HBench-OS lat_fs",
		Doc: "lat_fs: create 2,000 files of a given size in one directory (create, write, close), then " +
			"delete them; ms per create and per delete, for 0, 1, 4, 10 and 16 KiB, weft's mem backend " +
			"against its disk backend and the other targets",
		Notes: []string{
			"weft runs as the FUSE mount (weft up --mount, sync durability) with each backend, and through the " +
				"client library with each backend (in-process clusters), so the mem/disk comparison exists " +
				"even where the FUSE target is skipped. The library variants run side by side: all their clusters at once, " +
				"each block of 50 files created (then deleted) on every variant in turn, each variant timed by its own operations. The local disk and tmpfs are always measured, whatever --targets " +
				"says: they are the seed's comparison. --quick uses 100 files. Median over repeats with min–max.",
			"The paper compares RAM on two servers across a network with a local magnetic disk; weft's mem backend " +
				"stands for the Network RamDisk, the local disk and tmpfs for the local alternatives. Its reliability by " +
				"mirroring is measured through the library (two mem store servers, every chunk on both: replication 2), " +
				"and so is its reliability by parity (ec:4+1 over five mem store servers).",
			"The rows \"create at close\" hold each new file's create in the client, under a write lease on its " +
				"directory, until the file's close, which sends it with the file's content in one request and returns " +
				"once the meta server applied it (client.Config.CreateAtClose): one round trip per create instead of " +
				"two, close as durable as in the row without it.",
		},
		Run:     runLatfs,
		Tables:  latfsTables,
		Paper:   []Table{paperLatfs},
		Figures: latfsFigures,
	}
}

func runLatfs(ctx context.Context, env *Env) ([]Result, error) {
	files := 2000
	if env.Quick {
		files = 100
	}
	reps := env.repeats()
	targets := alwaysWith(env.targets(weftDisk, weftMem), kindLocal, kindTmpfs)
	env.progress(len(targets) + (len(targets)+1)*reps)
	var out []Result
	err := env.eachTarget(ctx, targets, nil, func(m *Mount) error {
		create, remove := latfsResults(m.Target.Name)
		fs := dirLatfs(m.Dir)
		for r := range reps {
			env.step(fmt.Sprintf("%s, repeat %d", m.Target.Name, r+1))
			for i, kb := range latfsSizes {
				c, d, err := latfsOnce(ctx, fs, fmt.Sprintf("r%d-%dk", r, kb), files, kb<<10)
				if err != nil {
					return err
				}
				create[i].Samples = append(create[i].Samples, c)
				remove[i].Samples = append(remove[i].Samples, d)
			}
		}
		out = append(append(out, create...), remove...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return append(out, latfsLibs(ctx, env, files, reps)...), nil
}

// latfsResults are target name's results, one per size, without samples.
func latfsResults(name string) (create, remove []Result) {
	create = make([]Result, len(latfsSizes))
	remove = make([]Result, len(latfsSizes))
	for i, kb := range latfsSizes {
		create[i] = Result{Bench: "latfs", Case: fmt.Sprintf("create, %d KiB", kb), Target: name, Unit: "ms", X: float64(kb)}
		remove[i] = Result{Bench: "latfs", Case: fmt.Sprintf("delete, %d KiB", kb), Target: name, Unit: "ms", X: float64(kb)}
	}
	return create, remove
}

// latfsLibs measures the library variants side by side, as seqioLibs
// does: all their clusters run at once and each block of files is created
// (then deleted) on every variant in turn, so that the ratios between them (mem
// with ec:4+1 against disk, the RAM-parity goal) are not those of whatever
// else loaded a shared machine while one variant ran alone. A variant that
// fails to start or to run is skipped.
func latfsLibs(ctx context.Context, env *Env, files, reps int) []Result {
	var out []Result
	withLibs(ctx, env, latfsVariants, nil, nil, func(names []string, cs []*client.Client) {
		creates := make([][]Result, len(cs))
		removes := make([][]Result, len(cs))
		failed := make([]bool, len(cs))
		fss := make([]latfsOps, len(cs))
		for v, c := range cs {
			creates[v], removes[v] = latfsResults(names[v])
			fss[v] = libLatfs(ctx, c)
		}
		for r := range reps {
			env.step(fmt.Sprintf("library variants, repeat %d", r+1))
			for i, kb := range latfsSizes {
				var run []latfsOps
				var which []int
				for v := range cs {
					if !failed[v] {
						run = append(run, fss[v])
						which = append(which, v)
					}
				}
				create, del, errs := latfsSideBySide(ctx, run, fmt.Sprintf("r%d-%dk", r, kb), files, kb<<10, latfsBlock)
				for k, v := range which {
					if errs[k] != nil {
						env.skip(names[v], errs[k])
						failed[v] = true
						continue
					}
					creates[v][i].Samples = append(creates[v][i].Samples, create[k])
					removes[v][i].Samples = append(removes[v][i].Samples, del[k])
				}
			}
		}
		for v := range cs {
			if !failed[v] {
				out = append(append(out, creates[v]...), removes[v]...)
			}
		}
	})
	return out
}

// latfsVariants adds to the library's clusters the Network RamDisk as a
// whole: RAM made reliable by parity across servers, with no disk on the
// data path, and metadata that reaches the meta server's disk in the
// background (async: within 100 ms) rather than at every call. Every other
// row is sync, whose meta log fsync at each create and close is the cost
// that the mem backend alone cannot remove for small files (inline in the
// metadata record).
//
// The rows "create at close" hold each new file's create in the client
// until its close, which sends it with the file's content: one round trip
// per create instead of two (client.Config.CreateAtClose), close as
// durable as in the row without it.
var latfsVariants = append(slices.Clone(libVariants),
	libVariant{weftParity + ", metadata async", libOptions{Durability: "async", Backend: config.BackendMem, Redundancy: "ec:4+1"}},
	libVariant{weftParity + ", metadata async, create at close", libOptions{Durability: "async", Backend: config.BackendMem, Redundancy: "ec:4+1", CreateAtClose: true}},
	libVariant{"weft library (disk), create at close", libOptions{Durability: "sync", Backend: config.BackendDisk, CreateAtClose: true}})

// latfsOps are the three operations lat_fs needs.
type latfsOps struct {
	mkdir  func(dir string) error
	create func(dir, name string, data []byte) error
	remove func(dir, name string) error
}

func dirLatfs(root string) latfsOps {
	return latfsOps{
		mkdir: func(dir string) error { return os.Mkdir(filepath.Join(root, dir), 0o755) },
		create: func(dir, name string, data []byte) error {
			f, err := os.OpenFile(filepath.Join(root, dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			if _, err := f.Write(data); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		},
		remove: func(dir, name string) error { return os.Remove(filepath.Join(root, dir, name)) },
	}
}

func libLatfs(ctx context.Context, c *client.Client) latfsOps {
	dirs := map[string]core.Ino{}
	return latfsOps{
		mkdir: func(dir string) error {
			a, err := c.MkdirAt(ctx, core.RootIno, dir, 0o755)
			dirs[dir] = a.Ino
			return err
		},
		create: func(dir, name string, data []byte) error {
			f, err := c.CreateAt(ctx, dirs[dir], name, os.O_WRONLY|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			if _, err := f.Write(data); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		},
		remove: func(dir, name string) error { return c.UnlinkAt(ctx, dirs[dir], name) },
	}
}

// latfsOnce creates n files of size bytes in a new directory, then deletes
// them, and returns ms per create and per delete.
func latfsOnce(ctx context.Context, fs latfsOps, dir string, n, size int) (float64, float64, error) {
	create, del, errs := latfsSideBySide(ctx, []latfsOps{fs}, dir, n, size, n)
	return create[0], del[0], errs[0]
}

// latfsBlock is how many files in a row latfsSideBySide gives one fs
// before the next: enough that a run of one fs's operations looks like a
// program using it (its goroutines and caches warm, as in lat_fs, which
// the seed ran on each file system alone), few enough that every fs sees
// the same load of a shared machine (a block of the slowest row takes
// about 50 ms). File by file, each operation paid for waking a cluster that
// six others had put to sleep: on a quiet machine a 16 KiB create at close
// took 0.21 ms so, against 0.14 ms alone (BenchmarkLatfsLib).
const latfsBlock = 50

// latfsSideBySide is latfsOnce on each of fss at once: the files are
// created in blocks of block files, each block on every fs in turn (the fs
// that goes first moves on by one each block), then deleted the same way,
// and each fs's time is its own operations' sum. An fs whose operation
// fails gets the error (and no times) and the others go on.
func latfsSideBySide(ctx context.Context, fss []latfsOps, dir string, n, size, block int) (create, del []float64, errs []error) {
	errs = make([]error, len(fss))
	for v, fs := range fss {
		errs[v] = fs.mkdir(dir)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	name := func(i int) string { return fmt.Sprintf("lat%05d", i) }
	spent := func(op func(latfsOps, int) error) []time.Duration {
		took := make([]time.Duration, len(fss))
		for k, first := 0, 0; first < n; k, first = k+1, first+block {
			for j := range fss {
				v := (k + j) % len(fss)
				for i := first; i < min(first+block, n) && errs[v] == nil; i++ {
					if err := ctx.Err(); err != nil {
						errs[v] = err
						break
					}
					start := time.Now()
					if err := op(fss[v], i); err != nil {
						errs[v] = err
						break
					}
					took[v] += time.Since(start)
				}
			}
		}
		return took
	}
	created := spent(func(fs latfsOps, i int) error { return fs.create(dir, name(i), data) })
	deleted := spent(func(fs latfsOps, i int) error { return fs.remove(dir, name(i)) })
	ms := func(d time.Duration) float64 { return float64(d) / float64(n) / float64(time.Millisecond) }
	create = make([]float64, len(fss))
	del = make([]float64, len(fss))
	for v := range fss {
		create[v], del[v] = ms(created[v]), ms(deleted[v])
	}
	return create, del, errs
}

// stripOp turns "create, 16 KiB" into "16 KiB".
func stripOp(r Result) string {
	_, after, _ := strings.Cut(r.Case, ", ")
	return after
}

func latfsTables(rs []Result) []Table {
	var out []Table
	for _, op := range []string{"create", "delete"} {
		sub := filter(rs, func(r Result) bool { return strings.HasPrefix(r.Case, op+",") })
		t := pivot(sub, "file size", stripOp, byTarget, nil, nil)
		t.Title = fmt.Sprintf("ms per %s (median over repeats, min–max):", op)
		out = append(out, t)
	}
	return out
}

func latfsFigures(rs []Result) []Figure {
	var out []Figure
	for _, op := range []string{"create", "delete"} {
		sub := filter(rs, func(r Result) bool { return strings.HasPrefix(r.Case, op+",") })
		f := lineFigure("latfs-"+op, "lat_fs: ms per "+op, "file size (KiB)", "ms per "+op, sub, byTarget)
		f.LogY = true
		out = append(out, f)
	}
	return out
}
