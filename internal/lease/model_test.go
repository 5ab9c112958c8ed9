package lease

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestLeaseModel runs random acquires, releases, changes and clock steps
// against one service on a fake clock, through its non-blocking steps
// (what Acquire and BeginChange do between waits), and checks the safety
// rules after every step:
//   - a write lease in its term excludes every other session's lease in
//     its term;
//   - a change is let through only when no other session holds a lease in
//     its term on its keys, and no lease is granted on a key while a
//     change on it runs;
//   - nothing is granted or changed in the grace period but read leases.
func TestLeaseModel(t *testing.T) {
	for seed := range uint64(20) {
		runLeaseModel(t, seed, 2000)
	}
}

func runLeaseModel(t *testing.T, seed uint64, steps int) {
	const (
		sessions = 4
		keys     = 3
		term     = time.Second
		grace    = 2 * time.Second
	)
	rng := rand.New(rand.NewPCG(seed, 0))
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	start := clock.Now()
	s := New(Config{Now: clock.Now, Term: term, Grace: grace})
	holders := make([]*fakeHolder, sessions+1)
	for i := range holders {
		holders[i] = &fakeHolder{name: "h", ch: make(chan []Key, 1<<16)}
	}
	type change struct {
		keys      []Key
		requester int // session whose holder asked; 0: none
		through   bool
	}
	var changes []*change
	grants := map[[2]uint64]uint64{} // (session, key) -> seq, as the model knows them

	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...)
	}
	check := func() {
		t.Helper()
		s.mu.Lock()
		defer s.mu.Unlock()
		now := clock.Now()
		for k, kl := range s.mu.leases {
			live := 0
			writer := false
			for _, g := range kl.grants {
				if now.Before(g.expires) {
					live++
					writer = writer || g.mode == Write
				}
			}
			if writer && live > 1 {
				fail("key %d: a write lease and %d others in their term", k, live-1)
			}
			if writer && now.Before(start.Add(grace)) {
				fail("key %d: a write lease in the grace period", k)
			}
		}
	}
	for range steps {
		switch op := rng.IntN(10); {
		case op < 4: // acquire
			id := uint64(1 + rng.IntN(sessions))
			mode := Read
			if rng.IntN(3) == 0 {
				mode = Write
			}
			ks := []Key{Key(rng.IntN(keys))}
			seq, wait, _, err := s.tryAcquire(id, holders[id], mode, ks)
			if err == nil && wait == nil {
				for _, c := range changes {
					for _, ck := range c.keys {
						if ck == ks[0] {
							fail("granted key %d during a change", ck)
						}
					}
				}
				grants[[2]uint64{id, uint64(ks[0])}] = seq
			}
		case op < 6: // release, sometimes of an older grant
			id := uint64(1 + rng.IntN(sessions))
			k := Key(rng.IntN(keys))
			seq := grants[[2]uint64{id, uint64(k)}]
			if rng.IntN(4) == 0 && seq > 1 {
				seq--
			}
			s.Release(id, []Key{k}, []uint64{seq})
		case op < 7: // a change starts
			c := &change{keys: []Key{Key(rng.IntN(keys))}, requester: rng.IntN(sessions + 1)}
			s.mu.Lock()
			for _, k := range c.keys {
				kl := s.mu.leases[k]
				if kl == nil {
					kl = &keyLeases{grants: make(map[uint64]*grant)}
					s.mu.leases[k] = kl
				}
				kl.changes++
			}
			s.mu.Unlock()
			changes = append(changes, c)
		case op < 8: // a change tries to go through, or ends
			if len(changes) == 0 {
				continue
			}
			i := rng.IntN(len(changes))
			c := changes[i]
			if c.through {
				s.endChange(c.keys)
				changes = append(changes[:i], changes[i+1:]...)
				continue
			}
			var req Holder
			if c.requester > 0 {
				req = holders[c.requester]
			}
			if wait, _ := s.tryChange(req, c.keys); wait == nil {
				c.through = true
				if clock.Now().Before(start.Add(grace)) {
					fail("a change went through in the grace period")
				}
				s.mu.Lock()
				for _, k := range c.keys {
					for sid, g := range s.mu.leases[k].grants {
						if int(sid) != c.requester && clock.Now().Before(g.expires) {
							fail("a change on key %d went through while session %d holds a lease in its term", k, sid)
						}
					}
				}
				s.mu.Unlock()
			}
		default:
			clock.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
		}
		check()
	}
}
