package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
)

// syncBuffer is a bytes.Buffer that a running command and the test may use
// at the same time.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// run executes weft with args and returns stdout, stderr and the error.
func run(ctx context.Context, args ...string) (string, string, error) {
	var stdout, stderr syncBuffer
	root := NewRoot()
	root.SetArgs(args)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	err := root.ExecuteContext(ctx)
	return stdout.String(), stderr.String(), err
}

func TestVersion(t *testing.T) {
	out, _, err := run(context.Background(), "version")
	if err != nil || !strings.HasPrefix(out, "weft ") || !strings.Contains(out, "go1.") {
		t.Errorf("weft version = %q, %v", out, err)
	}
}

func TestExitCodes(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.toml")
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"unknown command", []string{"upp"}, ExitUsage, `unknown command "upp"; did you mean pg or up?`},
		{"unknown flag", []string{"up", "--bogus"}, ExitUsage, "unknown flag: --bogus"},
		{"extra argument", []string{"version", "x"}, ExitUsage, `unexpected argument "x"`},
		{"cobra argument check", []string{"mv", "a"}, ExitUsage, "accepts 2 arg(s), received 1"},
		{"bad log level", []string{"--log-level", "loud", "version"}, ExitUsage, "--log-level"},
		{"meta without id", []string{"meta", "--config", missing}, ExitUsage, "--id is required"},
		{"bad durability", []string{"up", "--data", t.TempDir(), "--durability", "soon"}, ExitUsage, `--durability "soon" is not one of sync, async`},
		{"bad mem limit", []string{"up", "--data", t.TempDir(), "--mem-limit", "much"}, ExitUsage, "--mem-limit"},
		{"missing cluster file", []string{"store", "--config", missing, "--id", "0"}, ExitConfig, "none.toml"},
		{"no cluster file", []string{"--cluster", "", "meta", "--id", "0"}, ExitConfig, "WEFT_CLUSTER"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run(context.Background(), tt.args...)
			if got := ExitCode(err); got != tt.code {
				t.Errorf("exit code %d, want %d (err %v)", got, tt.code, err)
			}
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v, want it to mention %q", err, tt.msg)
			}
		})
	}
}

func TestExitCodeKinds(t *testing.T) {
	for err, want := range map[error]int{
		nil:                                              ExitOK,
		errors.New("plain"):                              ExitFailure,
		errs.E(errs.NotExist, "stat"):                    ExitNotExist,
		errs.E(errs.Exist, "mkdir"):                      ExitExist,
		errs.E(errs.Permission, "open"):                  ExitPermission,
		errs.E(errs.NotPermitted, "chown"):               ExitPermission,
		errs.E(errs.Unavailable, "dial"):                 ExitUnavailable,
		errs.E(errs.Timeout, "call"):                     ExitUnavailable,
		errs.E(errs.Canceled, "put"):                     ExitInterrupted,
		&configError{err: errs.E(errs.NotExist, "read")}: ExitConfig,
	} {
		if got := ExitCode(err); got != want {
			t.Errorf("ExitCode(%v) = %d, want %d", err, got, want)
		}
	}
}

// TestUpRunsUntilCanceled runs weft up as a user would: it prints where the
// cluster file is, the file works, and canceling (what SIGINT does in
// cmd/weft) stops it cleanly.
func TestUpRunsUntilCanceled(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		root := NewRoot()
		root.SetArgs([]string{"up", "--data", dir, "--backend", "mem", "--mem-limit", "64MiB"})
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		done <- root.ExecuteContext(ctx)
	}()

	file := filepath.Join(dir, "weft.toml")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stdout.String(), "Press Ctrl-C") {
		if time.Now().After(deadline) {
			t.Fatalf("weft up did not come up; stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
		select {
		case err := <-done:
			t.Fatalf("weft up returned early: %v\n%s", err, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if !strings.Contains(stdout.String(), "export WEFT_CLUSTER="+file) {
		t.Errorf("banner does not show how to use the cluster file:\n%s", stdout.String())
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatalf("cluster file: %v", err)
	}
	if cfg.Store[0].Backend != "mem" || cfg.Store[0].MemLimit != 64<<20 {
		t.Errorf("flags not applied: backend %q mem_limit %d", cfg.Store[0].Backend, cfg.Store[0].MemLimit)
	}
	if !strings.Contains(stderr.String(), `"msg":"meta server started"`) {
		t.Errorf("server logs are not JSON on stderr:\n%s", stderr.String())
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("weft up stopped with %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("weft up did not stop after cancel")
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("cluster file gone after stop: %v", err)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/home/a/.weft/weft.toml": "/home/a/.weft/weft.toml",
		"/tmp/my dir/weft.toml":   "'/tmp/my dir/weft.toml'",
		"/tmp/it's":               `'/tmp/it'\''s'`,
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestClusterFlagInHelp: --cluster is listed by the commands that read the
// cluster file and by no other, yet accepted before any command.
func TestClusterFlagInHelp(t *testing.T) {
	for cmd, want := range map[string]bool{
		"ls": true, "put": true, "mount": true, "status": true, "fsck": true, "meta": true,
		"version": false, "up": false, "down": false, "cluster start": false, "umount": false, "bench": false,
	} {
		out, _, err := run(context.Background(), append(strings.Fields(cmd), "--help")...)
		if err != nil {
			t.Fatalf("weft %s --help: %v", cmd, err)
		}
		if got := strings.Contains(out, "--cluster"); got != want {
			t.Errorf("weft %s --help lists --cluster: %v, want %v\n%s", cmd, got, want, out)
		}
	}
	if _, _, err := run(context.Background(), "--cluster", "x.toml", "version"); err != nil {
		t.Errorf("weft --cluster F version: %v", err)
	}
}

func TestInvokedAs(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "weft")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", "/nonexistent")
	if got := invokedAs(bin); got != bin {
		t.Errorf("invokedAs(%q) off $PATH = %q, want the path", bin, got)
	}
	if got := invokedAs("weft"); got != "weft" {
		t.Errorf("invokedAs(weft) = %q", got)
	}
	t.Setenv("PATH", dir)
	if got := invokedAs(bin); got != "weft" {
		t.Errorf("invokedAs(%q) on $PATH = %q, want weft", bin, got)
	}
}

// TestUpOnTakenPortExits1: a server that cannot listen because its address
// is taken is no unreachable server (exit code 4) but a failure (1).
func TestUpOnTakenPortExits1(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout syncBuffer
	done := make(chan error, 1)
	go func() {
		root := NewRoot()
		root.SetArgs([]string{"up", "--data", dir, "--backend", "mem", "--mem-limit", "64MiB"})
		root.SetOut(&stdout)
		root.SetErr(&syncBuffer{})
		done <- root.ExecuteContext(ctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stdout.String(), "Press Ctrl-C") {
		if time.Now().After(deadline) {
			t.Fatalf("weft up did not come up:\n%s", stdout.String())
		}
		select {
		case err := <-done:
			t.Fatalf("weft up returned early: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	// A second weft up of the same directory wants the same ports.
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	_, _, err := run(rctx, "up", "--data", dir)
	if ExitCode(err) != ExitFailure || !strings.Contains(fmt.Sprint(err), "another weft up") {
		t.Errorf("second weft up: exit code %d (%v), want %d", ExitCode(err), err, ExitFailure)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("weft up did not stop after cancel")
	}
}
