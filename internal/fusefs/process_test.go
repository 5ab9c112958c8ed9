package fusefs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/weftbin"
)

// These tests run the weft binary (built once per test run) as users do:
// weft mount in the foreground and in the background, weft umount, and a
// mount process killed with SIGKILL.

func TestMain(m *testing.M) { weftbin.Main(m) }

// weft runs the weft binary to completion and returns its output.
func weft(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, weftbin.Path(t), args...).CombinedOutput()
	return string(out), err
}

var pidRE = regexp.MustCompile(`\(pid (\d+)\)`)

// mountBackground runs weft mount -d on mnt and returns the pid of the
// background process, which t.Cleanup kills if it is still there (and the
// mount point is cleared).
func mountBackground(t *testing.T, clusterFile, mnt string) int {
	t.Helper()
	logf := filepath.Join(t.TempDir(), "mount.log")
	args := []string{"mount", "--cluster", clusterFile, "-d", "--log-file", logf, mnt}
	if d := os.Getenv("WEFT_MOUNT_LOGS"); d != "" {
		// Named by the test too: the next test's mount points have the
		// same numbers, and would overwrite the logs of a failed run.
		test := strings.NewReplacer("/", "-").Replace(t.Name())
		logf = filepath.Join(d, test+"-"+filepath.Base(filepath.Dir(mnt))+".log")
		args = []string{"mount", "--cluster", clusterFile, "-d", "--fuse-debug", "--log-level", "debug", "--log-file", logf, mnt}
	}
	out, err := weft(t, args...)
	if err != nil {
		t.Fatalf("weft mount -d: %v\n%s", err, out)
	}
	return daemonAtEnd(t, out, mnt)
}

// daemonAtEnd returns the pid a daemon (weft mount -d, weft up -d) printed
// in out; t.Cleanup kills it and clears its mount mnt.
func daemonAtEnd(t *testing.T, out, mnt string) int {
	t.Helper()
	m := pidRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the daemon printed no pid: %q", out)
	}
	pid, _ := strconv.Atoi(m[1])
	t.Cleanup(func() {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if Mounted(mnt) {
			_ = Unmount(mnt)
		}
	})
	return pid
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(data), ") ")
	return !strings.HasPrefix(rest, "Z")
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); alive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running", pid)
		}
	}
}

func newMountPoint(t *testing.T) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return mnt
}

// TestKilledMountRecovers kills a background weft mount with SIGKILL: the
// mount point is left stale, a new mount clears it (its process is gone)
// and mounts, and the data and servers are intact.
func TestKilledMountRecovers(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	c := tc.client(t)
	file := tc.emb.ClusterFile()
	mnt := newMountPoint(t)

	pid := mountBackground(t, file, mnt)
	want := bytes.Repeat([]byte("survives "), 20000)
	if err := os.WriteFile(mnt+"/f", want, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)

	start := time.Now()
	for !Stale(mnt) {
		if time.Since(start) > 10*time.Second {
			var st syscall.Statfs_t
			t.Fatalf("mount point not stale 10s after the kill: statfs %v", syscall.Statfs(mnt, &st))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("stale after %v", time.Since(start))
	// The servers did not notice.
	if a, err := c.Stat(context.Background(), "/f"); err != nil || a.Size != uint64(len(want)) {
		t.Errorf("stat through the library after the kill: %+v, %v", a, err)
	}
	mountBackground(t, file, mnt) // clears the stale mount first
	if got, err := os.ReadFile(mnt + "/f"); err != nil || !bytes.Equal(got, want) {
		t.Errorf("file after remount: %d bytes, %v", len(got), err)
	}
	if out, err := weft(t, "umount", mnt); err != nil {
		t.Errorf("weft umount: %v\n%s", err, out)
	}
}

// TestMountForegroundSignal stops a foreground weft mount with SIGINT, once
// idle (a clean unmount) and once busy (a file open in it: detached, and
// served until the file is closed).
func TestMountForegroundSignal(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	file := tc.emb.ClusterFile()
	bin := weftbin.Path(t)
	for _, busy := range []bool{false, true} {
		mnt := newMountPoint(t)
		cmd := exec.Command(bin, "mount", "--cluster", file, mnt)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			if Mounted(mnt) {
				_ = Unmount(mnt)
			}
		})
		for deadline := time.Now().Add(30 * time.Second); !Mounted(mnt); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not mounted after 30s:\n%s", out.String())
			}
		}
		var f *os.File
		if busy {
			var err error
			if f, err = os.Create(mnt + "/open"); err != nil {
				t.Fatal(err)
			}
		}
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if busy {
			// Detached at once, still serving the open file.
			for deadline := time.Now().Add(10 * time.Second); Mounted(mnt); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("busy mount not detached after SIGINT:\n%s", out.String())
				}
			}
			if _, err := f.WriteString("still served"); err != nil {
				t.Errorf("write to a file open in the detached mount: %v", err)
			}
			if err := f.Close(); err != nil {
				t.Errorf("close in the detached mount: %v", err)
			}
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("busy=%v: weft mount exited with %v:\n%s", busy, err, out.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("busy=%v: weft mount still running 20s after SIGINT:\n%s", busy, out.String())
		}
		if Mounted(mnt) {
			t.Errorf("busy=%v: still mounted after weft mount exited", busy)
		}
	}
}

// upBackground runs weft up -d --mount mnt (and extra flags) with its data
// in data and returns its pid; t.Cleanup stops it with SIGTERM (then
// SIGKILL) and clears the mount point.
func upBackground(t *testing.T, data, mnt string, extra ...string) int {
	t.Helper()
	args := []string{"up", "--data", data, "--durability", "async", "--mount", mnt, "-d", "--log-file", filepath.Join(t.TempDir(), "up.log")}
	args = append(args, extra...)
	if log := os.Getenv("WEFT_UP_LOG"); log != "" {
		// Keep the server's log (with every FUSE request) for a failure.
		args = append(args, "--log-file", log, "--fuse-debug")
	}
	out, err := weft(t, args...)
	if err != nil {
		t.Fatalf("weft up -d --mount: %v\n%s", err, out)
	}
	m := pidRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no pid in %q", out)
	}
	pid, _ := strconv.Atoi(m[1])
	t.Cleanup(func() {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			for deadline := time.Now().Add(10 * time.Second); alive(pid) && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			}
			if alive(pid) {
				t.Errorf("weft up (pid %d) still running 10s after SIGTERM", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if Mounted(mnt) {
			_ = Unmount(mnt)
		}
	})
	return pid
}

// TestUpWithMount runs weft up --mount in the background, uses the mount,
// and stops it with SIGTERM.
func TestUpWithMount(t *testing.T) {
	requireFUSE(t)
	mnt := newMountPoint(t)
	pid := upBackground(t, t.TempDir(), mnt)
	if err := os.WriteFile(mnt+"/hello", []byte("world"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(mnt + "/hello"); err != nil || string(got) != "world" {
		t.Errorf("read back: %q, %v", got, err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	if Mounted(mnt) {
		t.Error("still mounted after weft up stopped")
	}
}
