package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/internal/weftbin"
)

// ecWorkload writes new files in the background and remembers those whose
// close succeeded (acknowledged). Writes fail while a stripe's store is
// down, which is the documented behaviour; they never make an
// acknowledged file read differently.
type ecWorkload struct {
	c    *client.Client
	mu   sync.Mutex // held by the writer per file; a test holds it to pause it
	done sync.Map   // path -> []byte, acknowledged
	n    int
	fail int
	// limit is how many files the writer may have acknowledged: the test
	// raises it as it goes, so that the data (and each read-back and
	// repair) stays small on a loaded machine.
	limit atomic.Int64
	more  chan struct{} // the limit was raised
}

func ecContent(i int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 7))
	// Just past the inline limit to a chunk, and every sixth past one
	// stripe of four 4 MiB chunks.
	size := 70<<10 + r.IntN(4<<20)
	if i%6 == 5 {
		size = 17<<20 + r.IntN(1<<20)
	}
	data := make([]byte, size)
	for j := range data {
		data[j] = byte(j*131+i) ^ byte(j>>13)
	}
	return data
}

func (w *ecWorkload) run(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		if int64(w.acked()) >= w.limit.Load() {
			i--
			select {
			case <-w.more:
			case <-ctx.Done():
			}
			continue
		}
		w.mu.Lock()
		name := fmt.Sprintf("/e%04d", i)
		data := ecContent(i)
		f, err := w.c.Create(ctx, name, 0o644)
		if err == nil {
			_, err = f.WriteContext(ctx, data)
			if cerr := f.CloseContext(ctx); err == nil {
				err = cerr
			}
		}
		if err == nil {
			w.done.Store(name, data)
			w.n++
		} else {
			w.fail++
		}
		w.mu.Unlock()
	}
}

// acked returns the number of acknowledged files.
func (w *ecWorkload) acked() int {
	n := 0
	w.done.Range(func(any, any) bool { n++; return true })
	return n
}

// checkAll reads every acknowledged file back: no error, every byte equal.
func (w *ecWorkload) checkAll(t *testing.T, ctx context.Context, c *client.Client, what string) {
	t.Helper()
	checked := 0
	w.done.Range(func(k, v any) bool {
		name, want := k.(string), v.([]byte)
		f, err := c.Open(ctx, name, os.O_RDONLY, 0)
		if err != nil {
			t.Fatalf("%s: open %s: %v", what, name, err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: read %s: %v", what, name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %s reads %d bytes that differ from the %d written", what, name, len(got), len(want))
		}
		checked++
		return true
	})
	t.Logf("%s: %d files read back identical", what, checked)
}

// TestErasureKillEachStore is issue 16's kill test at its quick size: on
// ec:4+1 over five mem store processes, under a write workload, each store
// in turn is killed (kill -9), read around while down, restarted empty,
// read around again and repaired with weft repair; no reader sees an error
// and every acknowledged byte reads back identical. Then two stores down,
// more than m = 1: reads fail with EIO, never with wrong bytes.
// WEFT_EC_REPLICAS=1 runs the same kills on replicas:2 as well.
func TestErasureKillEachStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	modes := []string{"ec:4+1"}
	if os.Getenv("WEFT_EC_REPLICAS") != "" {
		modes = append(modes, "replicas:2")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) { killEachStore(t, mode) })
	}
}

func killEachStore(t *testing.T, redundancy string) {
	p := startProcs(t, ProcsOptions{Dir: t.TempDir(), Meta: 1, Store: 5, Redundancy: redundancy, Backend: "mem", MemLimit: 512 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := &ecWorkload{c: newTestClient(t, p, true, nil), more: make(chan struct{}, 1)}
	// The reader checks what the stores still hold (EIO past the
	// parity): files it read before must not come from its chunk cache.
	reader := newTestClient(t, p, true, func(cc *client.Config) { cc.ReadCache = -1 })
	work, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.run(work) })
	defer func() { stopWork(); wg.Wait() }()
	waitAcked := func(n int) {
		t.Helper()
		w.limit.Store(int64(n) + 2) // a few more, written during the next kill
		select {
		case w.more <- struct{}{}:
		default: // the writer has not yet seen an earlier raise
		}
		deadline, _ := ctx.Deadline()
		waitfor.Until(t, time.Until(deadline), fmt.Sprintf("the workload acknowledging %d files", n), func() bool { return w.acked() >= n })
	}
	waitAcked(3)
	for id := range 5 {
		if err := p.Kill(RoleStore, id); err != nil {
			t.Fatal(err)
		}
		w.checkAll(t, ctx, reader, fmt.Sprintf("store %d killed", id))
		if err := p.Restart(ctx, RoleStore, id); err != nil {
			t.Fatal(err)
		}
		w.checkAll(t, ctx, reader, fmt.Sprintf("store %d back empty", id))
		waitAcked(w.acked() + 1) // writes go on with the store incomplete
		// Repair with the writer paused (a write racing a rebuild of its
		// stripe is a documented gap).
		w.mu.Lock()
		out, err := exec.CommandContext(ctx, weftbin.Path(t), "--cluster", p.ClusterFile(), "repair").CombinedOutput()
		for try := 0; try < 5 && err != nil && redundancy != "ec:4+1" && !bytes.Contains(out, []byte(" 0 raced a write")); try++ {
			// With replicas the restarted store's own background pass
			// may be copying the same chunks: run again, as weft repair
			// says.
			out, err = exec.CommandContext(ctx, weftbin.Path(t), "--cluster", p.ClusterFile(), "repair").CombinedOutput()
		}
		w.mu.Unlock()
		if err != nil && !(redundancy != "ec:4+1" && bytes.Contains(out, []byte("LOST"))) {
			t.Fatalf("weft repair after store %d came back: %v\n%s", id, err, out)
		}
		// With replicas, a chunk of a write that failed while the store
		// was down may have its newest version only on the store that
		// came back empty: repair reports it lost (the hardening issue's
		// rule) and still marks the store complete. The reads below say
		// whether any acknowledged byte went with it.
		t.Logf("weft repair after store %d:\n%s", id, out)
	}
	stopWork()
	wg.Wait()
	w.checkAll(t, ctx, reader, "every store killed once and repaired")
	t.Logf("workload: %d files acknowledged, %d failed while a store was down", w.n, w.fail)

	if redundancy != "ec:4+1" {
		return
	}
	// Two stores down with m = 1.
	for _, id := range []int{1, 3} {
		if err := p.Kill(RoleStore, id); err != nil {
			t.Fatal(err)
		}
	}
	var big string
	var bigData []byte
	w.done.Range(func(k, v any) bool {
		if d := v.([]byte); len(d) > len(bigData) {
			big, bigData = k.(string), d
		}
		return true
	})
	f, err := reader.Open(ctx, big, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if !errs.Is(err, errs.IO) {
		t.Fatalf("read of %s (%d bytes) with 2 of 5 stores down under ec:4+1: %d bytes, error %v; want EIO", big, len(bigData), len(got), err)
	}
	if !bytes.Equal(got, bigData[:len(got)]) {
		t.Fatalf("the bytes read before the EIO differ from those written")
	}
}
