package bench

// checkpoint: seed 002's LANL N-N checkpoint: N writer processes each write
// their own file in fixed-size access units between barriers, sync and
// close; caches are dropped by remounting; each process then reads another
// one's file. Aggregate write and read throughput.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

func checkpointBenchmark() Benchmark {
	return Benchmark{
		Name: "checkpoint",
		Seed: "seed 002, GIGA+ on PanFS, LANL N-N checkpoint benchmark",
		Doc: "N-N checkpoint: N processes open their own new file, wait at a barrier, write it in 1 MiB " +
			"access units, wait at a barrier, fsync and close; the target is remounted to drop caches; " +
			"then each process reads the file another wrote (shifted read); aggregate MB/s",
		Notes: []string{
			"4 writer processes of 256 MiB each (1 GiB in all; --quick: 2 of 16 MiB), separate processes " +
				"(the weft binary re-run as a worker) synchronised by the benchmark through pipes, in place of " +
				"MPI barriers. The write time runs from the first barrier to the last close, so it includes the " +
				"fsync; the read time from the barrier after opening to the last byte. Remount: unmount and mount " +
				"again for FUSE targets, drop the kernel's page cache for the local disk, nothing for tmpfs " +
				"(its content is its cache). Median over repeats with min–max.",
		},
		Run:     runCheckpoint,
		Tables:  checkpointTables,
		Paper:   []Table{paperCheckpoint},
		Figures: checkpointFigures,
	}
}

const checkpointUnit = 1 << 20

func runCheckpoint(ctx context.Context, env *Env) ([]Result, error) {
	procs, size := 4, int64(256<<20)
	if env.Quick {
		procs, size = 2, 16<<20
	}
	bin, err := env.weftBinary()
	if err != nil {
		return nil, err
	}
	reps := env.repeats()
	targets := env.targets()
	env.progress(len(targets) * (1 + 2*reps))
	var out []Result
	err = env.eachTarget(ctx, targets, nil, func(m *Mount) error {
		w := Result{Bench: "checkpoint", Case: fmt.Sprintf("write, %d × %s", procs, sizeLabel(float64(size))+"B"), Target: m.Target.Name, Unit: "MB/s"}
		r := Result{Bench: "checkpoint", Case: fmt.Sprintf("shifted read after remount, %d × %s", procs, sizeLabel(float64(size))+"B"), Target: m.Target.Name, Unit: "MB/s"}
		for rep := range reps {
			dir := filepath.Join(m.Dir, fmt.Sprintf("ckpt%d", rep))
			if err := os.Mkdir(dir, 0o755); err != nil {
				return err
			}
			files := make([]string, procs)
			for i := range files {
				files[i] = filepath.Join(dir, fmt.Sprintf("rank%03d", i))
			}
			env.step(m.Target.Name + ": write")
			el, err := checkpointPhase(ctx, bin, "write", files, size)
			if err != nil {
				return fmt.Errorf("write phase: %w", err)
			}
			w.Samples = append(w.Samples, float64(size)*float64(procs)/1e6/el.Seconds())
			if err := m.Remount(ctx); err != nil {
				return fmt.Errorf("remount: %w", err)
			}
			shifted := append(files[1:], files[0])
			env.step(m.Target.Name + ": read")
			el, err = checkpointPhase(ctx, bin, "read", shifted, size)
			if err != nil {
				return fmt.Errorf("read phase: %w", err)
			}
			r.Samples = append(r.Samples, float64(size)*float64(procs)/1e6/el.Seconds())
		}
		out = append(out, w, r)
		return nil
	})
	return out, err
}

// workerEnv names the worker role in a re-run of the weft binary.
const workerEnv = "WEFT_BENCH_WORKER"

// checkpointPhase runs one process per file in mode "write" or "read" and
// returns the time from the release of the first barrier to the end of the
// last process's phase.
func checkpointPhase(ctx context.Context, bin, mode string, files []string, size int64) (time.Duration, error) {
	args := make([]string, len(files))
	for i, f := range files {
		args[i] = fmt.Sprintf("%s %d %d %s", mode, size, checkpointUnit, f)
	}
	g, err := startWorkers(ctx, bin, "checkpoint", args)
	if err != nil {
		return 0, err
	}
	defer g.close()
	if err := g.wait("ready"); err != nil {
		return 0, err
	}
	start := time.Now()
	if mode == "write" {
		if _, err := g.phase("written"); err != nil {
			return 0, err
		}
	}
	if _, err := g.phase("done"); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// RunWorker runs a benchmark worker process if this process was started as
// one (the environment says so), reading barrier releases from in and
// reporting progress on out. It reports whether it ran.
func RunWorker(in io.Reader, out io.Writer) (bool, error) {
	role := os.Getenv(workerEnv)
	if role == "" {
		return false, nil
	}
	switch role {
	case fusemetaRole:
		return true, runFusemetaWorker(in, out, os.Getenv(workerArgsEnv))
	case "checkpoint":
	default:
		return true, fmt.Errorf("unknown benchmark worker %q", role)
	}
	args := strings.Fields(os.Getenv(workerArgsEnv))
	if len(args) != 4 {
		return true, errors.New("checkpoint worker: want WEFT_BENCH_ARGS=mode size unit file")
	}
	size, err1 := strconv.ParseInt(args[1], 10, 64)
	unit, err2 := strconv.Atoi(args[2])
	if err := errors.Join(err1, err2); err != nil || size < 0 || unit <= 0 {
		return true, fmt.Errorf("checkpoint worker: bad size or unit in %q", args)
	}
	return true, checkpointWorker(bufio.NewReader(in), out, args[0], size, unit, args[3])
}

func checkpointWorker(in *bufio.Reader, out io.Writer, mode string, size int64, unit int, path string) error {
	wait := func() error {
		line, err := in.ReadString('\n')
		if err != nil {
			return fmt.Errorf("barrier: %w", err)
		}
		if line != "go\n" {
			return fmt.Errorf("barrier: got %q", line)
		}
		return nil
	}
	say := func(s string) error { _, err := fmt.Fprintln(out, s); return err }
	buf := make([]byte, unit)
	switch mode {
	case "write":
		for i := range buf {
			buf[i] = byte(i ^ len(path))
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := errors.Join(say("ready"), wait()); err != nil {
			return err
		}
		for done := int64(0); done < size; {
			n, err := f.Write(buf[:min(int64(unit), size-done)])
			if err != nil {
				return err
			}
			done += int64(n)
		}
		if err := errors.Join(say("written"), wait()); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return say("done")
	case "read":
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := errors.Join(say("ready"), wait()); err != nil {
			return err
		}
		n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
		if err != nil {
			return err
		}
		if n != size {
			return fmt.Errorf("read %d bytes of %s, want %d", n, path, size)
		}
		return say("done")
	}
	return fmt.Errorf("checkpoint worker: unknown mode %q", mode)
}

func checkpointTables(rs []Result) []Table {
	t := pivot(rs, "phase (aggregate MB/s)", byCase, byTarget, nil, nil)
	t.Title = "Aggregate throughput, MB/s (median over repeats, min–max):"
	return []Table{t}
}

func checkpointFigures(rs []Result) []Figure {
	short := func(r Result) string { op, _, _ := strings.Cut(r.Case, ","); return op }
	return []Figure{barFigure("checkpoint", "N-N checkpoint: aggregate throughput", "MB/s", rs, short, byTarget)}
}

// lockedBuffer collects a child's stderr: exec copies into it from its own
// goroutine while a failing barrier reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
