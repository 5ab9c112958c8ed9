package bench

// Benchmarks of an older build (Options.BaseWeft) in the same run, for the
// ones whose weft runs inside the benchmark's own process (putget's client
// library): the base binary runs its own `weft bench NAME` as a child, and
// its results come back as "(base)" columns.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// baseBenchTimeout bounds the base build's run of one benchmark.
const baseBenchTimeout = 2 * time.Hour

// runBaseBench runs benchmark name with the base build, at this run's
// repeats and sizes, and returns its results with each target renamed to
// its base column.
func runBaseBench(ctx context.Context, env *Env, name string) ([]Result, error) {
	out := filepath.Join(env.Dir, "base-"+name)
	args := []string{"bench", name, "--out", out, "--repeats", strconv.Itoa(env.Repeats), "--install-deps=false"}
	if env.Quick {
		args = append(args, "--quick")
	}
	ctx, cancel := context.WithTimeout(ctx, baseBenchTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.BaseWeft, args...)
	logPath := out + ".log"
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(logPath)
		return nil, errs.New(errs.IO, "base build", "%s %v: %v: %s", env.BaseWeft, args, err, lastLine(b))
	}
	js, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(js, &rep); err != nil {
		return nil, fmt.Errorf("base build's results.json: %w", err)
	}
	if len(rep.Skipped) > 0 {
		return nil, errs.New(errs.IO, "base build", "skipped: %v", rep.Skipped)
	}
	var res []Result
	for _, r := range rep.Results {
		if r.Bench == name {
			r.Target = baseName(r.Target)
			res = append(res, r)
		}
	}
	if len(res) == 0 {
		return nil, errs.New(errs.IO, "base build", "no %s results in %s", name, out)
	}
	return res, nil
}

// putgetBaseInterleaved measures `weft put` and `weft get` of src as
// processes of this build (bin) and of the base build, each against its
// own build's `weft up` (disk backend, sync mode; this build with security
// none, which the base build's wire protocol is), with the two builds'
// steps interleaved in every repeat and the first build alternating, so
// that load which changes during the run lands on both alike. (The child
// benchmark of runBaseBench runs after this build's and drifts with the
// machine: its cp columns moved 0.59-1.16× between the two halves.)
func putgetBaseInterleaved(ctx context.Context, env *Env, bin, src, dst string, size int64) ([]Result, error) {
	type build struct {
		bin, file string
		put, get  *Result
	}
	label := fmt.Sprintf("%d MiB file, weft put/get processes, interleaved with the base build", size>>20)
	var builds []*build
	for i, exe := range []string{bin, env.BaseWeft} {
		more := []string{"--durability", "sync", "--backend", "disk"}
		if i == 0 {
			more = append(more, "--security", "none")
		}
		file, stop, err := startUp(ctx, exe, filepath.Join(env.Dir, fmt.Sprintf("cli-%d", i)), more...)
		if err != nil {
			return nil, err
		}
		defer stop()
		b := &build{
			bin: exe, file: file,
			put: &Result{Bench: "putget", Case: label, Target: putProcess, Unit: "MB/s"},
			get: &Result{Bench: "putget", Case: label, Target: getProcess, Unit: "MB/s"},
		}
		if i == 1 {
			b.put.Target, b.get.Target = baseName(putProcess), baseName(getProcess)
		}
		builds = append(builds, b)
	}
	run := func(b *build, args ...string) error {
		cmd := exec.CommandContext(ctx, b.bin, append(args, "--cluster", b.file)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %v: %v: %s", b.bin, args, err, lastLine(out))
		}
		return nil
	}
	for rep := range env.Repeats {
		order := []*build{builds[rep%2], builds[1-rep%2]}
		// A new name each repeat: this build reclaims a removed file's
		// chunks in the background (the base removed them inside the
		// rm), which would run into the next put.
		name := fmt.Sprintf("/big%d", rep)
		for _, b := range order {
			syscall.Sync()
			t := time.Now()
			if err := run(b, "put", src, name); err != nil {
				return nil, err
			}
			b.put.Samples = append(b.put.Samples, float64(size)/1e6/time.Since(t).Seconds())
		}
		for _, b := range order { // get: into memory freed just before, untimed
			if err := os.Remove(dst); err != nil && !os.IsNotExist(err) {
				return nil, err
			}
			syscall.Sync()
			t := time.Now()
			if err := run(b, "get", name, dst); err != nil {
				return nil, err
			}
			b.get.Samples = append(b.get.Samples, float64(size)/1e6/time.Since(t).Seconds())
			if err := sameFile(src, dst); err != nil {
				return nil, fmt.Errorf("%s: %w", b.get.Target, err)
			}
		}
	}
	os.Remove(dst)
	var out []Result
	for _, b := range builds {
		out = append(out, *b.put, *b.get)
	}
	return out, nil
}

// sameFile returns an error unless files a and b hold the same bytes.
func sameFile(a, b string) error {
	fa, err := os.Open(a)
	if err != nil {
		return err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return err
	}
	defer fb.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); ; off += int64(len(ba)) {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return fmt.Errorf("%s and %s differ within bytes %d-%d", a, b, off, off+int64(len(ba)))
		}
		if ea != nil || eb != nil {
			if (ea == io.EOF || ea == io.ErrUnexpectedEOF) && ea == eb {
				return nil
			}
			return errors.Join(ea, eb)
		}
	}
}
