package fusefs

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/linz"
)

// Lease failures with real processes, checked with the history checker: a
// mount that holds a read lease keeps serving what it cached, and no other
// mount's change may land while it may still do so.

// faultTerm is the lease term of these tests: short, so that waiting for
// one is cheap.
const faultTerm = time.Second

// renameWhileWatched renames a/x to a/y on mount writer while mount
// watcher stats a/x over and over, all recorded in r, until the rename has
// returned and the watcher has seen it gone (or its bound passed). before
// runs once the watcher runs, after once the rename returned (either may
// be nil). It returns how long the rename took.
func renameWhileWatched(t *testing.T, writer, watcher *linz.Worker, before, after func()) time.Duration {
	t.Helper()
	renamed := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.Now().Add(4 * faultTerm)
		seen := 0 // stats called after the rename returned
		// A stat every millisecond at most: most are answered from the
		// kernel's cache, and the history stays small enough to check.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for ; time.Now().Before(deadline) && seen < 3; <-tick.C {
			select {
			case <-renamed:
				seen++
			default:
			}
			watcher.Stat(0)
		}
	}()
	if before != nil {
		before()
	}
	start := time.Now()
	writer.Rename(0, 1)
	took := time.Since(start)
	close(renamed)
	if after != nil {
		after()
	}
	wg.Wait()
	return took
}

// TestLeaseGraceAfterMetaKill: the meta server is killed (kill -9) while
// a mount holds a read lease on a directory, and restarted at once. For
// one term after its restart it lets no change through, so the rename
// another mount asks for then waits, while reads elsewhere go on; the holder is
// never contradicted (the history of both mounts is linearizable).
func TestLeaseGraceAfterMetaKill(t *testing.T) {
	requireFUSE(t)
	p := startLinzProcs(t, faultTerm, "sync")
	r := newLinz(t, mountProcs(t, p.ClusterFile(), 3), 1)
	writer, holder, reader := r.Workers[0], r.Workers[1], r.Workers[2]
	writer.Create(0)
	holder.Stat(0) // the holder's kernel caches a/x under a read lease
	if err := p.Kill(cluster.RoleMeta, 0); err != nil {
		t.Fatal(err)
	}
	var restarted time.Time
	readDone := make(chan time.Duration, 1)
	took := renameWhileWatched(t, writer, holder, func() {
		restarted = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Restart(ctx, cluster.RoleMeta, 0); err != nil {
			t.Fatalf("restart meta: %v", err)
		}
		// A read on a third mount during the grace, of a directory
		// no change waits for.
		go func() {
			start := time.Now()
			reader.Stat(linz.Slots - 1)
			readDone <- time.Since(start)
		}()
	}, nil)
	sinceRestart := time.Since(restarted)
	read := <-readDone
	t.Logf("rename returned %v after the restart began (the rename itself: %v); a stat during the grace took %v",
		sinceRestart, took, read)
	if read >= faultTerm {
		t.Errorf("a stat of another directory during the grace took %v: reads should go on", read)
	}
	// The server's grace ends one term after it started, which was after
	// the restart began.
	if sinceRestart < faultTerm {
		t.Errorf("a rename went through %v after the meta server restarted; the grace is %v", sinceRestart, faultTerm)
	}
	r.RequireLinearizable(t)
}

// TestLeaseStalledHolder: the connection of a mount that holds a read
// lease stops forwarding (a fault proxy between it and the meta server).
// Another mount's rename waits for the lease's term, and by the time it
// returns the stalled mount no longer answers from its cache: its stats
// either saw the old name before the rename returned or wait for the link
// and see the new state (the history is linearizable).
func TestLeaseStalledHolder(t *testing.T) {
	requireFUSE(t)
	p := startLinzProcs(t, faultTerm, "sync")
	cfg, err := config.Load(p.ClusterFile())
	if err != nil {
		t.Fatal(err)
	}
	proxy := startFaultProxy(t, cfg.Meta[0].Addr)
	cfg.Meta[0].Addr = proxy.addr()
	proxied := filepath.Join(filepath.Dir(p.ClusterFile()), "proxied.toml")
	if err := cfg.Write(proxied); err != nil {
		t.Fatal(err)
	}
	mnts := mountProcs(t, p.ClusterFile(), 1)
	mnts = append(mnts, mountProcs(t, proxied, 1)...)
	r := newLinz(t, mnts, 1)
	writer, holder := r.Workers[0], r.Workers[1]
	writer.Create(0)
	holder.Stat(0)
	// The link stays stalled a while after the rename returned: the
	// holder's stats then must not be answered from its cache.
	var resumed *time.Timer
	took := renameWhileWatched(t, writer, holder, proxy.stall, func() {
		resumed = time.AfterFunc(faultTerm/2, proxy.resume)
	})
	resumed.Stop()
	proxy.resume()
	t.Logf("rename while the holder's link is stalled: %v", took)
	// The server waited for the stalled holder's lease to end.
	if took < faultTerm/2 || took > faultTerm+time.Second {
		t.Errorf("the rename took %v; a stalled holder should hold it up for about its lease's term (%v)", took, faultTerm)
	}
	// The holder sees the rename once its link is back.
	holder.Stat(0)
	holder.Stat(1)
	r.RequireLinearizable(t)
}
