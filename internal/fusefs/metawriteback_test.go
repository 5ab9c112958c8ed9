package fusefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/posixtest"
	"github.com/weftfs/weft/internal/waitfor"
)

// mountWriteBack runs weft mount -d --durability writeback on mnt and
// returns the pid of the mount process (killed and cleared by t.Cleanup).
func mountWriteBack(t *testing.T, clusterFile, mnt string) int {
	t.Helper()
	return mountDurability(t, clusterFile, mnt, "writeback")
}

// mountDurability is mountWriteBack with the mount's --durability mode.
func mountDurability(t *testing.T, clusterFile, mnt, mode string) int {
	t.Helper()
	out, err := weft(t, "mount", "--cluster", clusterFile, "--durability", mode, "-d",
		"--log-file", filepath.Join(t.TempDir(), "mount.log"), mnt)
	if err != nil {
		t.Fatalf("weft mount -d --durability %s: %v\n%s", mode, err, out)
	}
	m := regexp.MustCompile(`\(pid (\d+)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("weft mount -d printed no pid: %q", out)
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

// stormModel is what a create/rename/unlink storm did, and what was durable
// at its last completed fsync of the directory.
type stormModel struct {
	now    map[string]bool // names existing after each op, as the storm saw it
	synced map[string]bool // ... at the last completed fsync
	since  map[string]bool // names changed after that fsync: either state may be on the servers
	ops    int
	syncs  int
}

// storm creates, renames and unlinks files in dir until an operation fails
// (the mount died) or stop closes, with an fsync of the directory every 25
// files. The directory is opened once: an opendir reads the directory,
// which sends the queue, and would hide a lost fsync.
func storm(dir string, stop <-chan struct{}, synced *atomic.Int64) *stormModel {
	m := &stormModel{now: map[string]bool{}, synced: map[string]bool{}, since: map[string]bool{}}
	d, err := os.Open(dir)
	if err != nil {
		return m
	}
	defer d.Close()
	touch := func(names ...string) {
		for _, n := range names {
			m.since[n] = true
		}
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return m
		default:
		}
		name := fmt.Sprintf("f%05d", i)
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return m
		}
		touch(name)
		if _, err := f.Write(stormContent(i)); err != nil {
			f.Close()
			return m
		}
		if f.Close() != nil {
			return m
		}
		m.now[name] = true
		m.ops++
		if i%3 == 1 {
			to := fmt.Sprintf("r%05d", i)
			touch(name, to)
			if os.Rename(filepath.Join(dir, name), filepath.Join(dir, to)) != nil {
				return m
			}
			delete(m.now, name)
			m.now[to] = true
			m.ops++
		}
		if i%5 == 4 {
			victim := fmt.Sprintf("f%05d", i-2)
			if m.now[victim] {
				touch(victim)
				if os.Remove(filepath.Join(dir, victim)) != nil {
					return m
				}
				delete(m.now, victim)
				m.ops++
			}
		}
		if i%7 == 3 {
			// A directory with a file in it, made under write-back.
			sub := fmt.Sprintf("d%05d", i)
			touch(sub)
			if os.Mkdir(filepath.Join(dir, sub), 0o755) != nil {
				return m
			}
			m.now[sub] = true
			if os.WriteFile(filepath.Join(dir, sub, "x"), stormContent(i), 0o644) != nil {
				return m
			}
			m.ops += 2
		}
		if i%14 == 6 {
			// Emptied and removed, before or after its mkdir was sent.
			sub := fmt.Sprintf("d%05d", i-3)
			touch(sub)
			if os.Remove(filepath.Join(dir, sub, "x")) != nil || os.Remove(filepath.Join(dir, sub)) != nil {
				return m
			}
			delete(m.now, sub)
			m.ops += 2
		}
		if i%25 == 24 {
			if d.Sync() != nil {
				return m
			}
			m.synced = make(map[string]bool, len(m.now))
			for n := range m.now {
				m.synced[n] = true
			}
			m.since = map[string]bool{}
			m.syncs++
			synced.Add(1)
		}
	}
}

// stormContent is what the storm writes to its file number i (which keeps
// its number when renamed).
func stormContent(i int) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "storm %05d\n", i), 1+i%20)
}

// TestWriteBackMountKilledDuringStorm kills a writeback mount with SIGKILL
// during a create/rename/unlink storm. Every change the storm had fsynced
// (the directory) is on the servers, names changed since are in their old
// or new state, nothing dangles and weft fsck is clean.
func TestWriteBackMountKilledDuringStorm(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	c := tc.client(t)
	file := tc.emb.ClusterFile()
	mnt := newMountPoint(t)
	pid := mountWriteBack(t, file, mnt)
	dir := filepath.Join(mnt, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	stop := make(chan struct{})
	done := make(chan *stormModel, 1)
	var synced atomic.Int64
	go func() { done <- storm(dir, stop, &synced) }()
	// Kill once the storm is well under way: after some fsyncs, and in
	// the middle of the changes that follow one.
	waitfor.Until(t, 30*time.Second, "eight fsyncs of the storm", func() bool { return synced.Load() >= 8 })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	close(stop)
	var m *stormModel
	select {
	case m = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the storm did not stop after the mount died")
	}
	if Mounted(mnt) {
		_ = Unmount(mnt)
	}
	t.Logf("storm: %v", time.Since(start))
	t.Logf("storm: %d ops, %d fsyncs, %d names at the last fsync, %d changed since", m.ops, m.syncs, len(m.synced), len(m.since))
	if m.syncs == 0 {
		t.Fatal("the storm never completed an fsync")
	}

	ctx := context.Background()
	d, err := c.Stat(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	onServer := map[string]bool{}
	if err := c.ReadDirAt(ctx, d.Ino, true, func(e core.DirEntry) error {
		onServer[e.Name] = true
		if _, err := c.LookupAt(ctx, d.Ino, e.Name); err != nil {
			t.Errorf("listed %s does not resolve: %v", e.Name, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	lost, resurrected := 0, 0
	for n := range m.synced {
		if !m.since[n] && !onServer[n] {
			lost++
			t.Errorf("%s was fsynced and is gone", n)
		}
	}
	// Every file holds its whole content, or (changed since the last
	// fsync) none yet: never part of it, never another's.
	for n := range onServer {
		i, err := strconv.Atoi(n[1:])
		if err != nil {
			t.Errorf("unexpected name %q", n)
			continue
		}
		if n[0] == 'd' {
			checkStormDir(t, ctx, c, n, i)
			continue
		}
		f, err := c.Open(ctx, "/d/"+n, os.O_RDONLY, 0)
		if err != nil {
			t.Errorf("open %s: %v", n, err)
			continue
		}
		got, err := io.ReadAll(f)
		f.Close()
		want := stormContent(i)
		switch {
		case err != nil:
			t.Errorf("read %s: %v", n, err)
		case bytes.Equal(got, want):
		case len(got) == 0 && m.since[n]:
		default:
			t.Errorf("%s holds %d bytes %.20q, want %d bytes %.20q (fsynced: %v)", n, len(got), got, len(want), want, !m.since[n])
		}
	}
	for n := range onServer {
		if !m.synced[n] && !m.since[n] {
			resurrected++
			t.Errorf("%s is on the servers but was removed before the last fsync (or never made)", n)
		}
	}
	t.Logf("%d names on the servers; %d fsynced names lost, %d unexpected", len(onServer), lost, resurrected)
	if _, err := c.LookupAt(ctx, d.Ino, "no-such-name"); !errs.Is(err, errs.NotExist) {
		t.Errorf("lookup of a missing name: %v", err)
	}
	out, err := weft(t, "fsck", "--cluster", file)
	if err != nil {
		var ee interface{ ExitCode() int }
		if errors.As(err, &ee) {
			t.Errorf("weft fsck exit %d:\n%s", ee.ExitCode(), out)
		} else {
			t.Errorf("weft fsck: %v\n%s", err, out)
		}
	} else {
		t.Logf("weft fsck: %s", out)
	}
}

// checkStormDir checks directory name (the storm's number i) on the
// servers: a directory holding nothing, or x.
func checkStormDir(t *testing.T, ctx context.Context, c *client.Client, name string, i int) {
	t.Helper()
	a, err := c.Stat(ctx, "/d/"+name)
	if err != nil || !a.IsDir() {
		t.Errorf("%s: %+v, %v; want a directory", name, a, err)
		return
	}
	if err := c.ReadDirAt(ctx, a.Ino, false, func(e core.DirEntry) error {
		if e.Name != "x" {
			t.Errorf("%s holds %q", name, e.Name)
			return nil
		}
		f, err := c.Open(ctx, "/d/"+name+"/x", os.O_RDONLY, 0)
		if err != nil {
			t.Errorf("open %s/x: %v", name, err)
			return nil
		}
		defer f.Close()
		// Nothing in the directory was fsynced: x may hold its content
		// or (its create sent before its commit) none, never part of it.
		got, err := io.ReadAll(f)
		if err != nil || len(got) > 0 && !bytes.Equal(got, stormContent(i)) {
			t.Errorf("%s/x holds %d bytes (%v), want %d or 0", name, len(got), err, len(stormContent(i)))
		}
		return nil
	}); err != nil {
		t.Errorf("readdir %s: %v", name, err)
	}
}

// TestUpWritebackMountStopFlushes runs weft up --durability writeback
// --mount, creates, renames and removes files through the mount without
// any fsync, and stops it with SIGTERM: the unmount sends every queued
// change before the servers stop, so a restarted cluster has them all.
func TestUpWritebackMountStopFlushes(t *testing.T) {
	requireFUSE(t)
	mnt := newMountPoint(t)
	data := t.TempDir()
	out, err := weft(t, "up", "--data", data, "--durability", "writeback", "--mount", mnt, "-d",
		"--log-file", filepath.Join(t.TempDir(), "up.log"))
	if err != nil {
		t.Fatalf("weft up -d --durability writeback --mount: %v\n%s", err, out)
	}
	pid := daemonAtEnd(t, out, mnt)
	want := map[string]bool{}
	for i := range 100 {
		name := fmt.Sprintf("f%03d", i)
		if err := os.WriteFile(filepath.Join(mnt, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want[name] = true
		if i%4 == 1 {
			to := fmt.Sprintf("r%03d", i)
			if err := os.Rename(filepath.Join(mnt, name), filepath.Join(mnt, to)); err != nil {
				t.Fatal(err)
			}
			delete(want, name)
			want[to] = true
		}
		if i%4 == 2 {
			if err := os.Remove(filepath.Join(mnt, name)); err != nil {
				t.Fatal(err)
			}
			delete(want, name)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)

	emb, err := cluster.StartEmbedded(context.Background(), cluster.EmbeddedOptions{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	c, err := client.New(cluster.ClientConfig(emb.Config(), core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := map[string]bool{}
	if err := c.ReadDirAt(context.Background(), core.RootIno, false, func(e core.DirEntry) error { got[e.Name] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("%d names after the restart, want %d", len(got), len(want))
	}
	for n := range want {
		if !got[n] {
			t.Errorf("%s is missing after a clean stop", n)
		}
	}
}

// TestWriteBackTwoMounts: changes a writeback mount completed without any
// fsync are seen at once by another mount (its read lease recalls the
// directory's write lease, which sends them first): a listing, a stat of
// a renamed file's new name and a missing removed one.
func TestWriteBackTwoMounts(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	file := tc.emb.ClusterFile()
	a, b := newMountPoint(t), newMountPoint(t)
	mountWriteBack(t, file, a)
	mountBackground(t, file, b)
	if err := os.Mkdir(filepath.Join(a, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	// b looks at d once, so that its kernel and its client cache it.
	if _, err := os.ReadDir(filepath.Join(b, "d")); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range 50 {
		name := fmt.Sprintf("f%02d", i)
		if err := os.WriteFile(filepath.Join(a, "d", name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		want[name] = true
	}
	if err := os.Rename(filepath.Join(a, "d", "f00"), filepath.Join(a, "d", "moved")); err != nil {
		t.Fatal(err)
	}
	delete(want, "f00")
	want["moved"] = true
	if err := os.Remove(filepath.Join(a, "d", "f01")); err != nil {
		t.Fatal(err)
	}
	delete(want, "f01")
	if err := os.Chmod(filepath.Join(a, "d", "f02"), 0o640); err != nil {
		t.Fatal(err)
	}

	ents, err := os.ReadDir(filepath.Join(b, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(want) {
		t.Errorf("the other mount lists %d names, want %d", len(ents), len(want))
	}
	for _, e := range ents {
		if !want[e.Name()] {
			t.Errorf("the other mount lists %s", e.Name())
		}
	}
	if st, err := os.Stat(filepath.Join(b, "d", "f02")); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("chmod on the writeback mount, stat on the other: %v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(b, "d", "f01")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a removed file on the other mount: %v", err)
	}
}

// TestPOSIXWriteBack runs the conformance suite through a mount in
// writeback mode: whatever write-back completes in the client must agree
// with Linux as the servers do.
func TestPOSIXWriteBack(t *testing.T) {
	requireFUSE(t)
	posixtest.Run(t, func(t *testing.T) posixtest.FS {
		if reason, ok := posixKnownBugs[path.Base(t.Name())]; ok {
			t.Skip("known disagreement with Linux: " + reason)
		}
		tc := startCluster(t)
		c := tc.client(t, func(cfg *client.Config) { cfg.WriteBack = true })
		m := mount(t, c, Options{})
		return posixtest.LocalFSAs(m.Dir())
	})
}

// TestPOSIXWriteBackSplit is TestPOSIXWriteBack on 4 meta servers whose
// directories split at 8 entries: batches go per partition and follow
// splits.
func TestPOSIXWriteBackSplit(t *testing.T) {
	requireFUSE(t)
	posixtest.Run(t, func(t *testing.T) posixtest.FS {
		if reason, ok := posixKnownBugs[path.Base(t.Name())]; ok {
			t.Skip("known disagreement with Linux: " + reason)
		}
		newClient := multiClient(t, 4, 8, func(cfg *client.Config) {
			cfg.WriteBack = true
			cfg.ChunkSize, cfg.InlineLimit = posixtest.TestChunkSize, posixtest.TestInlineLimit
		})
		m := mount(t, newClient(), Options{})
		return posixtest.LocalFSAs(m.Dir())
	})
}

// TestWriteBackTwoWritersAlternate: two writeback mounts change one
// directory in turns; after each change the other mount sees it at once
// (each change recalls the other's write lease, which sends its queue).
func TestWriteBackTwoWritersAlternate(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	wb := func(cfg *client.Config) { cfg.WriteBack = true }
	ma := mount(t, tc.client(t, wb), Options{})
	mb := mount(t, tc.client(t, wb), Options{})
	a, b := ma.Dir(), mb.Dir()
	if err := os.Mkdir(filepath.Join(a, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		w, r := a, b
		if i%2 == 1 {
			w, r = b, a
		}
		name := fmt.Sprintf("f%02d", i)
		if err := os.WriteFile(filepath.Join(w, "d", name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(r, "d", name)); err != nil {
			t.Fatalf("round %d: the other mount does not see the create: %v", i, err)
		}
		if i > 0 {
			prev := fmt.Sprintf("f%02d", i-1)
			if err := os.Rename(filepath.Join(w, "d", prev), filepath.Join(w, "d", "r"+prev)); err != nil {
				t.Fatalf("round %d: rename of the other mount's file: %v", i, err)
			}
			if _, err := os.Stat(filepath.Join(r, "d", "r"+prev)); err != nil {
				t.Fatalf("round %d: the other mount does not see the rename: %v", i, err)
			}
			if _, err := os.Stat(filepath.Join(r, "d", prev)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("round %d: the other mount still sees the old name: %v", i, err)
			}
		}
	}
	for _, m := range []string{a, b} {
		ents, err := os.ReadDir(filepath.Join(m, "d"))
		if err != nil || len(ents) != 20 {
			t.Errorf("%s lists %d names (%v), want 20", m, len(ents), err)
		}
	}
}

// TestWriteBackUntarTwoMounts: tar -xf on a writeback mount (tar creates,
// writes, stamps, chowns and chmods each file before closing it: all of
// it is written back, folded into the file's create) and the other mount
// sees every file's content, mode, owner and mtime at once, with no
// fsync: its reads recall the write leases, which send the queues.
func TestWriteBackUntarTwoMounts(t *testing.T) {
	requireFUSE(t)
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar")
	}
	src := t.TempDir()
	want := map[string][]byte{}
	for i := range 60 {
		dir := filepath.Join(src, fmt.Sprintf("d%d", i%4))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(fmt.Sprintf("d%d", i%4), fmt.Sprintf("f%02d", i))
		data := stormContent(i)
		if err := os.WriteFile(filepath.Join(src, name), data, 0o600+os.FileMode(i%2)*0o044); err != nil {
			t.Fatal(err)
		}
		mtime := time.Unix(1_600_000_000+int64(i), 0)
		if err := os.Chtimes(filepath.Join(src, name), mtime, mtime); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(src, name), 1000+i, 100); err != nil {
			t.Fatal(err)
		}
		want[name] = data
	}
	tarball := filepath.Join(t.TempDir(), "t.tar")
	if out, err := exec.Command("tar", "-cf", tarball, "-C", src, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar -c: %v\n%s", err, out)
	}
	tc := startCluster(t)
	file := tc.emb.ClusterFile()
	a, b := newMountPoint(t), newMountPoint(t)
	mountWriteBack(t, file, a)
	mountBackground(t, file, b)
	if out, err := exec.Command("tar", "-xf", tarball, "-C", a).CombinedOutput(); err != nil {
		t.Fatalf("tar -x on the writeback mount: %v\n%s", err, out)
	}
	for name, data := range want {
		for _, mnt := range []string{b, a} {
			got, err := os.ReadFile(filepath.Join(mnt, name))
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s on %s: %d bytes (%v), want %d", name, mnt, len(got), err, len(data))
				continue
			}
			srcSt, err1 := os.Stat(filepath.Join(src, name))
			st, err2 := os.Stat(filepath.Join(mnt, name))
			if err1 != nil || err2 != nil {
				t.Fatalf("stat: %v %v", err1, err2)
			}
			s1, s2 := srcSt.Sys().(*syscall.Stat_t), st.Sys().(*syscall.Stat_t)
			if st.Mode() != srcSt.Mode() || !st.ModTime().Equal(srcSt.ModTime()) || s1.Uid != s2.Uid || s1.Gid != s2.Gid {
				t.Errorf("%s on %s: mode %v mtime %v owner %d:%d, want %v %v %d:%d", name, mnt,
					st.Mode(), st.ModTime(), s2.Uid, s2.Gid, srcSt.Mode(), srcSt.ModTime(), s1.Uid, s1.Gid)
			}
		}
	}
}
