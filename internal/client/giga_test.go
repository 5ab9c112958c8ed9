package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
)

// TestGigaConcurrentCreators has several client instances, each with its
// own (stale) partition maps, create files in one directory of a four-server
// cluster while it splits; afterwards every name exists exactly once, a
// listing returns each once, every server holds a partition, and removing
// everything leaves the directory removable.
func TestGigaConcurrentCreators(t *testing.T) {
	// Each client has several requests in flight, so that some of them
	// race with the redirects that teach the client a split.
	const clients, streams, perClient = 4, 4, 300
	c0, cfg := newMultiClient(t, 4, 40, 64<<10)
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
