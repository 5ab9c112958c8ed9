package linz_test

import (
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/weftfs/weft/internal/linz"
	"github.com/weftfs/weft/internal/waitfor"
)

// TestKnownHistories: the checker gives each known history its verdict.
func TestKnownHistories(t *testing.T) { linz.CheckCases(t) }

// TestLocalDirectory: three workers on one local directory (a file system
// that is linearizable for these operations) record a history the checker
// accepts, with every kind of operation in it.
func TestLocalDirectory(t *testing.T) {
	dir := t.TempDir()
	fss := []linz.FS{linz.OSFS{Root: dir}, linz.OSFS{Root: dir}, linz.OSFS{Root: dir}}
	r := linz.NewRun(t, fss, linz.Seed(t))
	r.Start()
	waitOps(t, r, 2000)
	r.RequireLinearizable(t)
	seen := map[linz.Op]bool{}
	for _, o := range r.H.Ops() {
		seen[o.Input.(linz.Input).Op] = true
	}
	for op := linz.OpCreate; op <= linz.OpReread; op++ {
		if !seen[op] {
			t.Errorf("no %s in the history", op)
		}
	}
}

// waitOps lets r run until its history holds n operations.
func waitOps(t *testing.T, r *linz.Run, n int) {
	t.Helper()
	waitfor.Until(t, 2*time.Minute, fmt.Sprintf("%d operations recorded", n), func() bool { return len(r.H.Ops()) >= n })
}

// staleFS answers lstat from what it saw first, forever: a client that
// caches attributes without leases.
type staleFS struct {
	linz.OSFS
	mu    sync.Mutex
	stats map[string]linz.Stat
}

func (s *staleFS) Lstat(path string) (linz.Stat, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.stats[path]; ok {
		return st, nil
	}
	st, err := s.OSFS.Lstat(path)
	if err == nil {
		s.stats[path] = st
	}
	return st, err
}

// TestCatchesStaleClient: the check fails when one client serves stale
// attributes. The stale client stats a/x, another renames it away, and the
// stale client still finds it; random operations follow.
func TestCatchesStaleClient(t *testing.T) {
	dir := t.TempDir()
	stale := &staleFS{OSFS: linz.OSFS{Root: dir}, stats: map[string]linz.Stat{}}
	r := linz.NewRun(t, []linz.FS{stale, linz.OSFS{Root: dir}}, linz.Seed(t))
	r.SaveIn = t.TempDir() // the violation is expected
	s, w := r.Workers[0], r.Workers[1]
	w.Create(0)
	s.Stat(0)
	w.Rename(0, 1)
	s.Stat(0)
	r.Start()
	waitOps(t, r, 500)
	if res := r.Check(t); res != porcupine.Illegal {
		t.Errorf("checker: %s; want Illegal: a client served a name renamed away", res)
	}
}

// TestSaveLoad: a saved history reads back as it was.
func TestSaveLoad(t *testing.T) {
	var ops []porcupine.Operation
	for _, c := range linz.Cases() {
		ops = append(ops, c.Ops...)
	}
	name, err := linz.SaveOps(ops)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(name)
	got, err := linz.LoadOps(name)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ops) {
		t.Errorf("loaded %v\nsaved  %v", got, ops)
	}
}
