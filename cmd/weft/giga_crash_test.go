package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// TestGigaCrash kills meta server processes with SIGKILL while clients
// create directories that split as they fill (a new one every few files, so
// that splits go on all the time) and rename files between directories on
// different servers, restarts them, and then checks that weft fsck finds
// the namespace clean, that every acknowledged create exists exactly once,
// and that every acknowledged rename took effect whole.
func TestGigaCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills server processes")
	}
	bin := buildWeft(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	procs, err := cluster.StartProcs(ctx, cluster.ProcsOptions{
		Binary: bin, Dir: dir, Meta: 3, Store: 1, SplitThreshold: 4, Durability: "sync",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { procs.KillAll() })
	cfg := procs.Config()
	newClient := func() *client.Client {
		cc := cluster.ClientConfig(cfg, core.Root, nil)
		cc.RetryFor = 30 * time.Second
		c, err := client.New(cc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	setup := newClient()
	for _, d := range []string{"/storm", "/from", "/to"} {
		if err := setup.Mkdir(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Files to rename, spread over /from's partitions.
	const movers = 120
	for i := range movers {
		f, err := setup.Create(ctx, fmt.Sprintf("/from/m%d", i), 0o644)
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	created := map[string]bool{} // acknowledged creates under /storm
	// Where each mover is after the last acknowledged rename: in /to or
	// not. A rename that failed (its server died under it) may or may not
	// have happened, so the mover's place is unknown until a later rename
	// succeeds.
	inTo := make([]bool, movers)
	unknown := make([]bool, movers)
	renames := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		c := newClient()
		wg.Add(1)
		go func() {
			defer wg.Done()
			const perDir = 16 // past the threshold: each directory splits
			var d string
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if i%perDir == 0 {
					d = fmt.Sprintf("/storm/w%d-d%d", w, i/perDir)
					if err := c.Mkdir(ctx, d, 0o755); err != nil && !errs.Is(err, errs.Exist) {
						d = "" // its server died under it: skip this group
					}
				}
				if d == "" {
					continue
				}
				name := fmt.Sprintf("%s/f%d", d, i)
				f, err := c.Create(ctx, name, 0o644)
				if err == nil {
					err = f.Close()
				}
				if err == nil {
					mu.Lock()
					created[name] = true
					mu.Unlock()
				}
			}
		}()
	}
	// Renames back and forth between /from and /to, whose partitions are
	// on different servers, for as long as servers are killed.
	place := func(to bool) string {
		if to {
			return "/to"
		}
		return "/from"
	}
	for w := range 2 {
		c := newClient()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i = (i + 2) % movers {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				to, lost := inTo[i], unknown[i]
				mu.Unlock()
				src, dst := fmt.Sprintf("%s/m%d", place(to), i), fmt.Sprintf("%s/m%d", place(!to), i)
				err := c.Rename(ctx, src, dst, 0)
				if err != nil && lost && errs.Is(err, errs.NotExist) {
					// The rename that failed did happen: go back.
					to = !to
					err = c.Rename(ctx, dst, src, 0)
				}
				mu.Lock()
				if err == nil {
					inTo[i], unknown[i] = !to, false
					renames++
				} else {
					unknown[i] = true
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	for round := range 4 {
		time.Sleep(time.Duration(150+rand.IntN(200)) * time.Millisecond)
		id := round % 3
		if err := procs.Kill(cluster.RoleMeta, id); err != nil {
			t.Fatalf("kill meta %d: %v", id, err)
		}
		time.Sleep(100 * time.Millisecond)
		if err := procs.Restart(ctx, cluster.RoleMeta, id); err != nil {
			t.Fatalf("restart meta %d: %v", id, err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	// Unfinished splits and cross-server operations finish in the
	// background after a restart; fsck reports them as unfinished (exit 1,
	// no problems) until then. Problems it found are damage: no retry.
	var out []byte
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err = exec.CommandContext(ctx, bin, "fsck", "--cluster", procs.ClusterFile()).CombinedOutput()
		if err == nil || time.Now().After(deadline) || bytes.Contains(out, []byte("problems left")) {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatalf("weft fsck: %v\n%s", err, out)
	}
	t.Logf("weft fsck:\n%s", out)

	check := newClient()
	dirs, err := check.ReadDir(ctx, "/storm")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, d := range dirs {
		ents, err := check.ReadDir(ctx, "/storm/"+d.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			seen["/storm/"+d.Name+"/"+e.Name]++
		}
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("%s listed %d times", name, n)
		}
	}
	for name := range created {
		if seen[name] != 1 {
			t.Errorf("acknowledged create %s is gone", name)
		}
		if _, err := check.Stat(ctx, name); err != nil {
			t.Errorf("stat %s: %v", name, err)
		}
	}
	for i := range movers {
		_, errFrom := check.Stat(ctx, fmt.Sprintf("/from/m%d", i))
		_, errTo := check.Stat(ctx, fmt.Sprintf("/to/m%d", i))
		isFrom, isTo := errFrom == nil, errTo == nil
		switch {
		case !isFrom && !errs.Is(errFrom, errs.NotExist), !isTo && !errs.Is(errTo, errs.NotExist):
			t.Errorf("m%d: unexpected errors %v, %v", i, errFrom, errTo)
		case isFrom == isTo:
			t.Errorf("m%d: in /from %v, in /to %v", i, isFrom, isTo)
		case !unknown[i] && isTo != inTo[i]:
			t.Errorf("m%d: the last acknowledged rename left it in %s, it is in %s", i, place(inTo[i]), place(isTo))
		}
	}
	// The same check on the stopped cluster, from the stores themselves.
	check.Close()
	if err := procs.Stop(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, bin, "fsck", "--cluster", procs.ClusterFile()).CombinedOutput(); err != nil {
		t.Fatalf("weft fsck of the stopped cluster: %v\n%s", err, out)
	}
	t.Logf("%d creates in %d directories and %d renames acknowledged across %d meta server kills", len(created), len(dirs), renames, 4)
}
