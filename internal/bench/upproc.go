package bench

// The putget benchmark's servers in their own process, as users run them:
// `weft up` started from this executable, and the benchmark in the role of
// `weft put` / `weft get`, a client in another process.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// upBinary returns the weft executable that can run `weft up` for the
// benchmark, or "" when there is none: under go test this executable is a
// test binary, and the servers then run in the benchmark's process.
func upBinary(env *Env) string {
	if env.Weft != "" {
		return env.Weft
	}
	if testing.Testing() {
		return ""
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return exe
}

const (
	upStartTimeout = 30 * time.Second
	upStopTimeout  = 30 * time.Second
)

// startUpProcess runs `bin up` with its data in dir (disk backend, the given
// durability) and returns a root client's configuration for it and a
// function that stops the process (SIGTERM, then SIGKILL if it lingers).
func startUpProcess(ctx context.Context, bin, dir, durability string) (client.Config, func(), error) {
	file, stop, err := startUp(ctx, bin, dir, "--durability", durability, "--backend", "disk")
	if err != nil {
		return client.Config{}, nil, err
	}
	cfg, err := config.Load(file)
	if err != nil {
		stop()
		return client.Config{}, nil, err
	}
	return cluster.ClientConfig(cfg, core.Root, nil), stop, nil
}

// startUp runs `bin up --data dir` with the flags more and returns the
// cluster file it writes and a function that stops the process. bin may be
// another build of weft (Options.BaseWeft): nothing of the file is read.
func startUp(ctx context.Context, bin, dir string, more ...string) (string, func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	logPath := dir + ".log"
	logf, err := os.Create(logPath)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, append([]string{"up", "--data", dir}, more...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C at the terminal reaches the benchmark,
	// which stops the server itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", nil, errs.Wrap(errs.Unavailable, "start weft up", bin, err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		logf.Close()
		close(done)
	}()
	stopProc := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(upStopTimeout):
			cmd.Process.Kill()
			<-done
		}
	}
	failed := func(why string) error {
		b, _ := os.ReadFile(logPath)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		return errs.New(errs.Unavailable, "start weft up", "%s (%v): %s", why, waitErr, lines[len(lines)-1])
	}

	// weft up writes its cluster file once both servers are listening.
	file := filepath.Join(dir, cluster.ClusterFileName)
	deadline := time.Now().Add(upStartTimeout)
	for {
		if _, err := os.Stat(file); err == nil {
			break
		}
		select {
		case <-done:
			return "", nil, failed("exited")
		case <-ctx.Done():
			stopProc()
			return "", nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stopProc()
			return "", nil, failed("no cluster file after " + upStartTimeout.String())
		}
	}
	return file, stopProc, nil
}
