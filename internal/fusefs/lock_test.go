package fusefs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weftfs/weft/internal/waitfor"
)

// File locks between two mounts of one cluster: the meta server arbitrates
// them (node_lock.go), so processes on different mounts exclude each other
// as processes on one machine do.

// twoLockMounts starts a cluster with two mounts and returns their
// directories.
func twoLockMounts(t *testing.T) (a, b string) {
	t.Helper()
	requireFUSE(t)
	tc := startCluster(t)
	return mount(t, tc.client(t), Options{}).Dir(), mount(t, tc.client(t), Options{}).Dir()
}

func openRW(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// fcntlLock sets (or, with F_UNLCK, removes) a POSIX lock on len bytes at
// start (len 0: to the end of the file).
func fcntlLock(f *os.File, cmd int, typ int16, start, length int64) error {
	lk := syscall.Flock_t{Type: typ, Whence: io.SeekStart, Start: start, Len: length}
	return syscall.FcntlFlock(f.Fd(), cmd, &lk)
}

func TestLockFlockTwoMounts(t *testing.T) {
	a, b := twoLockMounts(t)
	fa := openRW(t, a+"/f")
	fb := openRW(t, b+"/f")

	if err := syscall.Flock(int(fa.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	for _, how := range []int{syscall.LOCK_EX, syscall.LOCK_SH} {
		if err := syscall.Flock(int(fb.Fd()), how|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Fatalf("flock %d|LOCK_NB on the other mount under an exclusive lock: %v, want EWOULDBLOCK", how, err)
		}
	}
	// Two open file descriptions on one mount exclude each other too.
	fa2 := openRW(t, a+"/f")
	if err := syscall.Flock(int(fa2.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock on a second descriptor of the same mount: %v, want EWOULDBLOCK", err)
	}
	// POSIX locks do not see flock locks.
	if err := fcntlLock(fb, syscall.F_SETLK, syscall.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("fcntl lock beside a flock lock: %v", err)
	}
	if err := fcntlLock(fb, syscall.F_SETLK, syscall.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}

	// Downgrade to shared: readers come in, writers stay out.
	if err := syscall.Flock(int(fa.Fd()), syscall.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(fb.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		t.Fatalf("shared flock beside a shared flock: %v", err)
	}
	if err := syscall.Flock(int(fa2.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("exclusive flock beside shared ones: %v", err)
	}
	if err := syscall.Flock(int(fa.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	// Closing the descriptor releases its flock. The kernel sends that
	// release in the background after close returns (FUSE RELEASE), so
	// the lock is free a moment later.
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "exclusive flock after the other holders unlocked and closed", func() error {
		return syscall.Flock(int(fa2.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	})
}

// eventually retries try until it succeeds, failing t after within.
func eventually(t *testing.T, within time.Duration, what string, try func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %v after %v", what, err, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLockFcntlTwoMounts(t *testing.T) {
	a, b := twoLockMounts(t)
	fa := openRW(t, a+"/f")
	fb := openRW(t, b+"/f")

	if err := fcntlLock(fa, syscall.F_SETLK, syscall.F_WRLCK, 0, 100); err != nil {
		t.Fatal(err)
	}
	if err := fcntlLock(fb, syscall.F_SETLK, syscall.F_WRLCK, 50, 11); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("overlapping write lock from the other mount: %v, want EAGAIN", err)
	}
	if err := fcntlLock(fb, syscall.F_SETLK, syscall.F_RDLCK, 99, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("read lock on the last locked byte: %v, want EAGAIN", err)
	}
	if err := fcntlLock(fb, syscall.F_SETLK, syscall.F_WRLCK, 100, 100); err != nil {
		t.Fatalf("write lock right after the other mount's: %v", err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: 10, Len: 1}
	if err := syscall.FcntlFlock(fb.Fd(), syscall.F_GETLK, &lk); err != nil {
		t.Fatal(err)
	}
	if lk.Type != syscall.F_WRLCK || lk.Start != 0 || lk.Len != 100 || lk.Pid != int32(os.Getpid()) {
		t.Errorf("F_GETLK from the other mount: %+v, want a write lock 0+100 of pid %d", lk, os.Getpid())
	}
	lk = syscall.Flock_t{Type: syscall.F_RDLCK, Whence: io.SeekStart, Start: 300, Len: 0}
	if err := syscall.FcntlFlock(fb.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type != syscall.F_UNLCK {
		t.Errorf("F_GETLK where nothing is locked: %+v, %v", lk, err)
	}

	// Unlocking part of a range frees just that part.
	if err := fcntlLock(fa, syscall.F_SETLK, syscall.F_UNLCK, 40, 20); err != nil {
		t.Fatal(err)
	}
	if err := fcntlLock(fb, syscall.F_SETLK, syscall.F_WRLCK, 45, 10); err != nil {
		t.Fatalf("lock in the unlocked hole: %v", err)
	}
	if err := fcntlLock(fb, syscall.F_SETLK, syscall.F_WRLCK, 35, 10); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("lock across the hole's edge: %v, want EAGAIN", err)
	}

	// Closing any descriptor of the file releases the process's locks on
	// it (POSIX), even one it did not lock through.
	other, err := os.Open(a + "/f")
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	if err := fcntlLock(fb, syscall.F_SETLK, syscall.F_WRLCK, 0, 45); err != nil {
		t.Fatalf("lock after the holder closed a descriptor of the file: %v", err)
	}
	if err := fcntlLock(fa, syscall.F_SETLK, syscall.F_RDLCK, 0, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("lock held by the other mount: %v, want EAGAIN", err)
	}
}

// Open file description locks belong to the descriptor, not the process:
// two descriptors of one process exclude each other, and the last close of
// the descriptor releases its lock.
func TestLockOFDTwoMounts(t *testing.T) {
	a, b := twoLockMounts(t)
	f1 := openRW(t, a+"/f")
	f2 := openRW(t, a+"/f")
	fb := openRW(t, b+"/f")
	if err := fcntlLock(f1, unix.F_OFD_SETLK, syscall.F_WRLCK, 0, 10); err != nil {
		t.Fatal(err)
	}
	if err := fcntlLock(f2, unix.F_OFD_SETLK, syscall.F_WRLCK, 5, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("OFD lock from a second descriptor of the same process: %v, want EAGAIN", err)
	}
	if err := fcntlLock(fb, unix.F_OFD_SETLK, syscall.F_RDLCK, 9, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("OFD lock from the other mount: %v, want EAGAIN", err)
	}
	if err := fcntlLock(fb, syscall.F_SETLK, syscall.F_RDLCK, 9, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("POSIX lock from the other mount over an OFD lock: %v, want EAGAIN", err)
	}
	if err := f1.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "OFD lock after the holder's descriptor closed", func() error {
		return fcntlLock(fb, unix.F_OFD_SETLK, syscall.F_WRLCK, 0, 10)
	})
}

func TestLockSetlkwWaitsForUnlock(t *testing.T) {
	a, b := twoLockMounts(t)
	fa := openRW(t, a+"/f")
	fb := openRW(t, b+"/f")
	if err := fcntlLock(fa, syscall.F_SETLK, syscall.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fcntlLock(fb, syscall.F_SETLKW, syscall.F_WRLCK, 10, 10) }()
	select {
	case err := <-done:
		t.Fatalf("F_SETLKW returned %v while the other mount holds the lock", err)
	case <-time.After(300 * time.Millisecond):
	}
	start := time.Now()
	if err := fcntlLock(fa, syscall.F_SETLK, syscall.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("F_SETLKW: %v", err)
		}
		t.Logf("F_SETLKW granted %v after the unlock", time.Since(start))
	case <-time.After(10 * time.Second):
		// Unblock the waiter so the mounts can go.
		fb.Close()
		t.Fatal("F_SETLKW still blocked 10s after the unlock")
	}
	if err := fcntlLock(fa, syscall.F_SETLK, syscall.F_RDLCK, 15, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("lock the waiter got: %v, want EAGAIN", err)
	}
}

// startPython runs a Python script with args and returns it with its
// standard output as lines; t.Cleanup kills it. It starts without touching
// the mounts (no working directory there).
func startPython(t *testing.T, script string, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	needTool(t, "python3")
	cmd := exec.Command("python3", append([]string{"-u", "-c", script}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("python stderr:\n%s", stderr.String())
		}
	})
	return cmd, lines
}

func wantLine(t *testing.T, lines <-chan string, prefix string, within time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("python exited before printing %q", prefix)
		}
		if !strings.HasPrefix(l, prefix) {
			t.Fatalf("python printed %q, want %q", l, prefix)
		}
		return l
	case <-time.After(within):
		t.Fatalf("python did not print %q within %v", prefix, within)
	}
	return ""
}

// A process blocked in F_SETLKW on a lock held through the other mount is
// interrupted by a signal, and its abandoned wait does not take the lock
// later.
func TestLockSetlkwInterrupted(t *testing.T) {
	a, b := twoLockMounts(t)
	fa := openRW(t, a+"/f")
	if err := fcntlLock(fa, syscall.F_SETLK, syscall.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	cmd, lines := startPython(t, `
import fcntl, sys, time
f = open(sys.argv[1], "r+")
print("waiting")
t = time.time()
try:
    fcntl.lockf(f, fcntl.LOCK_EX)  # F_SETLKW on the whole file
    print("granted")
except KeyboardInterrupt:
    print("interrupted after %.3fs" % (time.time() - t))
time.sleep(60)
`, b+"/f")
	wantLine(t, lines, "waiting", 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	t.Log(wantLine(t, lines, "interrupted", 5*time.Second))

	// The interrupted wait is gone from the server: when A unlocks, a third
	// descriptor gets the lock, not the interrupted process. (Its wait may
	// still be on its way out when A unlocks, on a loaded machine: what
	// must not happen is that it keeps the lock.)
	if err := fcntlLock(fa, syscall.F_SETLK, syscall.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	fb := openRW(t, b+"/f")
	waitfor.NoError(t, 10*time.Second, "the lock after the interrupted waiter gave up", func() error {
		return fcntlLock(fb, syscall.F_SETLK, syscall.F_WRLCK, 0, 0)
	})
}

// The kernel releases the locks of a process that dies (its descriptors are
// closed), and the other mount sees it.
func TestLockKilledHolderReleases(t *testing.T) {
	a, b := twoLockMounts(t)
	cmd, lines := startPython(t, `
import fcntl, sys, time
f = open(sys.argv[1], "w")
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
g = open(sys.argv[2], "w")
fcntl.flock(g, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked")
time.sleep(60)
`, a+"/posix", a+"/flock")
	wantLine(t, lines, "locked", 10*time.Second)
	fb := openRW(t, b+"/posix")
	gb := openRW(t, b+"/flock")
	if err := fcntlLock(fb, syscall.F_SETLK, syscall.F_WRLCK, 0, 10); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("lock held by the python process: %v, want EAGAIN", err)
	}
	if err := syscall.Flock(int(gb.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock held by the python process: %v, want EWOULDBLOCK", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = cmd.Process.Wait()
	// The release requests may still be on their way when wait returns.
	eventually(t, 5*time.Second, "fcntl lock of a killed process", func() error {
		return fcntlLock(fb, syscall.F_SETLK, syscall.F_WRLCK, 0, 10)
	})
	eventually(t, 5*time.Second, "flock of a killed process", func() error {
		return syscall.Flock(int(gb.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	})
}

// A mount whose process dies (kill -9) cannot release anything: its locks go
// when its lock session expires on the meta server, within its lifetime
// (10 s) after the last keepalive.
func TestLockDeadMountExpires(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	b := mount(t, tc.client(t), Options{}).Dir()
	a := newMountPoint(t)
	pid := mountBackground(t, tc.emb.ClusterFile(), a)

	_, lines := startPython(t, `
import fcntl, sys, time
f = open(sys.argv[1], "w")
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked")
time.sleep(120)
`, a+"/f")
	wantLine(t, lines, "locked", 20*time.Second)
	fb := openRW(t, b+"/f")
	if err := fcntlLock(fb, syscall.F_SETLK, syscall.F_WRLCK, 0, 0); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("lock held through the other mount: %v, want EAGAIN", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	killed := time.Now()
	// The lock holder itself lives on, its lock unreleasable.
	for {
		err := fcntlLock(fb, syscall.F_SETLK, syscall.F_WRLCK, 0, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("lock while waiting for the expiry: %v", err)
		}
		if time.Since(killed) > 20*time.Second {
			t.Fatal("lock of a dead mount still held 20s after the kill")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("lock free %v after the mount was killed", time.Since(killed).Round(time.Millisecond))
}

// SQLite from two mounts at once: two processes, one per mount, each
// inserting rows in its own transactions into one database. Without locks
// between mounts they overwrite each other's pages.
func TestLockSQLiteTwoMounts(t *testing.T) {
	needTool(t, "python3")
	if err := exec.Command("python3", "-c", "import sqlite3").Run(); err != nil {
		t.Skip("python3 has no sqlite3 module")
	}
	a, b := twoLockMounts(t)
	const rows = 200
	setup := `
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("create table t (k integer primary key, who text, n integer)")
db.commit()
db.close()
`
	writer := `
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
who, rows = sys.argv[2], int(sys.argv[3])
for i in range(rows):
    # Read, then write, in one transaction: a lost update or a stale page
    # shows up as a repeated count or a broken database.
    db.execute("begin immediate")
    n = db.execute("select count(*) from t").fetchone()[0]
    db.execute("insert into t (who, n) values (?, ?)", (who, n))
    db.execute("commit")
print("done", who)
`
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(script string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "python3", append([]string{"-c", script}, args...)...)
		return cmd
	}
	if out, err := run(setup, a+"/test.db").CombinedOutput(); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	start := time.Now()
	cmds := []*exec.Cmd{
		run(writer, a+"/test.db", "a", fmt.Sprint(rows)),
		run(writer, b+"/test.db", "b", fmt.Sprint(rows)),
	}
	outs := make([]strings.Builder, len(cmds))
	for i, cmd := range cmds {
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer %d: %v\n%s", i, err, outs[i].String())
		}
	}
	t.Logf("%d transactions from two mounts in %v", 2*rows, time.Since(start).Round(time.Millisecond))
	check := `
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
ok = db.execute("pragma integrity_check").fetchone()[0]
n = db.execute("select count(*) from t").fetchone()[0]
seen = db.execute("select count(distinct n) from t").fetchone()[0]
mx = db.execute("select max(n) from t").fetchone()[0]
print(ok, n, seen, mx)
`
	for _, dir := range []string{a, b} {
		out, err := run(check, filepath.Join(dir, "test.db")).CombinedOutput()
		if err != nil {
			t.Fatalf("check: %v\n%s", err, out)
		}
		// Each transaction counted the rows before it: the counts are
		// 0..399, each once.
		want := fmt.Sprintf("ok %d %d %d", 2*rows, 2*rows, 2*rows-1)
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("database seen from %s: %q, want %q (integrity, rows, distinct counts, max count)", dir, got, want)
		}
	}
}

// SQLite deletes its journal at every commit and creates it again: a mount
// whose kernel still has the removed name cached must create the file on
// open(O_CREAT), not fail with ENOENT.
func TestLockCreateOverRemovedName(t *testing.T) {
	a, b := twoLockMounts(t)
	for _, name := range []string{"j", "k"} {
		if err := os.WriteFile(a+"/"+name, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(b + "/" + name); err != nil { // b caches the name
			t.Fatal(err)
		}
		if err := os.Remove(a + "/" + name); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(b+"/j", []byte("new"), 0o644); err != nil {
		t.Fatalf("create over a name another mount removed: %v", err)
	}
	if got, err := os.ReadFile(a + "/j"); err != nil || string(got) != "new" {
		t.Errorf("the file created from the other mount: %q, %v", got, err)
	}
	if _, err := os.OpenFile(b+"/k", os.O_RDWR, 0); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("open without O_CREAT of a name another mount removed: %v, want ENOENT", err)
	}
}
