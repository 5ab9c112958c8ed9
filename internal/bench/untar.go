package bench

// untar and postmark: seed 003's macro-benchmarks. Untar then rm -rf of a
// Linux source tarball (Debian's linux-source), and PostMark (Debian's
// postmark), with weft in each durability mode.

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func untarBenchmark() Benchmark {
	return Benchmark{
		Name: "untar",
		Seed: "seed 003, Featherstitch (\"Kudos\") untar and delete of linux-2.6.15",
		Doc: "Untar a Linux source tarball that is already decompressed and in the page cache, then " +
			"rm -rf the tree; each includes a sync of the target (sync -f); weft in sync and async " +
			"durability",
		Notes: []string{
			"The tarball is made once from Debian's linux-source package (/usr/src/linux-source-*.tar.xz): its " +
				"first 10,000 entries (--quick: 1,000), about half the paper's linux-2.6.15, decompressed " +
				"into the benchmark cache; the full 6.x tree (~80,000 files) would take most of the run's time " +
				"on the slower targets. Its few symlinks are left out: " +
				"sshfs follows a symlink when tar sets its owner and times, which fails while the target is not " +
				"extracted yet. Seconds, median over repeats with min–max.",
		},
		Run:     runUntar,
		Tables:  untarTables,
		Paper:   []Table{paperUntar},
		Figures: untarFigures,
	}
}

func postmarkBenchmark() Benchmark {
	return Benchmark{
		Name: "postmark",
		Seed: "seed 003, Featherstitch (\"Kudos\") PostMark",
		Doc:  "PostMark (Debian's postmark): small-file mail-server workload of creates, deletes, reads and appends; weft in sync and async durability",
		Notes: []string{
			"PostMark 1.51 with 1,000 files of 500 B–10 KB in one directory and 5,000 transactions, seed 42 " +
				"(--quick: 100 files, 250 transactions); the paper does not give its settings. Wall-clock seconds " +
				"of the whole run, median over repeats with min–max.",
		},
		Run:     runPostmark,
		Tables:  postmarkTables,
		Paper:   []Table{paperPostmark},
		Figures: postmarkFigures,
	}
}

func runUntar(ctx context.Context, env *Env) ([]Result, error) {
	entries := 10000
	if env.Quick {
		entries = 1000
	}
	tarball, err := untarInput(ctx, env, entries)
	if err != nil {
		return nil, err
	}
	// In the page cache, as the paper's "cached tar".
	if err := readAll(tarball); err != nil {
		return nil, err
	}
	reps := env.repeats()
	targets := env.targets(weftSync, weftAsync)
	env.progress(len(targets) * (1 + 2*reps))
	var out []Result
	err = env.eachTarget(ctx, targets, nil, func(m *Mount) error {
		u := Result{Bench: "untar", Case: "untar", Target: m.Target.Name, Unit: "s"}
		d := Result{Bench: "untar", Case: "delete", Target: m.Target.Name, Unit: "s"}
		for r := range reps {
			dir := filepath.Join(m.Dir, fmt.Sprintf("u%d", r))
			if err := os.Mkdir(dir, 0o755); err != nil {
				return err
			}
			env.step(m.Target.Name + ": untar")
			start := time.Now()
			if err := run(ctx, 30*time.Minute, "tar", "-xf", tarball, "-C", dir); err != nil {
				return err
			}
			if err := run(ctx, 10*time.Minute, "sync", "-f", dir); err != nil {
				return err
			}
			u.Samples = append(u.Samples, time.Since(start).Seconds())
			env.step(m.Target.Name + ": delete")
			start = time.Now()
			if err := run(ctx, 30*time.Minute, "rm", "-rf", dir); err != nil {
				return err
			}
			if err := run(ctx, 10*time.Minute, "sync", "-f", m.Dir); err != nil {
				return err
			}
			d.Samples = append(d.Samples, time.Since(start).Seconds())
		}
		out = append(out, u, d)
		return nil
	})
	return out, err
}

// untarInput returns a tar of the first entries of Debian's linux-source
// tarball, made once into the cache.
func untarInput(ctx context.Context, env *Env, entries int) (string, error) {
	out := filepath.Join(env.run.tools.cache, fmt.Sprintf("linux-source-%d-nolinks.tar", entries))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	src, err := linuxSource(ctx, env)
	if err != nil {
		return "", err
	}
	env.run.opts.Log.Info("making the untar input from Debian's kernel source (once)", "from", src, "entries", entries)
	xz := exec.CommandContext(ctx, "xz", "-dc", src)
	pipe, err := xz.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := xz.Start(); err != nil {
		return "", fmt.Errorf("xz: %w", err)
	}
	err = copyTarPrefix(pipe, out+".tmp", entries)
	// Stop xz early: the rest of the stream is not needed.
	xz.Process.Kill()
	xz.Wait()
	if err != nil {
		os.Remove(out + ".tmp")
		return "", err
	}
	return out, os.Rename(out+".tmp", out)
}

// linuxSource finds Debian's kernel source tarball, installing the package if
// allowed.
func linuxSource(ctx context.Context, env *Env) (string, error) {
	p, err := env.run.tools.ensure(ctx, "linux-source", "linux-source", func() (string, error) {
		m, _ := filepath.Glob("/usr/src/linux-source-*.tar.xz")
		if len(m) == 0 {
			return "", fmt.Errorf("no /usr/src/linux-source-*.tar.xz")
		}
		return m[len(m)-1], nil
	})
	if err != nil {
		return "", err
	}
	env.run.version("linux-source", filepath.Base(p))
	return p, nil
}

// copyTarPrefix writes the first n regular files and directories of the tar
// stream r to path. Hard links are left out (their targets may not be in the
// prefix), and so are symlinks (see untarBenchmark).
func copyTarPrefix(r io.Reader, path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tr := tar.NewReader(r)
	tw := tar.NewWriter(f)
	for kept := 0; kept < n; {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			f.Close()
			return err
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir:
		default:
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			f.Close()
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			f.Close()
			return err
		}
		kept++
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readAll(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(io.Discard, f)
	return err
}

func runPostmark(ctx context.Context, env *Env) ([]Result, error) {
	pm, err := env.run.tools.debian(ctx, "postmark", "postmark")
	if err != nil {
		return nil, err
	}
	env.run.version("postmark", "PostMark "+postmarkVersion(pm))
	files, transactions := 1000, 5000
	if env.Quick {
		files, transactions = 100, 250
	}
	reps := env.repeats()
	targets := env.targets(weftSync, weftAsync)
	env.progress(len(targets) * (1 + reps))
	var out []Result
	err = env.eachTarget(ctx, targets, nil, func(m *Mount) error {
		res := Result{Bench: "postmark", Case: fmt.Sprintf("%d files, %d transactions", files, transactions), Target: m.Target.Name, Unit: "s"}
		for r := range reps {
			env.step(m.Target.Name)
			dir := filepath.Join(m.Dir, fmt.Sprintf("pm%d", r))
			conf := filepath.Join(env.Dir, fmt.Sprintf("postmark-%d.conf", r))
			_, all, err := postmarkOnce(ctx, pm, conf, dir, files, transactions)
			if err != nil {
				return err
			}
			res.Samples = append(res.Samples, all.Seconds())
		}
		out = append(out, res)
		return nil
	})
	return out, err
}

// postmarkVersion asks postmark for its version (it prints it as a banner
// before its prompt).
func postmarkVersion(pm string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pm)
	cmd.Stdin = strings.NewReader("quit\n")
	b, _ := cmd.Output()
	s := strings.TrimSpace(string(b))
	if i := strings.Index(s, "PostMark v"); i >= 0 {
		s = s[i+len("PostMark v"):]
	}
	if i := strings.IndexAny(s, " \n"); i > 0 {
		s = s[:i]
	}
	return s
}

func untarTables(rs []Result) []Table {
	t := pivot(rs, "system", byTarget, byCase, nil, []string{"untar", "delete"})
	t.Title = "Seconds, including sync (median over repeats, min–max):"
	return []Table{t}
}

func untarFigures(rs []Result) []Figure {
	return []Figure{barFigure("untar", "Untar and delete of a Linux source tree", "seconds", rs, byCase, byTarget)}
}

func postmarkTables(rs []Result) []Table {
	t := pivot(rs, "system", byTarget, byCase, nil, nil)
	t.Title = "Seconds (median over repeats, min–max):"
	return []Table{t}
}

func postmarkFigures(rs []Result) []Figure {
	return []Figure{barFigure("postmark", "PostMark", "seconds", rs, byCase, byTarget)}
}
