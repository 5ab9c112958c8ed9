package fusefs

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/waitfor"
)

// TestChangeSeenAcrossMounts measures how long until a change on one mount
// is seen on another (the leases issue's "Lease behaviour"), and checks the
// single system image while it does: mount B stats a file in a loop, so it
// holds the directory's read lease and its kernel caches the file's
// attributes; mount A chmods the file again and again. Every stat on B that
// was called after a chmod returned on A must report that chmod's mode (a
// failure names the first that did not; one that returns after the next
// chmod was called may report either), and the test logs, per chmod:
//
//   - the chmod's own time on A (which includes recalling B's lease);
//   - from the chmod's return on A until the first stat on B that reports
//     it returns (B is stat'ing all the time, so this is at most about one
//     stat after a recall: a FUSE round trip and a meta call).
//
// WEFT_SEEN_CHANGES sets how many chmods (default 50).
func TestChangeSeenAcrossMounts(t *testing.T) {
	requireFUSE(t)
	n := 50
	if s := os.Getenv("WEFT_SEEN_CHANGES"); s != "" {
		if _, err := fmt.Sscan(s, &n); err != nil || n <= 0 {
			t.Fatalf("WEFT_SEEN_CHANGES=%q: want a positive count", s)
		}
	}
	p := startLinzProcs(t, 0, "async")
	mnts := mountProcs(t, p.ClusterFile(), 2)
	a, b := mnts[0]+"/f", mnts[1]+"/f"
	if err := os.WriteFile(a, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitfor.NoError(t, 10*time.Second, "the file on mount B", func() error { _, err := os.Stat(b); return err })

	type stat struct {
		call, ret time.Time
		mode      fs.FileMode
	}
	var (
		mu    sync.Mutex
		stats []stat
		errs  []error
		stop  = make(chan struct{})
		done  sync.WaitGroup
	)
	done.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			call := time.Now()
			st, err := os.Stat(b)
			ret := time.Now()
			mu.Lock()
			if err != nil {
				errs = append(errs, err)
			} else {
				stats = append(stats, stat{call, ret, st.Mode().Perm()})
			}
			mu.Unlock()
		}
	})
	// Stop the reader even if the test fails first, waiting for its stat
	// in flight at most linzEndWait: a mount that hangs must not hang the
	// test (the mounts' cleanup, which runs next, kills their processes).
	var once sync.Once
	end := func() {
		once.Do(func() {
			close(stop)
			finished := make(chan struct{})
			go func() {
				done.Wait()
				close(finished)
			}()
			timer := time.NewTimer(linzEndWait)
			defer timer.Stop()
			select {
			case <-finished:
			case <-timer.C:
				t.Errorf("a stat on mount B did not return within %v", linzEndWait)
			}
		})
	}
	t.Cleanup(end)

	type change struct {
		call, ret time.Time
		mode      fs.FileMode
	}
	var changes []change
	for i := range n {
		mode := fs.FileMode(0o600)
		if i%2 == 1 {
			mode = 0o644
		}
		// Let B stat (and so take its lease) between two changes.
		mu.Lock()
		seen := len(stats)
		mu.Unlock()
		waitfor.Until(t, 10*time.Second, "a stat on mount B", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(stats) > seen+1
		})
		call := time.Now()
		if err := os.Chmod(a, mode); err != nil {
			t.Fatal(err)
		}
		changes = append(changes, change{call, time.Now(), mode})
	}
	// The last change is seen too.
	waitfor.Until(t, 10*time.Second, "a stat on mount B after the last change", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(stats) > 0 && stats[len(stats)-1].call.After(changes[len(changes)-1].ret)
	})
	end()
	if len(errs) > 0 {
		t.Fatalf("stat on mount B: %d errors, first: %v", len(errs), errs[0])
	}

	var took, seen []time.Duration
	j := 0
	for i, c := range changes {
		took = append(took, c.ret.Sub(c.call))
		next := time.Time{}
		if i+1 < len(changes) {
			next = changes[i+1].call
		}
		// The stats called after this change returned must report it
		// until the next change is called; one that returns after that
		// overlaps the next change, and may report either.
		for j < len(stats) && !stats[j].call.After(c.ret) {
			j++
		}
		first := true
		for k := j; k < len(stats) && (next.IsZero() || stats[k].call.Before(next)); k++ {
			s := stats[k]
			if s.mode != c.mode && (next.IsZero() || s.ret.Before(next)) {
				t.Fatalf("change %d: stat on mount B called %v after chmod %o returned on mount A (at %s) reports %o",
					i, s.call.Sub(c.ret), c.mode, c.ret.UTC().Format("15:04:05.000000"), s.mode)
			}
			if first && s.mode == c.mode {
				seen = append(seen, s.ret.Sub(c.ret))
				first = false
			}
		}
	}
	t.Logf("%d chmods on mount A while mount B stats the file (%d stats): chmod %s; from its return until B's stat reports it %s",
		len(changes), len(stats), percentiles(took), percentiles(seen))
}

// percentiles describes ds by their median and 99th percentile.
func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "(none)"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return "p50 " + at(0.5).Round(time.Microsecond).String() + " p99 " + at(0.99).Round(time.Microsecond).String() +
		fmt.Sprintf(" (n %d)", len(s))
}
