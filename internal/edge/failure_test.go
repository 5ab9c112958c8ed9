package edge_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/edge"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/linksim"
	"github.com/weftfs/weft/internal/waitfor"
)

// TestEdgeKill9LosesNothingAcknowledged: the edge forwards every change
// upstream synchronously, so killing it loses nothing its clients were
// told was done; they get errors, not answers, once it is gone.
func TestEdgeKill9LosesNothingAcknowledged(t *testing.T) {
	p := startUpstream(t, 2)
	e := startEdge(t, p.ClusterFile())
	ctx := testCtx(t, 90*time.Second)
	direct := newClient(t, p.Config())
	viaEdge := newClient(t, e.cfg)
	if err := viaEdge.Mkdir(ctx, "/w", 0o755); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var acked []string
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			path := fmt.Sprintf("/w/f%d", i)
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := writeFile(wctx, viaEdge, path)
			if err == nil {
				err = viaEdge.Chmod(wctx, path, 0o600)
			}
			cancel()
			if err != nil {
				done <- err // the edge is gone
				return
			}
			mu.Lock()
			acked = append(acked, path)
			mu.Unlock()
		}
	}()
	waitfor.Until(t, 30*time.Second, "files written through the edge", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 20
	})
	e.kill9(t)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the writer stopped without an error")
		}
	case <-time.After(20 * time.Second):
		close(stop)
		t.Fatal("writes through a killed edge still succeed after 20 s")
	}

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := viaEdge.Stat(sctx, "/w"); err == nil {
		t.Fatal("stat through a killed edge succeeded")
	}

	mu.Lock()
	defer mu.Unlock()
	for _, path := range acked {
		mustMode(t, direct, ctx, path, 0o600, "direct client after the edge's kill -9")
		got, err := readAll(ctx, direct, path)
		if err != nil || got != path {
			t.Fatalf("%s after the edge's kill -9: %q, %v; want its name", path, got, err)
		}
	}
	t.Logf("%d acknowledged files all upstream", len(acked))
}

func readAll(ctx context.Context, c *client.Client, path string) (string, error) {
	f, err := c.Open(ctx, path, 0, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}

// TestEdgePartitionStaleOnlyWithinTheLeaseTerm cuts the link between the
// edge and the upstream. A direct client's change then waits for the
// edge's upstream leases to end (one upstream term, 2 s), and the edge
// stops trusting them before that: from the moment the change returns, a
// client of the edge gets either an error or the new state, never the
// old one.
func TestEdgePartitionStaleOnlyWithinTheLeaseTerm(t *testing.T) {
	p := startUpstream(t, 1)
	cfg := p.Config()
	link, err := linksim.Listen(cfg.Meta[0].Addr, linksim.Profile{Name: "lan"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	cfg.Meta[0].Addr = link.Addr()
	upstream := filepath.Join(t.TempDir(), "through-link.toml")
	if err := cfg.Write(upstream); err != nil {
		t.Fatal(err)
	}
	e := startEdge(t, upstream)
	ctx := testCtx(t, 60*time.Second)
	direct := newClient(t, p.Config())
	viaEdge := newClient(t, e.cfg)
	viaEdge.OnRecall(func([]client.LeaseKey) {})

	if err := writeFile(ctx, direct, "/f"); err != nil {
		t.Fatal(err)
	}
	a, err := viaEdge.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	l := viaEdge.ReadLease(ctx, viaEdge.AttrLease(client.Ref{Ino: a.Ino, Parent: 1, Name: "f"}, a))
	if l.Remaining() == 0 {
		t.Fatal("no lease through the edge")
	}

	link.Close() // the partition
	start := time.Now()
	if err := direct.Chmod(ctx, "/f", 0o600); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took > 4*time.Second {
		t.Fatalf("a direct chmod waited %v for the partitioned edge; want about one lease term (2 s)", took)
	}
	if l.Remaining() != 0 {
		t.Fatal("the edge client still trusts its lease after the change returned")
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	got, err := viaEdge.Stat(sctx, "/f")
	switch {
	case err == nil && got.Mode&0o7777 == 0o644:
		t.Fatalf("the edge served the old mode after the change returned (it waited %v)", took)
	case err == nil && got.Mode&0o7777 != 0o600:
		t.Fatalf("mode %#o through the edge", got.Mode&0o7777)
	}
	// The client retries an unreachable server until the caller's
	// deadline; whatever error it gives up with is the right answer.
	t.Logf("direct chmod waited %v; stat through the edge after it: %v (kind %v)", took, err, errs.KindOf(err))
}

// TestEdgeKeepsAKeyInUseCached: across a dsl link (30 ms round trip), a
// file stat'ed over and over is answered by the edge for longer than its
// upstream lease's term: the edge renews a lease in use before it runs out,
// so no call waits for the upstream again. The edge's own count of cache
// misses says so, not the time each stat took (a loaded machine makes slow
// stats that were hits).
func TestEdgeKeepsAKeyInUseCached(t *testing.T) {
	p := startUpstream(t, 1)
	ctx := testCtx(t, 60*time.Second)
	up, err := config.Load(dslUpstream(t, p))
	if err != nil {
		t.Fatal(err)
	}
	e, err := edge.Start(ctx, edge.Config{Upstream: up, Listen: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := writeFile(ctx, newClient(t, p.Config()), "/f"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, e.Cluster())
	if _, err := c.Stat(ctx, "/f"); err != nil { // the miss: leases and fills
		t.Fatal(err)
	}
	misses := func() float64 { return metricValue(t, e.Registry(), "weft_edge_cache_misses_total") }
	before, calls := misses(), 0
	// Paced: a key in use, not a busy loop on a shared machine.
	pace := time.NewTicker(5 * time.Millisecond)
	defer pace.Stop()
	for start := time.Now(); time.Since(start) < 10*time.Second; calls++ {
		<-pace.C
		if _, err := c.Stat(ctx, "/f"); err != nil {
			t.Fatal(err)
		}
	}
	// Without renewal each upstream lease's trust (1.8 s) ends in a
	// miss: five in 10 s. (One is left to a machine that stalled past
	// the renewal.)
	missed := misses() - before
	if missed > 1 {
		t.Fatalf("%v of %d stats through the edge missed its cache and waited for the upstream", missed, calls)
	}
	t.Logf("%v of %d stats missed the edge's cache", missed, calls)
}
