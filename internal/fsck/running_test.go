package fsck

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
)

// TestRunningClusterUnderLoad runs fsck with --repair over and over on a
// three-server cluster while clients create, rename (within a splitting
// directory and between directories on different servers), link, unlink,
// make and remove directories and set extended attributes. The scan is no
// snapshot, so it sees all of these half done; every suspicion must
// dissolve when checked again under locks, and nothing may be repaired.
func TestRunningClusterUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a workload for seconds")
	}
	tc := newTestCluster(t, 3, 8)
	setup := tc.client()
	for _, d := range []string{"/big", "/a", "/b"} {
		if err := setup.Mkdir(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const movers = 60
	for i := range movers {
		touch(t, setup, fmt.Sprintf("/a/m%d", i))
	}

	stop := make(chan struct{})
	var ops atomic.Int64
	var wg sync.WaitGroup
	worker := func(seed uint64, fn func(c *client.Client, rng *rand.Rand, i int)) {
		c := tc.client()
		rng := rand.New(rand.NewPCG(seed, 1))
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				fn(c, rng, i)
				ops.Add(1)
			}
		})
	}
	// Creators in the splitting directory, and removers of some of it.
	for w := range 2 {
		worker(uint64(w), func(c *client.Client, rng *rand.Rand, i int) {
			name := fmt.Sprintf("/big/w%d-%d", w, i)
			touch(t, c, name)
			if i%5 == 0 {
				_ = c.SetXattrPath(ctx, name, "user.k", []byte("v"), 0)
			}
			if i%7 == 3 {
				_ = c.Unlink(ctx, fmt.Sprintf("/big/w%d-%d", w, i-3))
			}
		})
	}
	// Renames between directories on different servers, back and forth.
	worker(10, func(c *client.Client, rng *rand.Rand, i int) {
		m := rng.IntN(movers)
		if c.Rename(ctx, fmt.Sprintf("/a/m%d", m), fmt.Sprintf("/b/m%d", m), 0) != nil {
			_ = c.Rename(ctx, fmt.Sprintf("/b/m%d", m), fmt.Sprintf("/a/m%d", m), 0)
		}
	})
	// Renames within the splitting directory (across its partitions),
	// hard links and unlinks.
	worker(11, func(c *client.Client, rng *rand.Rand, i int) {
		n := rng.IntN(40)
		switch i % 3 {
		case 0:
			_ = c.Rename(ctx, fmt.Sprintf("/big/w0-%d", n), fmt.Sprintf("/big/r%d", n), 0)
		case 1:
			_ = c.Link(ctx, fmt.Sprintf("/big/w1-%d", n), fmt.Sprintf("/b/l%d", n))
		case 2:
			_ = c.Unlink(ctx, fmt.Sprintf("/b/l%d", n))
		}
	})
	// Directories made, moved between directories and removed.
	worker(12, func(c *client.Client, rng *rand.Rand, i int) {
		n := rng.IntN(10)
		switch i % 4 {
		case 0:
			_ = c.Mkdir(ctx, fmt.Sprintf("/big/d%d", n), 0o755)
		case 1:
			_ = c.Rename(ctx, fmt.Sprintf("/big/d%d", n), fmt.Sprintf("/big/e%d", n), 0)
		case 2:
			_ = c.Rename(ctx, fmt.Sprintf("/big/e%d", n), fmt.Sprintf("/a/d%d", n), 0)
		case 3:
			_ = c.Rmdir(ctx, fmt.Sprintf("/a/d%d", n))
		}
	})

	deadline := time.Now().Add(4 * time.Second)
	runs, suspicions := 0, 0
	for time.Now().Before(deadline) {
		t1 := time.Now()
		r := tc.check(true)
		if d := time.Since(t1); d > time.Second {
			t.Logf("run %d took %v", runs, d)
		}
		runs++
		suspicions += r.Suspicions
		if len(r.Findings) > 0 {
			close(stop)
			wg.Wait()
			t.Fatalf("run %d under load found:%s", runs, describe(r))
		}
		if len(r.Pending) > 0 {
			t.Logf("run %d: pending:%s", runs, describe(r))
		}
	}
	t0 := time.Now()
	close(stop)
	wg.Wait()
	t.Logf("workers stopped in %v", time.Since(t0))
	r := tc.check(false)
	t.Logf("final check %v", time.Since(t0))
	if !r.Clean() || len(r.Findings) > 0 {
		t.Fatalf("after the load:%s", describe(r))
	}
	t.Logf("%d fsck runs during %d operations checked %d suspicions again; %d entries at the end", runs, ops.Load(), suspicions, r.Entries)
	if runs < 2 || r.Entries < 100 {
		t.Fatalf("too little happened: %d runs, %d entries", runs, r.Entries)
	}
}

func touch(t *testing.T, c *client.Client, name string) {
	f, err := c.Create(ctx, name, 0o644)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		t.Errorf("create %s: %v", name, err)
	}
}
