package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// TestGigaConcurrentCreators has several client instances, each with its
// own (stale) partition maps, create files in one directory of a four-server
// cluster while it splits; afterwards every name exists exactly once, a
// listing returns each once, every server holds a partition, and removing
// everything leaves the directory removable.
func TestGigaConcurrentCreators(t *testing.T) {
	splitBitsCases(t, func(t *testing.T, bits int) { concurrentCreators(t, bits) })
}

// splitBitsCases runs f with binary splits (one level at a time, the most
// splits and redirects) and with the default multi-way splits.
func splitBitsCases(t *testing.T, f func(t *testing.T, bits int)) {
	t.Run("binary", func(t *testing.T) { f(t, 1) })
	t.Run("default", func(t *testing.T) { f(t, 0) })
}

func concurrentCreators(t *testing.T, bits int) {
	// Each client has several requests in flight, so that some of them
	// race with the redirects that teach the client a split.
	const clients, streams, perClient = 4, 4, 300
	c0, cfg := newMultiClient(t, 4, 40, bits, 64<<10)
	ctx := context.Background()
	if err := c0.Mkdir(ctx, "/big", 0o755); err != nil {
		t.Fatal(err)
	}
	cs := []*client.Client{c0}
	for range clients - 1 {
		c, err := client.New(cluster.ClientConfig(cfg, core.Root, nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	var wg sync.WaitGroup
	errc := make(chan error, clients*streams)
	for w := range clients * streams {
		i, c := w%clients, cs[w%clients]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := w / clients; j < perClient; j += streams {
				name := fmt.Sprintf("/big/c%d-f%d", i, j)
				f, err := c.Create(ctx, name, 0o644)
				if err == nil {
					err = f.Close()
				}
				if err != nil {
					errc <- fmt.Errorf("create %s: %w", name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	// Every client sees every name, whatever its map knew.
	for i, c := range cs {
		for j := range perClient {
			for k := range clients {
				if j%50 != k*7%50 {
					continue // a sample is enough per client
				}
				name := fmt.Sprintf("/big/c%d-f%d", k, j)
				if _, err := c.Stat(ctx, name); err != nil {
					t.Fatalf("client %d: stat %s: %v", i, name, err)
				}
			}
		}
	}
	ents, err := cs[clients-1].ReadDir(ctx, "/big")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range ents {
		seen[e.Name]++
	}
	if len(ents) != clients*perClient || len(seen) != clients*perClient {
		t.Fatalf("listing has %d entries (%d distinct), want %d", len(ents), len(seen), clients*perClient)
	}
	var redirects uint64
	for _, c := range cs {
		redirects += c.Redirects()
	}
	for id := range 4 {
		st, err := c0.MetaStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Entries == 0 {
			t.Errorf("meta server %d holds no entries of the big directory", id)
		}
	}
	if redirects == 0 {
		t.Error("no client was redirected")
	}
	for _, e := range ents {
		if err := cs[len(e.Name)%clients].Remove(ctx, "/big/"+e.Name); err != nil {
			t.Fatalf("remove %s: %v", e.Name, err)
		}
	}
	if err := c0.Remove(ctx, "/big"); err != nil {
		t.Fatalf("rmdir of the emptied split directory: %v", err)
	}
	if _, err := cs[1].Stat(ctx, "/big"); err == nil {
		t.Fatal("/big still exists")
	}
}

// TestGigaRenameCycleRace races renames that would each move a directory
// under the other, with the directories and their entries spread over
// several meta servers: at most one of each pair succeeds, and the tree never
// holds a cycle.
func TestGigaRenameCycleRace(t *testing.T) {
	c, cfg := newMultiClient(t, 3, 2, 0, 64<<10)
	c2, err := client.New(cluster.ClientConfig(cfg, core.Root, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	ctx := context.Background()
	// Enough names that the parent directory splits over the servers.
	if err := c.Mkdir(ctx, "/r", 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		if err := c.Mkdir(ctx, fmt.Sprintf("/r/pad%d", i), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 30 {
		a, b := fmt.Sprintf("/r/a%d", round), fmt.Sprintf("/r/b%d", round)
		for _, d := range []string{a, b, a + "/in", b + "/in"} {
			if err := c.Mkdir(ctx, d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		var errA, errB error
		wg.Add(2)
		go func() { defer wg.Done(); errA = c.Rename(ctx, a, b+"/in/x", 0) }()
		go func() { defer wg.Done(); errB = c2.Rename(ctx, b, a+"/in/x", 0) }()
		wg.Wait()
		if errA == nil && errB == nil {
			t.Fatalf("round %d: both renames succeeded: a cycle", round)
		}
		// Every directory still reaches the root.
		for _, p := range []string{"/r/a%d/in", "/r/b%d/in", "/r/b%d/in/x/in", "/r/a%d/in/x/in"} {
			p = fmt.Sprintf(p, round)
			if _, err := c.Stat(ctx, p); err != nil && !errs.Is(err, errs.NotExist) {
				t.Fatalf("round %d: stat %s: %v", round, p, err)
			}
		}
	}
}

// TestGigaXattrsFollowAttributes: extended attributes stay with a file when
// a rename moves its entry to another server, when a second link moves its
// attributes to the owner's record, and when that link goes again.
func TestGigaXattrsFollowAttributes(t *testing.T) {
	c, _ := newMultiClient(t, 3, 2, 0, 64<<10)
	ctx := context.Background()
	for _, d := range []string{"/p", "/q", "/l"} {
		if err := c.Mkdir(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const n = 24
	val := func(i int) []byte { return []byte(fmt.Sprintf("value-%d", i)) }
	check := func(path string, i int) {
		t.Helper()
		got, err := c.GetXattrPath(ctx, path, "user.tag")
		if err != nil || string(got) != string(val(i)) {
			t.Fatalf("getxattr %s: %q, %v; want %q", path, got, err, val(i))
		}
	}
	for i := range n {
		p := fmt.Sprintf("/p/f%d", i)
		f, err := c.Create(ctx, p, 0o644)
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := c.SetXattrPath(ctx, p, "user.tag", val(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		q := fmt.Sprintf("/q/g%d", i)
		if err := c.Rename(ctx, fmt.Sprintf("/p/f%d", i), q, 0); err != nil {
			t.Fatal(err)
		}
		check(q, i)
		l := fmt.Sprintf("/l/h%d", i)
		if err := c.Link(ctx, q, l); err != nil {
			t.Fatal(err)
		}
		check(q, i)
		check(l, i)
		if err := c.Remove(ctx, q); err != nil {
			t.Fatal(err)
		}
		check(l, i)
	}
}
