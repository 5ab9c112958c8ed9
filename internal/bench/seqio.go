package bench

// seqio: seed 004's IOZONE figure, sequential write, rewrite, read and reread
// throughput for files of 1 MiB to 1 GiB; weft's mem backend against its
// disk backend and the other targets.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/weftfs/weft/internal/client"
)

var seqioOps = []string{"write", "rewrite", "read", "reread"}

// seqioRecord is the size of every read and write call.
const seqioRecord = 1 << 20

// seqioSampleBytes is the least a sample moves: a size below it is
// measured over several files, each pass over all of them in turn, so that
// one sample of a 1 MiB file is not one 5 ms operation on a shared machine
// (where three such samples gave ratios anywhere between 60% and 200%).
// A sample's rate is that of its median file (seqioSideBySide).
const seqioSampleBytes = 32 << 20

// seqioFiles is how many files of size one sample uses.
func seqioFiles(size int64) int {
	return int(max(1, (seqioSampleBytes+size-1)/size))
}

func seqioBenchmark() Benchmark {
	return Benchmark{
		Name: "seqio",
		Seed: "seed 004, Network RamDisk's Fig. 10, IOZONE sequential file I/O",
		Doc: "IOZONE-style sequential I/O: write a new file, rewrite it in place, read it, read it again, " +
			"1 MiB records, files of 1 MiB to 1 GiB; MB/s, weft's mem backend against its disk backend and " +
			"the other targets",
		Notes: []string{
			"Own implementation (no fio needed), like IOZONE with -e: write and rewrite include the fsync and " +
				"close, so the disk backend pays for durability and the mem backend does not; read and reread " +
				"come right after, from whatever the target caches (the page cache for local and tmpfs, as IOZONE " +
				"measures them). weft runs as the FUSE mount with each backend and through the library with each " +
				"backend and with RAM mirrored on two mem store servers (replication 2); and with parity across servers (ec:4+1 over five mem store servers); the library variants run side by side, each pass going file by file with each file on every variant in turn. The local disk and tmpfs are always measured. --quick stops at 16 MiB. A file below 32 MiB is measured over enough files to move 32 MiB per sample (32 of 1 MiB, 8 of 4 MiB, 2 of 16 MiB), each pass over all of them in turn, and a sample's rate is that of its median file (a load spike of the shared machine on one file does not move it). Median over repeats with min–max.",
		},
		Run:     runSeqio,
		Tables:  seqioTables,
		Paper:   []Table{paperSeqio},
		Figures: seqioFigures,
	}
}

func seqioSizes(quick bool) []int64 {
	if quick {
		return []int64{1 << 20, 4 << 20, 16 << 20}
	}
	return []int64{1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30}
}

func runSeqio(ctx context.Context, env *Env) ([]Result, error) {
	sizes := seqioSizes(env.Quick)
	reps := env.repeats()
	targets := alwaysWith(env.targets(weftDisk, weftMem), kindLocal, kindTmpfs)
	env.progress(len(targets) + len(libVariants) + (len(targets)+len(libVariants))*len(sizes))
	var out []Result
	measure := func(name string, fs seqioFS) error {
		for _, size := range sizes {
			env.step(fmt.Sprintf("%s, %s", name, sizeLabel(float64(size))))
			res := make([]Result, len(seqioOps))
			for i, op := range seqioOps {
				res[i] = Result{Bench: "seqio", Case: fmt.Sprintf("%s, %sB", op, sizeLabel(float64(size))), Target: name, Unit: "MB/s", X: float64(size)}
			}
			for r := range reps {
				rates, err := seqioOnce(ctx, fs, fmt.Sprintf("seqio-%d", r), size)
				if err != nil {
					return err
				}
				for i := range res {
					res[i].Samples = append(res[i].Samples, rates[i])
				}
			}
			out = append(out, res...)
		}
		return nil
	}
	err := env.eachTarget(ctx, targets, nil, func(m *Mount) error {
		return measure(m.Target.Name, dirSeqio(m.Dir))
	})
	if err != nil {
		return nil, err
	}
	out = append(out, seqioLibs(ctx, env, sizes, reps)...)
	return out, nil
}

// seqioLibs measures the library variants side by side: every variant's
// cluster runs at once and each repeat measures them file by file
// (seqioSideBySide), so that their ratios (ec:4+1 against mirrored ×2,
// the RAM-parity goal) are not those of whatever else loaded a shared
// machine while one variant ran alone. A variant that fails to start or to
// run is skipped.
func seqioLibs(ctx context.Context, env *Env, sizes []int64, reps int) []Result {
	var out []Result
	withLibs(ctx, env, libVariants, nil, nil, func(names []string, cs []*client.Client) {
		failed := make([]bool, len(cs))
		for _, size := range sizes {
			res := make([][]Result, len(cs))
			for v, name := range names {
				env.step(fmt.Sprintf("%s, %s", name, sizeLabel(float64(size))))
				res[v] = make([]Result, len(seqioOps))
				for i, op := range seqioOps {
					res[v][i] = Result{Bench: "seqio", Case: fmt.Sprintf("%s, %sB", op, sizeLabel(float64(size))), Target: name, Unit: "MB/s", X: float64(size)}
				}
			}
			for r := range reps {
				var fss []seqioFS
				var which []int
				for v, c := range cs {
					if !failed[v] {
						fss = append(fss, libSeqio(ctx, c))
						which = append(which, v)
					}
				}
				rates, errs := seqioSideBySide(ctx, fss, fmt.Sprintf("seqio-%d", r), size)
				for k, v := range which {
					if errs[k] != nil {
						env.skip(names[v], errs[k])
						failed[v] = true
						continue
					}
					for i := range res[v] {
						res[v][i].Samples = append(res[v][i].Samples, rates[k][i])
					}
				}
			}
			for v := range cs {
				if !failed[v] {
					out = append(out, res[v]...)
				}
			}
		}
	})
	return out
}

// withLibs starts the cluster of each of variants in turn (skipping those
// that fail) and, with all of them running, calls fn with the names and
// clients of those that started; then stops them all.
func withLibs(ctx context.Context, env *Env, variants []libVariant, names []string, cs []*client.Client, fn func([]string, []*client.Client)) {
	if len(variants) == 0 {
		fn(names, cs)
		return
	}
	v := variants[0]
	started := false
	err := env.withLib(ctx, nil, v.opts, func(c *linkedClient) error {
		started = true
		withLibs(ctx, env, variants[1:], append(slices.Clip(names), v.name), append(slices.Clip(cs), c.Client), fn)
		return nil
	})
	if !started {
		env.skip(v.name, err)
		withLibs(ctx, env, variants[1:], names, cs, fn)
	}
}

// seqioFile is what the benchmark does to an open file.
type seqioFile interface {
	io.ReadWriter
	Sync() error
	Close() error
}

type seqioFS struct {
	open   func(name string, flags int) (seqioFile, error)
	remove func(name string) error
}

func dirSeqio(root string) seqioFS {
	return seqioFS{
		open: func(name string, flags int) (seqioFile, error) {
			return os.OpenFile(filepath.Join(root, name), flags, 0o644)
		},
		remove: func(name string) error { return os.Remove(filepath.Join(root, name)) },
	}
}

func libSeqio(ctx context.Context, c *client.Client) seqioFS {
	return seqioFS{
		open: func(name string, flags int) (seqioFile, error) {
			return c.Open(ctx, "/"+name, flags, 0o644)
		},
		remove: func(name string) error { return c.Unlink(ctx, "/"+name) },
	}
}

// seqioOnce writes, rewrites, reads and rereads files of size bytes
// (seqioFiles of them, each pass over all) and returns the four rates in
// MB/s.
func seqioOnce(ctx context.Context, fs seqioFS, prefix string, size int64) ([]float64, error) {
	rates, errs := seqioSideBySide(ctx, []seqioFS{fs}, prefix, size)
	return rates[0], errs[0]
}

// seqioSideBySide is seqioOnce on each of fss at once: every pass goes
// file by file, each file on every fs in turn, so that a load spike on a
// shared machine (a log fsync of another job) lands on all of them alike,
// not on whichever ran its pass then. Each fs's rate in a pass is that of
// its median file: on a machine shared with other jobs one stalled file
// (tens of ms) would otherwise move a sum of ten 4 MiB files by half. An
// fs whose operation fails gets the error and no rates, and the others go
// on.
func seqioSideBySide(ctx context.Context, fss []seqioFS, prefix string, size int64) ([][]float64, []error) {
	names := make([]string, seqioFiles(size))
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	buf := make([]byte, seqioRecord)
	for i := range buf {
		buf[i] = byte(i*7 + i>>11)
	}
	write := func(fs seqioFS, name string, flags int) error {
		f, err := fs.open(name, flags)
		if err != nil {
			return err
		}
		for done := int64(0); done < size; {
			n, err := f.Write(buf[:min(int64(len(buf)), size-done)])
			if err != nil {
				f.Close()
				return err
			}
			done += int64(n)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	read := func(fs seqioFS, name string) error {
		f, err := fs.open(name, os.O_RDONLY)
		if err != nil {
			return err
		}
		rbuf := make([]byte, seqioRecord)
		var got int64
		for {
			n, err := f.Read(rbuf)
			got += int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return err
			}
		}
		if got != size {
			f.Close()
			return fmt.Errorf("read %d bytes of a %d-byte file", got, size)
		}
		return f.Close()
	}
	steps := []func(seqioFS, string) error{
		func(fs seqioFS, name string) error { return write(fs, name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC) },
		func(fs seqioFS, name string) error { return write(fs, name, os.O_WRONLY) },
		read,
		read,
	}
	errs := make([]error, len(fss))
	spent := make([][][]time.Duration, len(fss)) // [fs][step][file]
	for v := range spent {
		spent[v] = make([][]time.Duration, len(steps))
	}
	for i, step := range steps {
		for _, name := range names {
			for v, fs := range fss {
				if errs[v] != nil {
					continue
				}
				if err := ctx.Err(); err != nil {
					errs[v] = err
					continue
				}
				start := time.Now()
				if err := step(fs, name); err != nil {
					errs[v] = fmt.Errorf("%s: %w", seqioOps[i], err)
					continue
				}
				spent[v][i] = append(spent[v][i], time.Since(start))
			}
		}
	}
	rates := make([][]float64, len(fss))
	for v, fs := range fss {
		for _, name := range names {
			if err := fs.remove(name); err != nil && errs[v] == nil {
				errs[v] = err
			}
		}
		if errs[v] != nil {
			continue
		}
		rates[v] = make([]float64, len(steps))
		for i, ds := range spent[v] {
			rates[v][i] = float64(size) / 1e6 / medianDuration(ds).Seconds()
		}
	}
	return rates, errs
}

// medianDuration is the median of ds (the upper one of an even count).
func medianDuration(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// opOf is "write" of "write, 16MB".
func opOf(r Result) string { op, _, _ := strings.Cut(r.Case, ", "); return op }

func seqioTables(rs []Result) []Table {
	var out []Table
	for _, op := range seqioOps {
		sub := filter(rs, func(r Result) bool { return opOf(r) == op })
		t := pivot(sub, "file size", stripOp, byTarget, nil, nil)
		t.Title = fmt.Sprintf("%s, MB/s (median over repeats, min–max):", op)
		out = append(out, t)
	}
	return out
}

func seqioFigures(rs []Result) []Figure {
	var out []Figure
	for _, op := range seqioOps {
		sub := filter(rs, func(r Result) bool { return opOf(r) == op })
		f := lineFigure("seqio-"+op, "Sequential "+op+" (1 MiB records)", "file size", "MB/s", sub, byTarget)
		f.LogX = true
		out = append(out, f)
	}
	return out
}
