package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
)

// TestStatusCountsAfterCrossServerOps: creates on one meta server, renames
// and removes through others (small partitions split the directories over
// three servers), then weft status: every server's INODES and DIRS are the
// inodes it allocated that are still in use, never negative, and they add
// up to what the namespace holds. USED of an empty store is its own bytes,
// not its disk's.
func TestStatusCountsAfterCrossServerOps(t *testing.T) {
	dir := t.TempDir()
	startCluster(t, dir, "--meta", "3", "--split-threshold", "8")
	file := filepath.Join(dir, "weft.toml")
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	st, err := statusJSON(t, file)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Store {
		if s.Used > 16<<20 {
			t.Errorf("store %d of an empty cluster uses %d bytes: that is its disk's use, not the store's", s.ID, s.Used)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(cluster.ClientConfig(cfg, core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Mkdir(ctx, "/a", 0o755))
	must(c.Mkdir(ctx, "/b", 0o755))
	const files, dirs = 120, 40
	for i := range files {
		f, err := c.Create(ctx, fmt.Sprintf("/a/f%d", i), 0o644)
		must(err)
		must(f.Close())
	}
	for i := range dirs {
		must(c.Mkdir(ctx, fmt.Sprintf("/a/d%d", i), 0o755))
	}
	// Moved to names that land on other servers, then half removed there.
	for i := range files {
		must(c.Rename(ctx, fmt.Sprintf("/a/f%d", i), fmt.Sprintf("/b/g%d", i), 0))
	}
	for i := range dirs {
		must(c.Rename(ctx, fmt.Sprintf("/a/d%d", i), fmt.Sprintf("/b/e%d", i), 0))
	}
	for i := 0; i < files; i += 2 {
		must(c.Unlink(ctx, fmt.Sprintf("/b/g%d", i)))
	}
	for i := 0; i < dirs; i += 2 {
		must(c.Rmdir(ctx, fmt.Sprintf("/b/e%d", i)))
	}
	// A hard link makes a standalone record; removing both names frees it.
	must(c.Link(ctx, "/b/g1", "/a/h1"))
	must(c.Unlink(ctx, "/b/g1"))
	must(c.Unlink(ctx, "/a/h1"))

	// Each inode is counted by the server that allocated it (its number
	// says which).
	wantBy := make([]struct{ inodes, dirs int64 }, len(cfg.Meta))
	count := func(p string) {
		t.Helper()
		a, err := c.Lstat(ctx, p)
		must(err)
		w := &wantBy[core.Ino(a.Ino).Server()]
		w.inodes++
		if a.IsDir() {
			w.dirs++
		}
	}
	for _, p := range []string{"/", "/a", "/b"} {
		count(p)
	}
	for i := 1; i < files; i += 2 {
		if i != 1 {
			count(fmt.Sprintf("/b/g%d", i))
		}
	}
	for i := 1; i < dirs; i += 2 {
		count(fmt.Sprintf("/b/e%d", i))
	}

	check := func(when string) {
		t.Helper()
		st, err := statusJSON(t, file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range st.Meta {
			if w := wantBy[m.ID]; m.Inodes != w.inodes || m.Dirs != w.dirs {
				t.Errorf("%s: meta %d counts %d inodes and %d directories, it allocated %d and %d that are in use",
					when, m.ID, m.Inodes, m.Dirs, w.inodes, w.dirs)
			}
		}
	}
	check("running")
	var total uint64
	for _, w := range wantBy {
		total += uint64(w.inodes)
	}
	if fs, err := c.StatFS(ctx); err != nil || fs.Files != total {
		t.Errorf("statfs counts %d files (%v), want %d", fs.Files, err, total)
	}
	// The counts are persisted: a restart reads them back.
	if _, _, err := run(ctx, "cluster", "stop", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	startCluster(t, dir)
	check("after a restart")
}
