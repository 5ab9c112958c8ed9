package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// fileCluster starts a one-meta, one-store cluster of real processes and
// returns its cluster file.
func fileCluster(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	startCluster(t, dir, "--backend", "mem", "--mem-limit", "64MiB")
	return filepath.Join(dir, "weft.toml")
}

// TestFileCommands checks the file tools as a new user meets them: put of a
// directory is refused and leaves nothing behind, ls sorts by name and
// names owners, and the exit codes are those of docs/cli.md.
func TestFileCommands(t *testing.T) {
	file := fileCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	weft := func(args ...string) (string, error) {
		out, stderr, err := run(ctx, append([]string{"--cluster", file}, args...)...)
		if err != nil && testing.Verbose() {
			t.Logf("weft %v: %v\n%s", args, err, stderr)
		}
		return out, err
	}
	local := t.TempDir()
	for _, n := range []string{"c", "a", "B", "b"} {
		if err := os.WriteFile(filepath.Join(local, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := weft("put", filepath.Join(local, n), "/"+n); err != nil {
			t.Fatalf("put %s: %v", n, err)
		}
	}

	t.Run("put directory", func(t *testing.T) {
		_, err := weft("put", local, "/dir")
		if !errs.Is(err, errs.IsDir) {
			t.Errorf("put of a directory = %v, want an is-a-directory error", err)
		}
		if _, err := weft("stat", "/dir"); ExitCode(err) != ExitNotExist {
			t.Errorf("put of a directory left /dir behind (stat: %v)", err)
		}
	})

	t.Run("ls sorted", func(t *testing.T) {
		out, err := weft("ls", "/")
		if err != nil {
			t.Fatal(err)
		}
		if want := "B\na\nb\nc\n"; out != want {
			t.Errorf("ls / = %q, want %q", out, want)
		}
		out, err = weft("ls", "-l", "/")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || !strings.HasSuffix(lines[0], " B") || !strings.HasSuffix(lines[3], " c") {
			t.Fatalf("ls -l / is not sorted by name:\n%s", out)
		}
		owner := strconv.Itoa(os.Getuid())
		if u, err := user.Current(); err == nil {
			owner = u.Username
		}
		if f := strings.Fields(lines[0]); len(f) < 4 || f[2] != owner {
			t.Errorf("ls -l shows owner %q, want %q:\n%s", f, owner, out)
		}
	})

	t.Run("exit codes", func(t *testing.T) {
		for _, tt := range []struct {
			args []string
			code int
		}{
			{[]string{"put", filepath.Join(local, "none"), "/x"}, ExitNotExist},
			{[]string{"get", "/none", filepath.Join(local, "x")}, ExitNotExist},
			{[]string{"get", "/a", filepath.Join(local, "no-dir", "x")}, ExitNotExist},
			{[]string{"ls", "/none"}, ExitNotExist},
			{[]string{"rm", "/none"}, ExitNotExist},
			{[]string{"mkdir", "/a"}, ExitExist},
			{[]string{"mv", "/none", "/x"}, ExitNotExist},
		} {
			if _, err := weft(tt.args...); ExitCode(err) != tt.code {
				t.Errorf("weft %s: exit code %d (%v), want %d", strings.Join(tt.args, " "), ExitCode(err), err, tt.code)
			}
		}
	})
}

// TestRefusedConnectionFailsFast: a cluster file whose meta server is not
// running gets an answer at once (it took the client's 10 s retry time),
// saying so, with exit code 4.
func TestRefusedConnectionFailsFast(t *testing.T) {
	var addrs []string
	var lns []net.Listener
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		lns = append(lns, ln)
	}
	file := filepath.Join(t.TempDir(), "weft.toml")
	toml := fmt.Sprintf("[[meta]]\naddr = %q\n[[store]]\naddr = %q\n", addrs[0], addrs[1])
	if err := os.WriteFile(file, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	// Closed only now, so that the two ports differ: nothing listens
	// there, and connections are refused.
	for _, ln := range lns {
		ln.Close()
	}
	for _, args := range [][]string{{"ls", "/"}, {"get", "/a", "-"}, {"mount", t.TempDir()}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		_, _, err := run(ctx, append([]string{"--cluster", file}, args...)...)
		cancel()
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("weft %v took %v to report a refused connection", args, took)
		}
		if ExitCode(err) != ExitUnavailable || err == nil || !strings.Contains(err.Error(), "is not running") {
			t.Errorf("weft %v: exit code %d, %v; want %d saying the server is not running", args, ExitCode(err), err, ExitUnavailable)
		}
	}
}
