package fusefs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/weftbin"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestPatchgroupPrograms: programs on a mount order their writes with
// patchgroups, from C (include/weft_pg.h) and from Python
// (python/weft_pg.py). Each writes a message into a file it keeps open
// under one group, then renames it in a second group that depends on the
// first. When the rename has returned, another client must read the whole
// message at the new name: the barrier flushed it. Without the dependency
// the message would still be in the mount's write buffers (the test of
// the library, TestPatchgroupBarrier, shows that case).
func TestPatchgroupPrograms(t *testing.T) {
	requireFUSE(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range []string{"c", "python"} {
		t.Run(lang, func(t *testing.T) {
			var prog []string
			switch lang {
			case "c":
				needTool(t, "cc")
				bin := filepath.Join(t.TempDir(), "pgmove")
				if out, err := exec.Command("cc", "-Wall", "-Werror", "-I", filepath.Join(root, "include"), "-o", bin, "testdata/pgmove.c").CombinedOutput(); err != nil {
					t.Fatalf("cc: %v\n%s", err, out)
				}
				prog = []string{bin}
			case "python":
				needTool(t, "python3")
				prog = []string{"python3", "testdata/pgmove.py"}
			}
			tc := startCluster(t)
			m := mount(t, tc.client(t), Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			mover := startPGMove(ctx, t, root, append(prog, m.Dir()))
			defer func() {
				if err := mover.finish(); err != nil {
					t.Errorf("%s: %v", lang, err)
				}
			}()
			other := tc.client(t)
			f, err := other.Open(ctx, "/msg", os.O_RDONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := io.ReadAll(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 4096 || strings.Trim(string(got), "m") != "" {
				t.Errorf("the published message reads %d bytes, want 4096 m's: the barrier did not flush it", len(got))
			}
		})
	}
}

// syncCounter counts the sync_meta calls a client makes.
type syncCounter struct{ n atomic.Int64 }

func (s *syncCounter) Observe(method uint16, _ time.Duration, _, _ int, _ error) {
	if method == weftpb.MethodSyncMeta {
		s.n.Add(1)
	}
}

// TestPatchgroupDependTool: weft pg depend "CMD1" "CMD2" on a cluster with
// async durability. CMD2's first change waits until CMD1's are durable:
// the mount asks the meta server to sync before it sends it. The same two
// commands run plainly need no sync. The commands are shells whose own
// children make the changes, so the groups pass down the process tree.
func TestPatchgroupDependTool(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t) // async durability
	syncs := &syncCounter{}
	m := mount(t, tc.client(t, func(c *client.Config) { c.Dial.Observer = syncs }), Options{})
	bin := weftbin.Path(t)
	run := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir = m.Dir()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%q: %v\n%s", args, err, out)
		}
	}
	run("/bin/sh", "-c", "echo one > plain1 && mkdir plain2")
	if n := syncs.n.Load(); n != 0 {
		t.Fatalf("plain commands made %d sync_meta calls, want 0", n)
	}
	run(bin, "pg", "depend", "echo one > a && cat a > b", "mkdir c && echo two > c/d")
	if n := syncs.n.Load(); n < 1 {
		t.Errorf("weft pg depend made no sync_meta call: CMD2's changes did not wait for CMD1's")
	}
	for _, p := range []string{"a", "b", "c/d"} {
		if _, err := os.Stat(filepath.Join(m.Dir(), p)); err != nil {
			t.Error(err)
		}
	}
	// Misuse: outside a mount, a clear error.
	out, err := exec.Command(bin, "pg", "depend", "--mount", t.TempDir(), "true", "true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), ".weft-pg") {
		t.Errorf("weft pg depend outside a mount: %v\n%s", err, out)
	}
}

// TestPatchgroupCrash: the mount process is killed (SIGKILL) after a
// program published a message by a rename that depends on the message's
// group, while the message's file is still open. After the crash the
// published message is whole: its data became durable before the rename.
// The control run, without the dependency, loses the data (the rename is
// durable, the bytes were in the dead mount's buffers), so the test can
// tell the difference.
func TestPatchgroupCrash(t *testing.T) {
	requireFUSE(t)
	needTool(t, "python3")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, depend := range []bool{true, false} {
		tc := startCluster(t)
		mnt := newMountPoint(t)
		pid := mountBackground(t, tc.emb.ClusterFile(), mnt)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		args := []string{"testdata/pgmove.py", mnt}
		if !depend {
			args = append(args, "--no-depend")
		}
		mover := startPGMove(ctx, t, root, append([]string{"python3"}, args...))
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitGone(t, pid)
		_ = mover.finish() // its last calls meet the dead mount
		cancel()
		got := readVia(t, tc.client(t), "/msg")
		switch {
		case depend && len(got) != 4096:
			t.Errorf("after the crash the published message has %d bytes, want 4096: the rename became durable before the data it depends on", len(got))
		case !depend && len(got) == 4096:
			t.Errorf("without the dependency the message survived the crash too: the test cannot tell the difference")
		}
	}
}

// readVia reads path through c.
func readVia(t *testing.T, c *client.Client, path string) []byte {
	t.Helper()
	ctx := context.Background()
	f, err := c.Open(ctx, path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// pgMove is a running pgmove program (testdata/pgmove.*).
type pgMove struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	stderr strings.Builder
}

// startPGMove runs argv with the Python module on its path and waits until
// it printed that the rename is done.
func startPGMove(ctx context.Context, t *testing.T, root string, argv []string) *pgMove {
	t.Helper()
	m := &pgMove{cmd: exec.CommandContext(ctx, argv[0], argv[1:]...)}
	m.cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "python"))
	stdin, err := m.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	m.stdin = stdin
	stdout, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	m.cmd.Stderr = &m.stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "renamed\n" {
		m.stdin.Close()
		_ = m.cmd.Wait()
		t.Fatalf("%s printed %q (%v)\n%s", argv[0], line, err, m.stderr.String())
	}
	return m
}

// finish lets the program go on to its end and waits for it.
func (m *pgMove) finish() error {
	m.stdin.Close()
	if err := m.cmd.Wait(); err != nil {
		return fmt.Errorf("%w\n%s", err, m.stderr.String())
	}
	return nil
}
