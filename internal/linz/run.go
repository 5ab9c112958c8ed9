package linz

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// EndWait bounds how long End waits for the workers' operations in
// flight: a client that hangs must not hang the test (the test's cleanup
// then stops the servers and mounts, which fails the stuck calls).
const EndWait = 30 * time.Second

// Run is one recorded run: one worker per client, one history.
type Run struct {
	H       *History
	Workers []*Worker
	// SaveIn is where a failed check saves the history and its
	// visualization ("": the system's temporary directory, kept for a
	// person to read). A test that expects a violation sets its own
	// temporary directory.
	SaveIn  string
	stop    chan struct{}
	stopped sync.Once
	done    sync.WaitGroup
}

// NewRun makes the namespace's directories through fss[0] and one worker
// per file system (Start starts them); seed makes the run repeatable as
// far as timing allows. The workers are stopped when tb ends, even if the
// test fails before it does.
func NewRun(tb testing.TB, fss []FS, seed uint64) *Run {
	tb.Helper()
	if len(fss) > MaxClients {
		tb.Fatalf("%d clients: a history has at most %d", len(fss), MaxClients)
	}
	for _, d := range Dirs {
		if err := fss[0].MkdirAll(d); err != nil {
			tb.Fatal(err)
		}
	}
	r := &Run{H: NewHistory(), stop: make(chan struct{})}
	for i, f := range fss {
		r.Workers = append(r.Workers, NewWorker(i, f, r.H, seed))
	}
	tb.Cleanup(func() { r.End() })
	return r
}

// SetMix gives every worker mix.
func (r *Run) SetMix(mix Mix) {
	for _, w := range r.Workers {
		w.Mix = mix
	}
}

// Start starts the workers.
func (r *Run) Start() {
	for _, w := range r.Workers {
		r.done.Go(func() { w.Run(r.stop) })
	}
}

// RunFor lets the workers run for d, or until half the time left before
// the test's deadline.
func (r *Run) RunFor(t *testing.T, d time.Duration) {
	if dl, ok := t.Deadline(); ok {
		d = min(d, time.Until(dl)/2)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	<-timer.C
}

// End stops the workers and waits for them (each finishes the operation
// it is in), at most EndWait; false if some are still in an operation.
func (r *Run) End() bool {
	r.stopped.Do(func() { close(r.stop) })
	done := make(chan struct{})
	go func() {
		r.done.Wait()
		close(done)
	}()
	t := time.NewTimer(EndWait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// Check stops the run and checks its history (Check below, bounded by
// CheckTime), logging what each client saw go wrong; it returns the
// checker's verdict.
func (r *Run) Check(tb testing.TB) porcupine.CheckResult {
	tb.Helper()
	if !r.End() {
		tb.Fatalf("a client's operation did not return within %v of the end of the run", EndWait)
	}
	ops := r.H.Ops()
	counts := map[Op]int{}
	for _, o := range ops {
		counts[o.Input.(Input).Op]++
	}
	tb.Logf("history: %d operations %v, from %s", len(ops), counts, r.H.Start().UTC().Format("15:04:05.000000"))
	for _, w := range r.Workers {
		if len(w.Unexpected) > 0 {
			tb.Logf("client %d: %d unexpected errors, first: %s", w.ID, len(w.Unexpected), w.Unexpected[0])
		}
		if len(w.LostCloses) > 0 {
			tb.Logf("client %d: %d closes failed after another client removed the file, first: %s", w.ID, len(w.LostCloses), w.LostCloses[0])
		}
	}
	return checkIn(tb, r.SaveIn, ops, CheckTime(tb))
}

// RequireLinearizable checks r's history and fails tb unless it is
// linearizable and free of unexpected errors.
func (r *Run) RequireLinearizable(tb testing.TB) {
	tb.Helper()
	if res := r.Check(tb); res != porcupine.Ok {
		tb.Errorf("the history of the clients is not linearizable (checker: %s)", res)
	}
	for _, w := range r.Workers {
		if len(w.Unexpected) > 0 {
			tb.Errorf("client %d: unexpected errors: %s", w.ID, strings.Join(w.Unexpected[:min(5, len(w.Unexpected))], "; "))
		}
	}
}

// Duration is how long a random workload runs: WEFT_LINZ_DURATION, else
// def.
func Duration(tb testing.TB, def time.Duration) time.Duration {
	tb.Helper()
	return envDuration(tb, "WEFT_LINZ_DURATION", def)
}

// CheckTime bounds one check: WEFT_LINZ_CHECK_TIME, default 1 minute.
func CheckTime(tb testing.TB) time.Duration {
	tb.Helper()
	return envDuration(tb, "WEFT_LINZ_CHECK_TIME", time.Minute)
}

func envDuration(tb testing.TB, name string, def time.Duration) time.Duration {
	tb.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		tb.Fatalf("%s=%q: want a duration such as 60s", name, s)
	}
	return d
}

// Seed is a workload's seed: WEFT_LINZ_SEED, else the clock; logged, so
// that a failed run can be repeated (as far as timing allows).
func Seed(tb testing.TB) uint64 {
	tb.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WEFT_LINZ_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			tb.Fatalf("WEFT_LINZ_SEED=%q: %v", s, err)
		}
		seed = v
	}
	tb.Logf("seed %d (WEFT_LINZ_SEED replays it)", seed)
	return seed
}
