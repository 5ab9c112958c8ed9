package client_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
)

// A file open on one client that other clients rename away and back, the
// race TestLinzTwoSites found (docs/design.md, "Open files follow renames
// by other mounts"): the writer's commit at close reaches the old name
// while the file is away, is refused, and by the time the writer asks
// where the file went (locate) it is back under the name the commit
// used. The commit must go there again, not fail with ENOENT: the file
// was never gone. The rename back runs in the writer's hook between the
// refusal and locate, so the race is hit every time.

// relocateSetup is where the file lives: a directory "from" holding x, and
// the name the other client moves it to and back from.
type relocateSetup struct {
	servers int
	tune    func(*config.Cluster)
	// prepare makes the directories and returns x's path and its
	// temporary path elsewhere.
	prepare func(t *testing.T, ctx context.Context, c *client.Client, metas int) (x, away string)
}

func TestOpenFileRenamedAwayAndBack(t *testing.T) {
	setups := map[string]relocateSetup{
		"one server": {servers: 1, prepare: sameDir},
		// The directories' partitions on different servers: the rename
		// away and back crosses servers, and locate asks both.
		// (The root splits early, so that directories are made on both.)
		"two servers": {servers: 2, tune: func(cfg *config.Cluster) {
			cfg.SplitThreshold, cfg.SplitBits = 4, 1
		}, prepare: dirsOnTwoServers},
		// One directory split over two servers, x and the other name in
		// different partitions.
		"split directory": {servers: 2, tune: func(cfg *config.Cluster) {
			cfg.SplitThreshold, cfg.SplitBits = 4, 1
		}, prepare: splitDir},
	}
	for name, s := range setups {
		for _, writeBack := range []bool{false, true} {
			for _, replaced := range []bool{false, true} {
				label := fmt.Sprintf("%s/writeback=%v/replaced=%v", name, writeBack, replaced)
				t.Run(label, func(t *testing.T) { renamedAwayAndBack(t, s, writeBack, replaced) })
			}
		}
	}
}

// renamedAwayAndBack: the writer opens x and writes; the other client
// renames x away (and, with replaced, creates another file as x, so the
// commit is answered Stale rather than NotExist); when the writer's commit
// has been refused, the other client puts the file back as x. The close
// must succeed and its bytes be in the file, under x.
func renamedAwayAndBack(t *testing.T, s relocateSetup, writeBack, replaced bool) {
	tune := s.tune
	if tune == nil {
		tune = func(*config.Cluster) {}
	}
	cfg := startServers(t, s.servers, tune)
	writer, other := newClientOf(t, cfg, writeBack), newClientOf(t, cfg, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x, away := s.prepare(t, ctx, other, s.servers)

	f, err := writer.Open(ctx, x, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	ino := f.Ino()
	const data = "written while away"
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if err := other.Rename(ctx, x, away, 0); err != nil {
		t.Fatalf("rename away: %v", err)
	}
	if replaced {
		g, err := other.Create(ctx, x, 0o644)
		if err == nil {
			err = g.Close()
		}
		if err != nil {
			t.Fatalf("create another %s: %v", x, err)
		}
	}
	located := 0
	writer.SetBeforeLocate(func(got core.Ino) {
		located++
		if got != ino || located > 1 {
			return
		}
		if replaced {
			if err := other.Unlink(ctx, x); err != nil {
				t.Errorf("unlink the other %s: %v", x, err)
			}
		}
		if err := other.Rename(ctx, away, x, 0); err != nil {
			t.Errorf("rename back: %v", err)
		}
	})
	if err := f.Close(); err != nil {
		t.Errorf("close after a rename away and back: %v", err)
	}
	if located == 0 {
		t.Fatal("the commit never asked where the file went: the race was not reproduced")
	}
	a, err := other.Stat(ctx, x)
	if err != nil || a.Ino != ino || a.Size != uint64(len(data)) {
		t.Errorf("%s after the close: ino %d size %d, %v; want ino %d size %d", x, a.Ino, a.Size, err, ino, len(data))
	}
}

func sameDir(t *testing.T, ctx context.Context, c *client.Client, _ int) (string, string) {
	if err := c.Mkdir(ctx, "/b", 0o755); err != nil {
		t.Fatal(err)
	}
	return "/b/x", "/b/y"
}

// dirsOnTwoServers makes two directories whose partition 0 live on
// different meta servers.
func dirsOnTwoServers(t *testing.T, ctx context.Context, c *client.Client, metas int) (string, string) {
	first := -1
	var firstPath string
	for i := range 32 {
		p := fmt.Sprintf("/d%d", i)
		if err := c.Mkdir(ctx, p, 0o755); err != nil {
			t.Fatal(err)
		}
		a, err := c.Lstat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		srv := core.PartitionServer(a.Ino, 0, metas)
		switch {
		case first < 0:
			first, firstPath = srv, p
		case srv != first:
			return firstPath + "/x", p + "/y"
		}
	}
	t.Fatal("no two directories on different servers")
	return "", ""
}

// splitDir makes a directory that splits once over the two servers, and
// returns two names in it on different partitions (the low hash bit).
func splitDir(t *testing.T, ctx context.Context, c *client.Client, metas int) (string, string) {
	if err := c.Mkdir(ctx, "/s", 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 32 {
		g, err := c.Create(ctx, fmt.Sprintf("/s/pad%d", i), 0o644)
		if err == nil {
			err = g.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var splits uint64
	for id := range metas {
		st, err := c.MetaStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		splits += st.Splits
	}
	if splits == 0 {
		t.Fatal("the directory did not split")
	}
	names := [2]string{}
	for i := 0; names[0] == "" || names[1] == ""; i++ {
		n := fmt.Sprintf("n%d", i)
		if b := core.NameHash(n) & 1; names[b] == "" {
			names[b] = n
		}
	}
	return "/s/" + names[0], "/s/" + names[1]
}
