package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/fusefs"
)

// findCluster starts four meta servers that split directories past a few
// entries and one store, in this process, and returns a root client.
func findCluster(t *testing.T) *client.Client {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.SplitThreshold = 12
	var lns []net.Listener
	for i := range 5 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		if i < 4 {
			cfg.Meta = append(cfg.Meta, config.DefaultMetaServer(ln.Addr().String(), filepath.Join(dir, fmt.Sprintf("meta%d", i))))
		}
	}
	cfg.Store = []config.StoreServer{config.DefaultStoreServer(lns[4].Addr().String(), filepath.Join(dir, "store0"))}
	ctx := context.Background()
	for i := range 4 {
		m, err := cluster.StartMeta(ctx, cfg, i, cluster.Options{Listener: lns[i]})
		if err != nil {
			t.Fatalf("start meta %d: %v", i, err)
		}
		t.Cleanup(func() { m.Close() })
	}
	s, err := cluster.StartStore(ctx, cfg, 0, cluster.Options{Listener: lns[4]})
	if err != nil {
		t.Fatalf("start store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	c, err := client.New(cluster.ClientConfig(cfg, core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// mountFind mounts c for other users too and unmounts it at cleanup.
func mountFind(t *testing.T, c *client.Client) string {
	t.Helper()
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(base, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := fusefs.New(dir, fusefs.Options{Client: c, AllowOther: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		done := make(chan error, 1)
		go func() { done <- m.Unmount(true) }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("unmount: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("unmount %s: not done after 20 s", dir)
			m.Abort()
		}
	})
	return dir
}

// buildTree makes, through the mount, a tree with split directories, every
// file type, hard links, extended attributes, and varied sizes, modes,
// owners and times.
func buildTree(t *testing.T, mnt string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p := func(s string) string { return filepath.Join(mnt, s) }
	now := time.Now()
	must(os.MkdirAll(p("t/big"), 0o755))
	must(os.MkdirAll(p("t/a/b/c"), 0o755))
	must(os.MkdirAll(p("t/private/inner"), 0o700))
	must(os.MkdirAll(p("t/Mixed.Case/sub"), 0o755))
	for i := range 50 {
		name := p(fmt.Sprintf("t/big/file%02d.txt", i))
		if i%5 == 0 {
			name = p(fmt.Sprintf("t/big/Data%02d.BIN", i))
		}
		must(os.WriteFile(name, make([]byte, i*900), 0o644))
		switch i % 7 {
		case 0:
			must(os.Chmod(name, 0o4755))
		case 1:
			must(os.Chmod(name, 0o600))
		case 2:
			must(os.Chown(name, 1000, 100))
		case 3:
			must(os.Chmod(name, 0o2711))
		}
		if i%4 == 0 {
			when := now.Add(-time.Duration(i) * 5 * time.Hour)
			must(os.Chtimes(name, when, when))
		}
		if i%6 == 0 {
			must(unix.Setxattr(name, "user.mark", []byte("1"), 0))
		}
	}
	for i, n := range []int{1, 2, 3, 4, 6, 7} {
		must(os.Link(p(fmt.Sprintf("t/big/file%02d.txt", n)), p(fmt.Sprintf("t/a/b/hard%d", i))))
	}
	must(unix.Setxattr(p("t/a/b/hard1"), "user.mark", []byte("2"), 0))
	must(os.Symlink("../big", p("t/a/link")))
	must(os.Symlink("nowhere", p("t/Mixed.Case/dangling")))
	must(unix.Mkfifo(p("t/a/fifo"), 0o644))
	for _, f := range []string{"t/a/b/c/deep.txt", "t/private/inner/secret.txt", "t/Mixed.Case/README"} {
		must(os.WriteFile(p(f), []byte("x"), 0o640))
	}
	must(os.Chown(p("t/private"), 1000, 1000))
	must(os.Chmod(p("t/a/b/c"), 0o750))
	old := now.Add(-50 * time.Hour)
	must(os.Chtimes(p("t/a/b/c"), old, old))
	veryOld := time.Date(2020, 3, 4, 5, 6, 7, 0, time.UTC)
	must(os.Chtimes(p("t/Mixed.Case/README"), veryOld, veryOld))
}

// findCompareCases: every test weft find supports, in the forms GNU find
// takes, with -print0 and -ls.
var findCompareCases = [][]string{
	{},
	{"-name", "*.txt"},
	{"-name", "file1?.txt"},
	{"-name", "[dD]ata[0-2]*"},
	{"-name", "hard3"},
	{"-iname", "data*.bin"},
	{"-iname", "MIXED.case"},
	{"-path", "*/a/*"},
	{"-path", "*/b/*", "-type", "f"},
	{"-type", "d"},
	{"-type", "l"},
	{"-type", "p"},
	{"-type", "f,l"},
	{"-size", "-1k"},
	{"-size", "+20k"},
	{"-size", "10k"},
	{"-size", "+3000c", "-size", "-9000c"},
	{"-size", "7"},
	{"-size", "0"},
	{"-size", "-1M"},
	{"-mtime", "0"},
	{"-mtime", "+1"},
	{"-mtime", "-2"},
	{"-mtime", "1"},
	{"-mmin", "-30"},
	{"-mmin", "+600"},
	{"-newer", "t/big/file12.txt"},
	{"-user", "1000"},
	{"-user", "root", "-type", "d"},
	{"-group", "100"},
	{"-uid", "0", "-type", "f"},
	{"-perm", "644"},
	{"-perm", "-4000"},
	{"-perm", "/0077", "-type", "f"},
	{"-perm", "-u=rw,g=r"},
	{"-perm", "/u+s,g+s"},
	{"-perm", "/000"},
	{"-perm", "g=x,u=rwx"},
	{"-type", "f", "-print0"},
	{"-ls"},
}

// TestFindMatchesGNUFind: weft find on four meta servers with split
// directories prints what GNU find prints over a FUSE mount of the same
// tree (sorted), for every supported test, as root and as a user who may
// not list some directories; -xattr, which GNU find lacks, is compared
// with a walk of the mount that lists extended attributes.
func TestFindMatchesGNUFind(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("needs /dev/fuse: %v", err)
	}
	if _, err := exec.LookPath("find"); err != nil {
		t.Skip("no GNU find")
	}
	c := findCluster(t)
	mnt := mountFind(t, c)
	buildTree(t, mnt)
	ctx := context.Background()
	for _, uid := range []uint32{0, 1001} {
		uctx := client.WithCreds(ctx, core.Creds{UID: uid, GID: uid})
		for _, args := range findCompareCases {
			for _, root := range []string{"/t", "/t/a/"} {
				got := weftFind(t, uctx, c, append([]string{root}, args...))
				want := gnuFind(t, mnt, uid, root, args)
				if slices.Contains(args, "-ls") {
					// GNU find widens a column when a value outgrows it,
					// from then on: spacing depends on the order.
					got, want = fields(got), fields(want)
				}
				if !slices.Equal(got, want) {
					t.Errorf("uid %d, find %s %q:\n weft %q\n  gnu %q", uid, root, args, got, want)
				}
			}
		}
		got := weftFind(t, uctx, c, []string{"/t", "-xattr", "user.mark"})
		want := xattrWalk(t, mnt, "user.mark", uid)
		if !slices.Equal(got, want) {
			t.Errorf("uid %d, -xattr:\n weft %q\n walk %q", uid, got, want)
		}
	}
}

// weftFind runs weft find's command code and returns its output, sorted.
func weftFind(t *testing.T, ctx context.Context, c *client.Client, args []string) []string {
	t.Helper()
	var out bytes.Buffer
	if err := runFind(ctx, &out, c, args); err != nil {
		t.Fatalf("weft find %q: %v", args, err)
	}
	return sortedRecords(out.String(), slices.Contains(args, "-print0"))
}

// gnuFind runs GNU find over the mount as uid and returns its output with
// the mount's path taken out, sorted.
func gnuFind(t *testing.T, mnt string, uid uint32, root string, args []string) []string {
	t.Helper()
	var fargs []string
	for i, a := range args {
		if i > 0 && args[i-1] == "-newer" {
			a = filepath.Join(mnt, a)
		}
		fargs = append(fargs, a)
	}
	cmd := exec.Command("find", append([]string{mnt + root}, fargs...)...)
	cmd.Env = []string{"LC_ALL=C", "TZ=" + os.Getenv("TZ"), "PATH=" + os.Getenv("PATH")}
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil && (uid == 0 || !strings.Contains(stderr.String(), "Permission denied")) {
		t.Fatalf("find %q: %v: %s", cmd.Args, err, stderr.String())
	}
	return sortedRecords(strings.ReplaceAll(out.String(), mnt, ""), slices.Contains(args, "-print0"))
}

func sortedRecords(s string, nul bool) []string {
	sep := "\n"
	if nul {
		sep = "\x00"
	}
	recs := strings.Split(strings.TrimSuffix(s, sep), sep)
	if len(recs) == 1 && recs[0] == "" {
		recs = nil
	}
	slices.Sort(recs)
	return recs
}

// xattrWalk lists the files under mnt/t that have extended attribute name,
// as uid would find them.
func xattrWalk(t *testing.T, mnt, name string, uid uint32) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(mnt, "t"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if d.IsDir() && uid != 0 && !(st.Uid == uid && st.Mode&0o500 == 0o500 || st.Uid != uid && st.Mode&0o005 == 0o005) {
			if hasXattr(p, name) {
				out = append(out, strings.TrimPrefix(p, mnt))
			}
			return filepath.SkipDir
		}
		if hasXattr(p, name) {
			out = append(out, strings.TrimPrefix(p, mnt))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func hasXattr(p, name string) bool {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		return false
	}
	return slices.Contains(strings.Split(string(buf[:n]), "\x00"), name)
}

// fields collapses the spaces between the fields of each line.
func fields(lines []string) []string {
	var out []string
	for _, l := range lines {
		out = append(out, strings.Join(strings.Fields(l), " "))
	}
	slices.Sort(out)
	return out
}

// TestFindJSON: --json writes one object per match with its attributes,
// and bad expressions are refused with a clear error before any search.
func TestFindJSON(t *testing.T) {
	c := findCluster(t)
	ctx := context.Background()
	if err := c.MkdirAll(ctx, "/j/sub", 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := c.Create(ctx, "/j/sub/x.txt", 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runFind(ctx, &out, c, []string{"/j", "-name", "x.*", "--json"}); err != nil {
		t.Fatal(err)
	}
	var got findJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%q: %v", out.String(), err)
	}
	if got.Path != "/j/sub/x.txt" || got.Type != "-" || got.Mode != "0640" || got.Size != 5 || got.Nlink != 1 {
		t.Errorf("json: %+v", got)
	}
	for _, args := range [][]string{
		{"/j", "-name"}, {"/j", "-size", "x"}, {"/j", "-type", "q"}, {"/j", "-perm", "9"},
		{"/j", "-o", "-name", "a"}, {"/j", "-mtime", "+-1"}, {"/j", "-user", "no-such-user-here"}, {"/j", "-bogus", "1"},
	} {
		err := runFind(ctx, io.Discard, c, args)
		if errs.KindOf(err) != errs.Invalid {
			t.Errorf("find %q: %v, want an Invalid error", args, err)
		}
	}
	out.Reset()
	if err := runFind(ctx, &out, c, []string{"/", "-name", "x.txt"}); err != nil || out.String() != "/j/sub/x.txt\n" {
		t.Errorf("find / -name x.txt: %q, %v", out.String(), err)
	}
}
