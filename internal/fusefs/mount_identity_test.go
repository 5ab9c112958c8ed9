package fusefs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
)

// TestMountsWithIdentities: two mounts of one secure cluster, each with the
// identity of a different user (weft mount --identity). The kernel checks
// the mode bits against the calling process (default_permissions); weft
// then limits the process's credentials to the mount's identity, so a
// process that passes the kernel's check under the wrong identity (root,
// or uid 1000 on user 1001's mount) is nobody to the meta server. Before
// identities bound credentials, both reads below succeeded.
func TestMountsWithIdentities(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	// The mount points must be reachable by the unprivileged users.
	for d := dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	emb, err := cluster.StartEmbedded(context.Background(), cluster.EmbeddedOptions{Dir: filepath.Join(dir, "cluster"), Backend: "disk"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emb.Close() })
	cfg := emb.Config()
	ca, err := auth.LoadCA(cfg.CA)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(uid uint32) string {
		b, err := ca.Issue(auth.Identity{Role: auth.RoleClient, UIDs: auth.Range{Min: uid, Max: uid}, GIDs: auth.Range{Min: uid, Max: uid}}, nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "id", strings.Repeat("u", int(uid-999)))
		if err := b.Write(out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	admin, err := client.New(cluster.ClientConfig(cfg, core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.Mkdir(context.Background(), "/shared", 0o777); err != nil {
		t.Fatal(err)
	}

	mount := func(name, identity string) string {
		mnt := filepath.Join(dir, name)
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := weft(t, "mount", "--cluster", emb.ClusterFile(), "--identity", identity, "-d", "--log-file", filepath.Join(dir, name+".log"), mnt)
		if err != nil {
			t.Fatalf("weft mount: %v\n%s", err, out)
		}
		m := pidRE.FindStringSubmatch(out)
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
		return mnt
	}
	mntA := mount("alice", issue(1000))
	mntB := mount("bob", issue(1001))

	// as runs a shell command as uid (and gid) id.
	as := func(id uint32, script string) (string, error) {
		cmd := exec.Command("sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: id, Gid: id}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := as(1000, "umask 077 && echo secret > "+mntA+"/shared/a && cat "+mntA+"/shared/a"); err != nil || out != "secret\n" {
		t.Fatalf("alice writes and reads her file on her mount: %q, %v", out, err)
	}
	// Alice's uid on bob's mount: the kernel lets her in (she owns the
	// file); bob's identity does not.
	if out, err := as(1000, "cat "+mntB+"/shared/a"); err == nil {
		t.Errorf("uid 1000 read 1000's 0600 file through user 1001's mount: %q", out)
	}
	// Root on either user's mount is nobody to weft.
	for _, mnt := range []string{mntA, mntB} {
		if _, err := os.ReadFile(mnt + "/shared/a"); !os.IsPermission(err) {
			t.Errorf("root read a 0600 file through %s, a client identity's mount: %v; want permission denied", mnt, err)
		}
	}
}
