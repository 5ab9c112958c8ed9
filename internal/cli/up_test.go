package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/fusefs"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/internal/weftbin"
)

// upBackground runs the real binary's weft up -d with args and returns its
// output; the process it leaves is stopped at cleanup by the pid it records
// (kill -9, and its mount detached), however the test ends.
func upBackground(t *testing.T, data string, args ...string) string {
	t.Helper()
	t.Cleanup(func() {
		rec, err := cluster.ReadUpRecord(data)
		if err != nil {
			return
		}
		if rec.Alive() {
			_ = syscall.Kill(rec.Pid, syscall.SIGKILL)
		}
		if rec.Mount != "" && fusefs.Mounted(rec.Mount) {
			_ = fusefs.Unmount(rec.Mount)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, weftbin.Path(t), append([]string{"up", "-d", "--data", data, "--backend", "mem", "--mem-limit", "64MiB",
		"--log-file", filepath.Join(data, "up.log")}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("weft up -d: %v\n%s", err, out)
	}
	return string(out)
}

// TestUpBackgroundAndDown: weft up -d says where the cluster file is and how
// to stop it, and weft down stops it.
func TestUpBackgroundAndDown(t *testing.T) {
	data := t.TempDir()
	out := upBackground(t, data)
	file := filepath.Join(data, "weft.toml")
	for _, want := range []string{"cluster file: " + file, "export WEFT_CLUSTER=" + file, "down --data " + data} {
		if !strings.Contains(out, want) {
			t.Errorf("weft up -d does not say %q:\n%s", want, out)
		}
	}
	rec, err := cluster.ReadUpRecord(data)
	if err != nil || !rec.Alive() {
		t.Fatalf("weft up -d recorded %+v, %v; want its running pid", rec, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, _, err := run(ctx, "--cluster", file, "mkdir", "/d"); err != nil {
		t.Fatalf("the background cluster does not work: %v", err)
	}
	out, _, err = run(ctx, "down", "--data", data)
	if err != nil || !strings.Contains(out, "stopped") {
		t.Fatalf("weft down = %q, %v", out, err)
	}
	if rec.Alive() {
		t.Errorf("pid %d still runs after weft down", rec.Pid)
	}
	if _, err := os.Stat(filepath.Join(data, cluster.UpRecordName)); !os.IsNotExist(err) {
		t.Errorf("record left after weft down: %v", err)
	}
	out, _, err = run(ctx, "down", "--data", data)
	if err != nil || !strings.Contains(out, "no weft up is running") {
		t.Errorf("second weft down = %q, %v; want success saying nothing runs", out, err)
	}
}

// requireMount skips t unless this machine can mount FUSE file systems
// without fusermount3 (as root) or with it.
func requireMount(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("needs /dev/fuse: %v", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil && os.Geteuid() != 0 {
		t.Skip("needs root or fusermount3")
	}
}

// TestUpAfterKill9 is make up after a kill -9: the mount the killed
// process left fails every access ("transport endpoint is not
// connected"); weft up --mount clears it and mounts again. It also warns
// about a mount point that is not empty.
func TestUpAfterKill9(t *testing.T) {
	requireMount(t)
	data, mnt := t.TempDir(), filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "hidden"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out := upBackground(t, data, "--mount", mnt); !strings.Contains(out, "is not empty") {
		t.Errorf("weft up --mount on a directory that is not empty does not warn:\n%s", out)
	}
	rec, err := cluster.ReadUpRecord(data)
	if err != nil || rec.Mount != mnt {
		t.Fatalf("record %+v, %v; want the mount %s", rec, err, mnt)
	}
	if err := syscall.Kill(rec.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "the mount of the killed weft up goes stale", func() bool { return fusefs.Stale(mnt) })
	out := upBackground(t, data, "--mount", mnt)
	if !strings.Contains(out, "cleared a stale weft mount") {
		t.Errorf("weft up does not say it cleared the stale mount:\n%s", out)
	}
	if _, err := os.ReadDir(mnt); err != nil {
		t.Errorf("mount after restart: %v\n%s", err, out)
	}
	if _, _, err := run(ctx, "down", "--data", data); err != nil {
		t.Errorf("weft down: %v", err)
	}
	if fusefs.Mounted(mnt) {
		t.Errorf("%s still mounted after weft down", mnt)
	}
}
