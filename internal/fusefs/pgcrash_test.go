package fusefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/weftbin"
)

// TestPatchgroupCrashChecker is the crash checker of the patchgroups issue:
// a mail move with patchgroups (testdata/pgimap.py) on a mount of a
// cluster of real processes with two meta servers and async durability;
// at a random moment the mount process and one meta server are killed
// with SIGKILL; the meta server restarts. Then:
//   - every message is in INBOX or in Saved (or both), never in neither;
//   - no message in Saved is empty or partial;
//
// which together say that no EXPUNGE became durable before the COPY it
// depends on. WEFT_PGCRASH_RUNS sets the number of runs (make pgcrash runs
// many; CI a few); WEFT_PGCRASH_CONTROL=1 runs without patchgroups too and
// logs what that loses. A killed process loses only what it held itself
// (the kernel keeps what it wrote), so the control loses nothing here: the
// power cut, which loses what was not synced, is client's
// TestPatchgroupPowerCut, whose control does lose messages.
func TestPatchgroupCrashChecker(t *testing.T) {
	requireFUSE(t)
	needTool(t, "python3")
	runs := 2
	if v, err := strconv.Atoi(os.Getenv("WEFT_PGCRASH_RUNS")); err == nil && v > 0 {
		runs = v
	}
	variants := []bool{true}
	if os.Getenv("WEFT_PGCRASH_CONTROL") != "" {
		variants = append(variants, false)
	}
	for _, withPG := range variants {
		bad := 0
		for run := range runs {
			v := pgCrashRun(t, withPG, run)
			if v != "" {
				bad++
				if withPG {
					t.Errorf("run %d: %s", run, v)
				} else {
					t.Logf("control run %d (no patchgroups): %s", run, v)
				}
			}
		}
		t.Logf("patchgroups %v: %d of %d runs broke the invariants", withPG, bad, runs)
	}
}

const pgCrashMessages, pgCrashBatch = 300, 10

// pgCrashRun runs one move with a crash and returns the violations found.
func pgCrashRun(t *testing.T, withPG bool, run int) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	procs, err := cluster.StartProcs(ctx, cluster.ProcsOptions{
		Binary: weftbin.Path(t), Dir: t.TempDir(), Meta: 2, Store: 1, Durability: "async", SplitThreshold: 100000,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer procs.KillAll()
	cc := cluster.ClientConfig(procs.Config(), core.Root, nil)
	cc.RetryFor = 30 * time.Second
	c, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, d := range []string{"/mail", "/mail/INBOX", "/mail/INBOX/cur", "/mail/Saved", "/mail/Saved/tmp", "/mail/Saved/cur"} {
		if err := c.Mkdir(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range pgCrashMessages {
		f, err := c.Create(ctx, "/mail/INBOX/cur/"+pgMsgName(i), 0o644)
		if err == nil {
			_, err = f.Write(pgMsgBody(i))
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SyncNamespace(ctx); err != nil {
		t.Fatal(err)
	}
	mnt := newMountPoint(t)
	pid := mountBackground(t, procs.ClusterFile(), mnt)
	args := []string{"testdata/pgimap.py", mnt, strconv.Itoa(pgCrashMessages), strconv.Itoa(pgCrashBatch)}
	if !withPG {
		args = append(args, "--no-pg")
	}
	mover := exec.CommandContext(ctx, "python3", args...)
	mover.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "python"))
	var out strings.Builder
	mover.Stdout, mover.Stderr = &out, &out
	if err := mover.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond) // the crash comes at a random point: the point of the test
	victim := rand.IntN(2)
	if err := procs.Kill(cluster.RoleMeta, victim); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	waitGone(t, pid)
	_ = mover.Wait()
	if Mounted(mnt) {
		_ = Unmount(mnt)
	}
	if err := procs.Restart(ctx, cluster.RoleMeta, victim); err != nil {
		t.Fatalf("restart meta %d: %v", victim, err)
	}
	moved := strings.Count(out.String(), "\n")
	t.Logf("run %d: killed meta %d and the mount after %d batch lines", run, victim, moved)
	var violations []string
	for i := range pgCrashMessages {
		inInbox, err := pgExists(ctx, c, "/mail/INBOX/cur/"+pgMsgName(i))
		if err != nil {
			t.Fatal(err)
		}
		saved, err := pgRead(ctx, c, "/mail/Saved/cur/"+pgMsgName(i))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case saved != nil && !bytes.Equal(saved, pgMsgBody(i)):
			violations = append(violations, fmt.Sprintf("message %d is in Saved with %d bytes that are not its own", i, len(saved)))
		case saved == nil && !inInbox:
			violations = append(violations, fmt.Sprintf("message %d is in neither folder", i))
		}
	}
	if len(violations) > 5 {
		violations = append(violations[:5], fmt.Sprintf("and %d more", len(violations)-5))
	}
	return strings.Join(violations, "; ")
}

func pgMsgName(i int) string { return fmt.Sprintf("%d.M%dP1.weft:2,S", 1700000000+i, i) }

func pgMsgBody(i int) []byte {
	line := []byte(fmt.Sprintf("message %d ", i))
	return bytes.Repeat(line, 2048/len(line)+1)[:2048]
}

func pgExists(ctx context.Context, c *client.Client, path string) (bool, error) {
	_, err := c.Stat(ctx, path)
	if errs.Is(err, errs.NotExist) {
		return false, nil
	}
	return err == nil, err
}

// pgRead returns the file's content, or nil if it does not exist.
func pgRead(ctx context.Context, c *client.Client, path string) ([]byte, error) {
	f, err := c.Open(ctx, path, os.O_RDONLY, 0)
	if errs.Is(err, errs.NotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}
