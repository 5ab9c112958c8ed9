package lease

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// fakeHolder records the recalls sent to it.
type fakeHolder struct {
	name string
	mu   sync.Mutex
	got  []Key
	ch   chan []Key
}

func newHolder(name string) *fakeHolder { return &fakeHolder{name: name, ch: make(chan []Key, 16)} }

func (h *fakeHolder) Recall(_ uint64, keys []Key, _ []uint64) {
	h.mu.Lock()
	h.got = append(h.got, keys...)
	h.mu.Unlock()
	h.ch <- keys
}

func (h *fakeHolder) recalled(t *testing.T) []Key {
	t.Helper()
	select {
	case k := <-h.ch:
		return k
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no recall after 10s", h.name)
		return nil
	}
}

func (h *fakeHolder) none(t *testing.T) {
	t.Helper()
	select {
	case k := <-h.ch:
		t.Fatalf("%s: unexpected recall of %v", h.name, k)
	default:
	}
}

func acquire(t *testing.T, s *Service, id uint64, h Holder, m Mode, keys ...Key) {
	t.Helper()
	if _, err := s.Acquire(context.Background(), id, h, m, keys); err != nil {
		t.Fatalf("acquire %d %v: %v", id, keys, err)
	}
}

// background runs fn in a goroutine; its result arrives on the channel.
func background(fn func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	return done
}

// change is BeginChange in the background; the change ends at once when
// it is let through.
func change(s *Service, requester Holder, keys ...Key) <-chan error {
	return background(func() error {
		end, err := s.BeginChange(context.Background(), requester, keys)
		if err == nil {
			end()
		}
		return err
	})
}

// Read leases are shared; a write lease recalls every other holder and
// waits for all of them; a read lease recalls a writer.
func TestLeaseConflicts(t *testing.T) {
	s := New(Config{Grace: -1, Term: time.Minute})
	h1, h2, h3 := newHolder("h1"), newHolder("h2"), newHolder("h3")
	acquire(t, s, 1, h1, Read, 10, 11)
	acquire(t, s, 2, h2, Read, 10)
	h1.none(t)
	h2.none(t)

	done := background(func() error { _, err := s.Acquire(context.Background(), 3, h3, Write, []Key{10}); return err })
	if k := h1.recalled(t); len(k) != 1 || k[0] != 10 {
		t.Fatalf("h1 recalled %v, want [10]", k)
	}
	h2.recalled(t)
	s.Release(1, []Key{10}, nil)
	notYet(t, "write lease while h2 still reads", done)
	s.Release(2, []Key{10}, nil)
	if err := waitResult(t, "write lease", done); err != nil {
		t.Fatal(err)
	}
	// Key 11 was never in the way.
	h1.none(t)

	// A reader recalls the writer.
	done = background(func() error { _, err := s.Acquire(context.Background(), 1, h1, Read, []Key{10}); return err })
	h3.recalled(t)
	notYet(t, "read lease while h3 writes", done)
	s.Release(3, []Key{10}, nil)
	if err := waitResult(t, "read lease", done); err != nil {
		t.Fatal(err)
	}
	if n := s.Held(); n != 2 {
		t.Errorf("held %d leases, want 2", n)
	}
}

// A change recalls the leases of everyone but the requester, and no lease
// on its keys is granted until it ends.
func TestLeaseChange(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	s := New(Config{Grace: -1, Term: time.Minute, Metrics: m})
	h1, h2 := newHolder("h1"), newHolder("h2")
	acquire(t, s, 1, h1, Read, 5)

	// The requester's own lease is no conflict.
	if err := waitResult(t, "own change", change(s, h1, 5)); err != nil {
		t.Fatal(err)
	}
	h1.none(t)

	end, err := func() (func(), error) {
		done := make(chan struct{})
		var end func()
		var err error
		go func() {
			end, err = s.BeginChange(context.Background(), h2, []Key{5})
			close(done)
		}()
		h1.recalled(t)
		select {
		case <-done:
			t.Fatal("change went through while h1 held its lease")
		case <-time.After(50 * time.Millisecond):
		}
		s.Release(1, []Key{5}, nil)
		<-done
		return end, err
	}()
	if err != nil {
		t.Fatal(err)
	}
	// While the change runs, acquires wait.
	got := background(func() error { _, err := s.Acquire(context.Background(), 1, h1, Read, []Key{5}); return err })
	notYet(t, "acquire during a change", got)
	end()
	if err := waitResult(t, "acquire after the change", got); err != nil {
		t.Fatal(err)
	}
	if n := counterValue(t, m.recalls); n != 1 {
		t.Errorf("recalled %v, want 1", n)
	}
	var lat dto.Metric
	if err := m.latency.Write(&lat); err != nil || lat.Histogram.GetSampleCount() != 1 {
		t.Errorf("recall latency: %v samples (%v), want 1", lat.Histogram.GetSampleCount(), err)
	}
	// A change whose caller gives up fails with its context, and lets
	// acquires through again.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.BeginChange(ctx, h2, []Key{5}); !errs.Is(err, errs.Timeout) {
		t.Fatalf("change with a short deadline: %v, want Timeout", err)
	}
	acquire(t, s, 2, h2, Read, 5)
}

// A holder that never answers loses its lease at the end of its term: the
// change waits one term, not longer.
func TestLeaseExpiry(t *testing.T) {
	const term = 300 * time.Millisecond
	m := NewMetrics(nil)
	s := New(Config{Grace: -1, Term: term, Metrics: m})
	h1 := newHolder("h1")
	acquire(t, s, 1, h1, Read, 7)
	start := time.Now()
	done := change(s, nil, 7)
	h1.recalled(t)
	if err := waitResult(t, "change past a silent holder", done); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < term/2 || d > term+2*time.Second {
		t.Errorf("change waited %v for a silent holder; the term is %v", d, term)
	}
	if n := counterValue(t, m.expiries); n != 1 {
		t.Errorf("expired %v, want 1", n)
	}
	if n := s.Held(); n != 0 {
		t.Errorf("held %d after expiry", n)
	}
	// Ending the session frees its leases at once.
	acquire(t, s, 1, h1, Read, 7)
	done = change(s, nil, 7)
	h1.recalled(t)
	if _, err := s.EndSession(context.Background(), &weftpb.EndLockSessionRequest{Session: 1}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := waitResult(t, "change after the holder's session ended", done); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > term/2 {
		t.Errorf("change waited %v after the session ended", d)
	}
}

// After a restart no change and no write lease goes through for one grace
// period; read leases do.
func TestLeaseGrace(t *testing.T) {
	const grace = 300 * time.Millisecond
	start := time.Now()
	s := New(Config{Grace: grace, Term: time.Minute})
	h1 := newHolder("h1")
	acquire(t, s, 1, h1, Read, 1)
	if d := time.Since(start); d > grace/2 {
		t.Fatalf("read lease took %v in the grace period", d)
	}
	w := background(func() error {
		_, err := s.Acquire(context.Background(), 2, newHolder("h2"), Write, []Key{2})
		return err
	})
	c := change(s, nil, 3)
	for _, done := range []<-chan error{w, c} {
		if err := waitResult(t, "after the grace period", done); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < grace {
			t.Errorf("went through %v after the start, inside the grace period of %v", d, grace)
		}
	}
}

// Bad requests change nothing.
func TestLeaseInvalid(t *testing.T) {
	s := New(Config{Grace: -1})
	for _, tc := range []struct {
		id   uint64
		mode Mode
		keys []Key
	}{{0, Read, []Key{1}}, {1, 3, []Key{1}}, {1, Read, nil}} {
		if _, err := s.Acquire(context.Background(), tc.id, nil, tc.mode, tc.keys); !errs.Is(err, errs.Invalid) {
			t.Errorf("acquire %+v: %v, want Invalid", tc, err)
		}
	}
	if s.Held() != 0 {
		t.Error("a bad request left a lease")
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.Counter.GetValue()
}

// A late release of an older grant (it answers a recall that crossed a new
// acquire) leaves the newer grant alone.
func TestLeaseLateRelease(t *testing.T) {
	s := New(Config{Grace: -1, Term: time.Minute})
	h1 := newHolder("h1")
	g1, err := s.Acquire(context.Background(), 1, h1, Read, []Key{4})
	if err != nil {
		t.Fatal(err)
	}
	g2, err := s.Acquire(context.Background(), 1, h1, Read, []Key{4})
	if err != nil || g2.Seq <= g1.Seq {
		t.Fatalf("second grant %+v, %v after %+v", g2, err, g1)
	}
	s.Release(1, []Key{4}, []uint64{g1.Seq})
	if s.Held() != 1 {
		t.Fatal("a release of the first grant ended the second")
	}
	done := change(s, nil, 4)
	h1.recalled(t)
	notYet(t, "change while the second grant is held", done)
	s.Release(1, []Key{4}, []uint64{g2.Seq})
	if err := waitResult(t, "change after the release", done); err != nil {
		t.Fatal(err)
	}
}

// A session that owes a release (a change recalled one of its leases, and
// it has not answered yet) is refused a read lease at once on any key a
// change is waiting on, not only on the one recalled from it: it may be a
// FUSE lookup that the kernel sends holding a directory's lock (before a
// rename), while the recall it owes needs that lock to invalidate the
// other directory's names. Waiting had each wait for the other until the
// client's 500 ms bound (linz: a rename from b to a on one mount while
// another renamed from a to b), and the client then released before its
// kernel had forgotten the names. A session that owes nothing waits for
// the change, so that what it reads then is the change's result (a rename's
// two lookups must not see the two sides of one rename).
func TestLeaseReadAcquireWhileOwing(t *testing.T) {
	s := New(Config{Grace: -1, Term: time.Minute})
	h1, h2 := newHolder("h1"), newHolder("h2")
	acquire(t, s, 1, h1, Read, 8)
	done := change(s, nil, 8, 9)
	h1.recalled(t)
	start := time.Now()
	if _, err := s.Acquire(context.Background(), 1, h1, Read, []Key{9}); !errs.Is(err, errs.Busy) || time.Since(start) > time.Second {
		t.Fatalf("read acquire of the change's other key by a session that owes a release: %v after %v, want Busy at once", err, time.Since(start))
	}
	other := background(func() error { _, err := s.Acquire(context.Background(), 2, h2, Read, []Key{9}); return err })
	notYet(t, "a session that owes nothing, during the change", other)
	s.Release(1, []Key{8}, nil)
	for _, d := range []<-chan error{done, other} {
		if err := waitResult(t, "after the release", d); err != nil {
			t.Fatal(err)
		}
	}
	// Released, it owes nothing: it is granted again.
	acquire(t, s, 1, h1, Read, 9)
}

// A session asking again for a lease that a waiting change recalled from
// it is refused at once: it may be asking while it handles the recall.
// Other sessions wait for the change as usual.
func TestLeaseAcquireWhileRecalled(t *testing.T) {
	s := New(Config{Grace: -1, Term: time.Minute})
	h1, h2 := newHolder("h1"), newHolder("h2")
	acquire(t, s, 1, h1, Read, 9)
	done := change(s, nil, 9)
	h1.recalled(t)
	start := time.Now()
	if _, err := s.Acquire(context.Background(), 1, h1, Read, []Key{9}); !errs.Is(err, errs.Busy) || time.Since(start) > time.Second {
		t.Fatalf("acquire by the recalled session: %v after %v, want Busy at once", err, time.Since(start))
	}
	other := background(func() error { _, err := s.Acquire(context.Background(), 2, h2, Read, []Key{9}); return err })
	notYet(t, "another session during the change", other)
	s.Release(1, []Key{9}, nil)
	for _, d := range []<-chan error{done, other} {
		if err := waitResult(t, "after the release", d); err != nil {
			t.Fatal(err)
		}
	}
}

// A session holds at most maxLeasesPerSession leases on a server: past it,
// an acquire is refused (Busy, the client reads without a lease) and the
// server keeps no more; a request naming more keys than that is invalid.
func TestLeasesPerSessionBounded(t *testing.T) {
	s := New(Config{Grace: -1, Term: time.Minute})
	h := newHolder("h")
	keys := make([]Key, maxLeasesPerSession)
	for i := range keys {
		keys[i] = Key(i + 1)
	}
	if _, err := s.Acquire(context.Background(), 1, h, Read, keys); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(context.Background(), 1, h, Read, []Key{Key(len(keys) + 1)}); !errs.Is(err, errs.Busy) {
		t.Fatalf("one lease past the bound: %v, want busy", err)
	}
	if n := s.Held(); n != maxLeasesPerSession {
		t.Errorf("held %d leases, want %d", n, maxLeasesPerSession)
	}
	// Renewing what it holds is still allowed.
	if _, err := s.Acquire(context.Background(), 1, h, Read, keys[:10]); err != nil {
		t.Fatalf("renewing held leases: %v", err)
	}
	if _, err := s.Acquire(context.Background(), 2, h, Read, append(keys, 0)); !errs.Is(err, errs.Invalid) {
		t.Fatalf("a request with too many keys: %v, want invalid", err)
	}
}
