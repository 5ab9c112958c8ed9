package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Real programs on a mount: each runs as a child process against this
// process's mount. They start through bash -c with cd in the script, so
// that no step between fork and exec touches the mount (package doc of
// go-fuse: such steps can deadlock with the serving process).

func TestProgramTar(t *testing.T) {
	needTool(t, "tar")
	m, _ := newMountedFS(t)
	src := makeTree(t, t.TempDir(), 1)
	tarball := filepath.Join(t.TempDir(), "src.tar")
	sh(t, "", "tar -C %q -cf %q .", src, tarball)
	sh(t, m.Dir(), "mkdir x && tar -C x -xpf %q", tarball)
	compareTrees(t, src, m.Dir()+"/x")
	// And back out: a tarball created on the mount extracts to the same tree.
	sh(t, m.Dir(), "tar -C x -cf back.tar .")
	out := t.TempDir()
	sh(t, "", "tar -C %q -xpf %q", out, m.Dir()+"/back.tar")
	compareTrees(t, src, out)
}

func TestProgramRsync(t *testing.T) {
	needTool(t, "rsync")
	m, _ := newMountedFS(t)
	src := makeTree(t, t.TempDir(), 2)
	sh(t, "", "rsync -a %q/ %q/r/", src, m.Dir())
	compareTrees(t, src, m.Dir()+"/r")
	// A second run changes one file: rsync replaces it through a temporary
	// file and a rename.
	if err := os.WriteFile(src+"/d0/f1", []byte("changed content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, "", "rsync -a %q/ %q/r/", src, m.Dir())
	compareTrees(t, src, m.Dir()+"/r")
}

func TestProgramGit(t *testing.T) {
	needTool(t, "git")
	m, _ := newMountedFS(t)
	src := makeTree(t, t.TempDir(), 3)
	env := "export HOME=%q GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.com GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.com; "
	home := t.TempDir()
	sh(t, m.Dir(), env+"cp -a %q repo && cd repo && git init -q && git add -A && git commit -qm first", home, src)
	sh(t, m.Dir(), env+"cd repo && echo more >> d0/f1 && git commit -qam second && git gc -q && git fsck --strict", home)
	sh(t, m.Dir(), env+"git clone -q repo clone && cd clone && test \"$(git log --oneline | wc -l)\" = 2 && git fsck --strict", home)
	compareFiles(t, m.Dir()+"/repo/d0/f1", m.Dir()+"/clone/d0/f1")
}

func TestProgramSQLite(t *testing.T) {
	needTool(t, "python3")
	if err := exec.Command("python3", "-c", "import sqlite3").Run(); err != nil {
		t.Skip("python3 has no sqlite3 module")
	}
	m, _ := newMountedFS(t)
	script := `
import sqlite3, sys
db = sqlite3.connect("test.db")
db.execute("create table t (k integer primary key, v text)")
for batch in range(20):
    with db:
        db.executemany("insert into t (v) values (?)", [("row %d %s" % (batch*100+i, "x"*(i%50)),) for i in range(100)])
with db:
    db.execute("delete from t where k % 3 = 0")
    db.execute("update t set v = v || '!' where k % 5 = 0")
db.execute("vacuum")
n = db.execute("select count(*) from t").fetchone()[0]
ok = db.execute("pragma integrity_check").fetchone()[0]
db.close()
db = sqlite3.connect("test.db")
n2 = db.execute("select count(*) from t where v like '%!'").fetchone()[0]
print(n, ok, n2)
if (n, ok) != (1334, "ok") or n2 != 267:
    sys.exit("unexpected result: %r %r %r" % (n, ok, n2))
`
	if err := os.WriteFile(filepath.Join(t.TempDir(), "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	scriptFile := filepath.Join(t.TempDir(), "db.py")
	if err := os.WriteFile(scriptFile, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, m.Dir(), "python3 %q", scriptFile)
}

func TestProgramGCC(t *testing.T) {
	needTool(t, "gcc")
	m, _ := newMountedFS(t)
	dir := m.Dir() + "/prog"
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"sum.h":   "int sum(int n);\nint twice(int n);\n",
		"sum.c":   "#include \"sum.h\"\nint sum(int n) { int s = 0; for (int i = 1; i <= n; i++) s += i; return s; }\n",
		"twice.c": "#include \"sum.h\"\nint twice(int n) { return 2 * n; }\n",
		"main.c":  "#include <stdio.h>\n#include \"sum.h\"\nint main(void) { printf(\"%d\\n\", twice(sum(100))); return 0; }\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sh(t, dir, "gcc -c -O2 sum.c && gcc -c twice.c && gcc -c main.c && gcc -o prog main.o sum.o twice.o")
	out := sh(t, dir, "./prog")
	if strings.TrimSpace(out) != "10100" {
		t.Errorf("compiled program printed %q, want 10100", out)
	}
}

func needTool(t *testing.T, name string) {
	t.Helper()
	requireFUSE(t)
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not installed (make test installs it as root on Debian)", name)
	}
}

// sh runs a bash script in dir (cd'ing inside the script) and returns its
// output; a failure or a minute's hang fails t.
func sh(t *testing.T, dir, format string, args ...any) string {
	t.Helper()
	script := fmt.Sprintf(format, args...)
	if dir != "" {
		script = fmt.Sprintf("cd %q && %s", dir, script)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-ec", script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out.String())
	}
	return out.String()
}

// makeTree writes a tree of directories, files of assorted sizes (empty,
// inline, several chunks), symlinks and a hard link under dir/src.
func makeTree(t *testing.T, dir string, seed uint64) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	root := filepath.Join(dir, "src")
	for d := range 4 {
		sub := filepath.Join(root, fmt.Sprintf("d%d", d), "inner")
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := range 12 {
			size := []int{0, 10, 3000, 5000, 70000, 200000}[rng.IntN(6)]
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(rng.IntN(256))
			}
			p := filepath.Join(root, fmt.Sprintf("d%d", d), fmt.Sprintf("f%d", f))
			if f%3 == 0 {
				p = filepath.Join(sub, fmt.Sprintf("f%d", f))
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustDo(t, os.Chmod(filepath.Join(root, "d1", "f1"), 0o600))
	mustDo(t, os.Chmod(filepath.Join(root, "d2", "f2"), 0o755))
	mustDo(t, os.Symlink("../d1/f1", filepath.Join(root, "d0", "link")))
	mustDo(t, os.Symlink("missing", filepath.Join(root, "d0", "dangling")))
	mustDo(t, os.Link(filepath.Join(root, "d3", "f1"), filepath.Join(root, "d3", "hard")))
	return root
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// compareTrees fails t unless b holds what a holds: the same names, types,
// permission bits, symlink targets and bytes.
func compareTrees(t *testing.T, a, b string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		q := filepath.Join(b, rel)
		sa, err := os.Lstat(p)
		if err != nil {
			return err
		}
		sb, err := os.Lstat(q)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		n++
		if sa.Mode() != sb.Mode() {
			t.Errorf("%s: mode %v, want %v", rel, sb.Mode(), sa.Mode())
		}
		switch {
		case sa.Mode()&fs.ModeSymlink != 0:
			ta, _ := os.Readlink(p)
			tb, _ := os.Readlink(q)
			if ta != tb {
				t.Errorf("%s: symlink to %q, want %q", rel, tb, ta)
			}
		case sa.Mode().IsRegular():
			compareFiles(t, p, q)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	m := 0
	filepath.WalkDir(b, func(string, fs.DirEntry, error) error { m++; return nil })
	if m != n {
		t.Errorf("%s has %d entries, %s has %d", b, m, a, n)
	}
}

func compareFiles(t *testing.T, a, b string) {
	t.Helper()
	da, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(b)
	if err != nil {
		t.Errorf("%v", err)
		return
	}
	if !bytes.Equal(da, db) {
		t.Errorf("%s: %d bytes differ from %s (%d bytes), first at %d", b, len(db), a, len(da), firstDiff(da, db))
	}
}
