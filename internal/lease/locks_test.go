package lease

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

const (
	lkUn  = weftpb.LockType_LOCK_UNLOCK
	lkRd  = weftpb.LockType_LOCK_READ
	lkWr  = weftpb.LockType_LOCK_WRITE
	toEOF = uint64(maxLockEnd)
)

// lockEnv is a lock table on a clock the test moves.
type lockEnv struct {
	t     *testing.T
	clock *fakeClock
	*Service
}

func newLockEnv(t *testing.T) *lockEnv {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	return &lockEnv{t: t, clock: clock, Service: New(Config{Now: clock.Now, Grace: -1})}
}

func (e *lockEnv) advance(d time.Duration) {
	e.clock.mu.Lock()
	e.clock.now = e.clock.now.Add(d)
	e.clock.mu.Unlock()
}

// posixOwner is a POSIX lock owner: session s, kernel owner o.
func posixOwner(s, o uint64) *weftpb.LockOwner { return &weftpb.LockOwner{Session: s, Owner: o} }

func flockOwner(s, o uint64) *weftpb.LockOwner {
	return &weftpb.LockOwner{Session: s, Owner: o, Flock: true}
}

// set tries to set a lock on inode 7 without waiting and reports whether it
// was granted.
func (e *lockEnv) set(o *weftpb.LockOwner, typ weftpb.LockType, start, end uint64) bool {
	e.t.Helper()
	r, err := e.SetLock(context.Background(), &weftpb.SetLockRequest{
		Ino: 7, Owner: o, Lock: &weftpb.LockRange{Type: typ, Start: start, End: end, Pid: uint32(o.Owner)},
	})
	if err != nil {
		e.t.Fatalf("setlock %v %v %d..%d: %v", o, typ, start, end, err)
	}
	if r.Granted == (r.Conflict != nil) {
		e.t.Fatalf("setlock reply %v: granted and conflict disagree", r)
	}
	return r.Granted
}

func (e *lockEnv) mustSet(o *weftpb.LockOwner, typ weftpb.LockType, start, end uint64) {
	e.t.Helper()
	if !e.set(o, typ, start, end) {
		e.t.Fatalf("setlock %v %v %d..%d: refused", o, typ, start, end)
	}
}

func (e *lockEnv) get(o *weftpb.LockOwner, typ weftpb.LockType, start, end uint64) *weftpb.LockRange {
	e.t.Helper()
	r, err := e.GetLock(context.Background(), &weftpb.GetLockRequest{
		Ino: 7, Owner: o, Lock: &weftpb.LockRange{Type: typ, Start: start, End: end},
	})
	if err != nil {
		e.t.Fatalf("getlock: %v", err)
	}
	return r.Conflict
}

// held lists the locks on inode 7 as "session/owner:type:start-end", sorted.
func (e *lockEnv) held() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	if fl := e.mu.files[7]; fl != nil {
		for _, l := range fl.held {
			typ := "r"
			if l.write {
				typ = "w"
			}
			if l.owner.flock {
				typ = "f" + typ
			}
			end := fmt.Sprint(l.end)
			if l.end == toEOF {
				end = "eof"
			}
			out = append(out, fmt.Sprintf("%d/%d:%s:%d-%s", l.owner.session, l.owner.owner, typ, l.start, end))
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func (e *lockEnv) wantHeld(want string) {
	e.t.Helper()
	if got := e.held(); got != want {
		e.t.Fatalf("locks held:\n got %s\nwant %s", got, want)
	}
}

func TestLockConflicts(t *testing.T) {
	e := newLockEnv(t)
	a, b := posixOwner(1, 10), posixOwner(2, 10) // the same kernel owner on two clients
	e.mustSet(a, lkWr, 100, 199)
	for _, c := range []struct {
		typ        weftpb.LockType
		start, end uint64
		granted    bool
	}{
		{lkWr, 0, 99, true},    // touching, not overlapping
		{lkWr, 200, 299, true}, // touching on the other side
		{lkRd, 150, 150, false},
		{lkWr, 0, toEOF, false},
		{lkRd, 199, 250, false},
	} {
		if got := e.set(b, c.typ, c.start, c.end); got != c.granted {
			t.Errorf("b %v %d..%d over a's write lock 100..199: granted %v, want %v", c.typ, c.start, c.end, got, c.granted)
		}
	}
	// Read locks share; a write lock waits for every reader.
	e.mustSet(a, lkRd, 1000, 1999)
	e.mustSet(b, lkRd, 1500, 2500)
	if e.set(posixOwner(1, 11), lkWr, 1999, 1999) {
		t.Error("write lock over two read locks granted")
	}
	// An owner never conflicts with itself: it converts its own lock.
	e.mustSet(a, lkWr, 1000, 1499)
	// Two owners of one session (two processes of one mount) exclude each
	// other.
	if e.set(posixOwner(1, 12), lkRd, 1200, 1200) {
		t.Error("second owner of the same session got a read lock inside a write lock")
	}
	// flock and POSIX locks do not see each other; flocks do.
	e.mustSet(flockOwner(2, 99), lkWr, 0, toEOF)
	if e.set(flockOwner(1, 98), lkRd, 0, toEOF) {
		t.Error("flock read lock granted over another flock write lock")
	}
	e.mustSet(flockOwner(2, 99), lkUn, 0, toEOF)
	e.mustSet(flockOwner(1, 98), lkRd, 0, toEOF)
	e.mustSet(flockOwner(2, 97), lkRd, 0, toEOF)
}

func TestLockSplitMerge(t *testing.T) {
	e := newLockEnv(t)
	a, b := posixOwner(1, 1), posixOwner(2, 2)

	// Adjacent and overlapping locks of one type merge.
	e.mustSet(a, lkWr, 0, 9)
	e.mustSet(a, lkWr, 10, 19)
	e.mustSet(a, lkWr, 5, 30)
	e.wantHeld("1/1:w:0-30")

	// Unlocking the middle splits.
	e.mustSet(a, lkUn, 10, 19)
	e.wantHeld("1/1:w:0-9 1/1:w:20-30")
	e.mustSet(b, lkWr, 10, 19)
	e.mustSet(b, lkUn, 0, toEOF)

	// Another type in the middle splits in three; setting it back merges.
	e.mustSet(a, lkWr, 0, 30)
	e.mustSet(a, lkRd, 10, 19)
	e.wantHeld("1/1:r:10-19 1/1:w:0-9 1/1:w:20-30")
	if !e.set(b, lkRd, 15, 15) || e.set(b, lkRd, 9, 10) {
		t.Error("after the downgrade, b may read-lock 15 but not 9..10")
	}
	e.mustSet(b, lkUn, 0, toEOF)
	e.mustSet(a, lkWr, 10, 19)
	e.wantHeld("1/1:w:0-30")

	// Different types do not merge when adjacent.
	e.mustSet(a, lkRd, 31, 40)
	e.wantHeld("1/1:r:31-40 1/1:w:0-30")

	// Unlock over several locks, partly covering the ends.
	e.mustSet(a, lkWr, 50, toEOF)
	e.mustSet(a, lkUn, 5, 60)
	e.wantHeld("1/1:w:0-4 1/1:w:61-eof")
	// Upgrading a range to the end of the file.
	e.mustSet(a, lkRd, 0, toEOF)
	e.wantHeld("1/1:r:0-eof")
	// Unlocking what is not locked changes nothing; unlocking all
	// forgets the file.
	e.mustSet(b, lkUn, 0, toEOF)
	e.wantHeld("1/1:r:0-eof")
	e.mustSet(a, lkUn, 0, toEOF)
	e.wantHeld("")
	if len(e.mu.files) != 0 {
		t.Errorf("file still in the table after its last unlock: %v", e.mu.files)
	}
}

func TestGetLock(t *testing.T) {
	e := newLockEnv(t)
	a, b := posixOwner(1, 4242), posixOwner(2, 7)
	e.mustSet(a, lkRd, 0, 99)
	e.mustSet(a, lkWr, 200, toEOF)

	if c := e.get(b, lkRd, 0, 150); c.Type != lkUn {
		t.Errorf("read over read locks: conflict %v", c)
	}
	if c := e.get(b, lkWr, 50, 50); c.Type != lkRd || c.Start != 0 || c.End != 99 || c.Pid != 4242 {
		t.Errorf("write over a read lock: conflict %v, want the read lock 0..99 of pid 4242", c)
	}
	if c := e.get(b, lkRd, 100, 300); c.Type != lkWr || c.Start != 200 || c.End != toEOF {
		t.Errorf("read over a write lock: conflict %v", c)
	}
	if c := e.get(b, lkWr, 100, 199); c.Type != lkUn {
		t.Errorf("in the gap: conflict %v", c)
	}
	if c := e.get(a, lkWr, 0, toEOF); c.Type != lkUn {
		t.Errorf("the holder itself: conflict %v", c)
	}
	// GetLock sets nothing.
	e.wantHeld("1/4242:r:0-99 1/4242:w:200-eof")
}

// A session that is not heard from for DefaultSessionTTL loses its locks;
// keepalives and lock requests keep it.
func TestLockSessionExpiry(t *testing.T) {
	e := newLockEnv(t)
	a, b, c := posixOwner(1, 1), posixOwner(2, 2), posixOwner(3, 3)
	e.mustSet(a, lkWr, 0, 999)
	e.mustSet(c, lkWr, 1000, 1999)
	ctx := context.Background()

	for i := 0; i < 5; i++ {
		e.advance(DefaultSessionTTL / 2)
		r, err := e.KeepAlive(ctx, &weftpb.LockKeepAliveRequest{Session: 1})
		if err != nil || !r.Known || r.TtlMs != uint32(DefaultSessionTTL/time.Millisecond) {
			t.Fatalf("keepalive: %v, %v", r, err)
		}
		if e.set(b, lkRd, 5, 5) {
			t.Fatalf("lock of a live session lost after %d keepalives", i+1)
		}
	}
	// Session 3 has been silent for 2.5 TTLs: gone, with its locks.
	e.wantHeld("1/1:w:0-999")
	if r, _ := e.KeepAlive(ctx, &weftpb.LockKeepAliveRequest{Session: 3}); r.Known {
		t.Error("an expired session is still known")
	}

	// Session 1 goes silent: just before the TTL its lock holds, at the
	// TTL it is gone.
	e.advance(DefaultSessionTTL - time.Millisecond)
	if c := e.get(b, lkRd, 0, 0); c.Type != lkWr {
		t.Fatalf("lock gone before the TTL: %v", c)
	}
	e.advance(time.Millisecond)
	if c := e.get(b, lkRd, 0, 0); c.Type != lkUn {
		t.Fatalf("lock of an expired session still there: %v", c)
	}
	e.mustSet(b, lkWr, 0, toEOF)
	if _, ok := e.mu.sessions[1]; ok {
		t.Error("expired session still in the table")
	}
}

func TestLockEndSession(t *testing.T) {
	e := newLockEnv(t)
	e.mustSet(posixOwner(1, 1), lkWr, 0, 9)
	e.mustSet(posixOwner(1, 2), lkWr, 10, 19)
	e.mustSet(flockOwner(1, 3), lkWr, 0, toEOF)
	e.mustSet(posixOwner(2, 1), lkRd, 20, 29)
	if _, err := e.EndSession(context.Background(), &weftpb.EndLockSessionRequest{Session: 1}); err != nil {
		t.Fatal(err)
	}
	e.wantHeld("2/1:r:20-29")
	if _, err := e.EndSession(context.Background(), &weftpb.EndLockSessionRequest{Session: 1}); err != nil {
		t.Errorf("ending an unknown session: %v", err)
	}
}

// Bad requests get Invalid and change nothing.
func TestLockBadRequests(t *testing.T) {
	e := newLockEnv(t)
	e.mustSet(posixOwner(1, 1), lkWr, 0, 9)
	ctx := context.Background()
	for name, req := range map[string]*weftpb.SetLockRequest{
		"no ino":      {Owner: posixOwner(2, 1), Lock: &weftpb.LockRange{Type: lkWr}},
		"no owner":    {Ino: 7, Lock: &weftpb.LockRange{Type: lkWr}},
		"no session":  {Ino: 7, Owner: posixOwner(0, 1), Lock: &weftpb.LockRange{Type: lkWr}},
		"no range":    {Ino: 7, Owner: posixOwner(2, 1)},
		"bad type":    {Ino: 7, Owner: posixOwner(2, 1), Lock: &weftpb.LockRange{Type: 3}},
		"start > end": {Ino: 7, Owner: posixOwner(2, 1), Lock: &weftpb.LockRange{Type: lkWr, Start: 10, End: 9}},
		"end too far": {Ino: 7, Owner: posixOwner(2, 1), Lock: &weftpb.LockRange{Type: lkWr, End: toEOF + 1}},
		"unlock past": {Ino: 7, Owner: posixOwner(1, 1), Lock: &weftpb.LockRange{Type: lkUn, End: 1 << 63}},
	} {
		_, err := e.SetLock(ctx, req)
		if errs.KindOf(err) != errs.Invalid {
			t.Errorf("%s: %v, want Invalid", name, err)
		}
		_, err = e.GetLock(ctx, &weftpb.GetLockRequest{Ino: req.Ino, Owner: req.Owner, Lock: req.Lock})
		if errs.KindOf(err) != errs.Invalid {
			t.Errorf("%s (getlock): %v, want Invalid", name, err)
		}
	}
	if _, err := e.KeepAlive(ctx, &weftpb.LockKeepAliveRequest{}); errs.KindOf(err) != errs.Invalid {
		t.Errorf("keepalive without session: %v", err)
	}
	if _, err := e.EndSession(ctx, &weftpb.EndLockSessionRequest{}); errs.KindOf(err) != errs.Invalid {
		t.Errorf("end session without session: %v", err)
	}
	e.wantHeld("1/1:w:0-9")
}

// A session cannot grow the table without bound.
func TestLockSessionLimit(t *testing.T) {
	e := newLockEnv(t)
	e.lockLimit = 100
	o := posixOwner(1, 1)
	for i := uint64(0); i < 100; i++ {
		e.mustSet(o, lkWr, 2*i, 2*i)
	}
	_, err := e.SetLock(context.Background(), &weftpb.SetLockRequest{Ino: 7, Owner: o,
		Lock: &weftpb.LockRange{Type: lkWr, Start: 1000, End: 1000}})
	if errs.KindOf(err) != errs.NoSpace {
		t.Fatalf("lock past the limit: %v, want NoSpace", err)
	}
	// Splitting a lock in two counts too; merging and unlocking work at
	// the limit.
	_, err = e.SetLock(context.Background(), &weftpb.SetLockRequest{Ino: 7, Owner: o,
		Lock: &weftpb.LockRange{Type: lkRd, Start: 2, End: 2}})
	if err != nil {
		t.Fatalf("converting a lock at the limit: %v", err)
	}
	e.mustSet(o, lkWr, 1, 1)
	e.mustSet(o, lkUn, 0, toEOF)
	if n := e.mu.sessions[1].locks; n != 0 {
		t.Errorf("lock count after unlocking all: %d", n)
	}
	// Other sessions have their own budget.
	e.mustSet(posixOwner(2, 1), lkWr, 0, 0)
}

// setWait is SetLock with waiting, run in the background; the result
// arrives on the returned channel.
func setWait(tab *Service, ctx context.Context, o *weftpb.LockOwner, typ weftpb.LockType, start, end uint64, wait time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		r, err := tab.SetLock(ctx, &weftpb.SetLockRequest{Ino: 7, Owner: o,
			Lock: &weftpb.LockRange{Type: typ, Start: start, End: end}, WaitMs: uint32(wait / time.Millisecond)})
		if err == nil && !r.Granted {
			err = errs.New(errs.Busy, "test", "not granted")
		}
		done <- err
	}()
	return done
}

func waitResult(t *testing.T, what string, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still waiting after 10s", what)
		return nil
	}
}

func notYet(t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s: returned %v while the conflict is still there", what, err)
	case <-time.After(50 * time.Millisecond):
	}
}

// A waiting request is granted when the conflict goes away: by an unlock,
// a downgrade or the holder's session ending or expiring. It gives up at
// its wait limit and when its caller cancels.
func TestLockWait(t *testing.T) {
	tab := New(Config{SessionTTL: 300 * time.Millisecond, Grace: -1})
	set := func(o *weftpb.LockOwner, typ weftpb.LockType, start, end uint64) {
		t.Helper()
		if err := waitResult(t, "set", setWait(tab, context.Background(), o, typ, start, end, 0)); err != nil {
			t.Fatal(err)
		}
	}
	keepalive := func(s uint64) {
		if _, err := tab.KeepAlive(context.Background(), &weftpb.LockKeepAliveRequest{Session: s}); err != nil {
			t.Fatal(err)
		}
	}
	a, b := posixOwner(1, 1), posixOwner(2, 2)
	long := 20 * time.Second

	set(a, lkWr, 0, 99)
	done := setWait(tab, context.Background(), b, lkWr, 50, 50, long)
	notYet(t, "write over write", done)
	keepalive(1)
	set(a, lkUn, 0, 49) // not the part in the way
	notYet(t, "after an unrelated unlock", done)
	keepalive(1)
	set(a, lkUn, 50, 99)
	if err := waitResult(t, "after the unlock", done); err != nil {
		t.Fatal(err)
	}

	// A downgrade lets readers in.
	keepalive(1)
	set(a, lkWr, 200, 299)
	done = setWait(tab, context.Background(), b, lkRd, 250, 250, long)
	notYet(t, "read over write", done)
	set(a, lkRd, 200, 299)
	if err := waitResult(t, "after the downgrade", done); err != nil {
		t.Fatal(err)
	}

	// The wait limit.
	keepalive(1)
	keepalive(2)
	set(a, lkWr, 1000, 1000)
	start := time.Now()
	err := waitResult(t, "short wait", setWait(tab, context.Background(), b, lkWr, 1000, 1000, 100*time.Millisecond))
	if errs.KindOf(err) != errs.Busy || time.Since(start) < 100*time.Millisecond {
		t.Errorf("wait of 100ms: %v after %v", err, time.Since(start))
	}

	// Cancellation (an interrupted F_SETLKW).
	keepalive(1)
	ctx, cancel := context.WithCancel(context.Background())
	done = setWait(tab, ctx, b, lkWr, 1000, 1000, long)
	notYet(t, "before the cancel", done)
	cancel()
	if err := waitResult(t, "after the cancel", done); errs.KindOf(err) != errs.Canceled {
		t.Errorf("canceled wait: %v, want Canceled", err)
	}

	// The holder's session expires while b waits (b's own request keeps
	// b alive): b gets the lock about one TTL later without anyone else
	// calling.
	keepalive(1)
	start = time.Now()
	done = setWait(tab, context.Background(), b, lkWr, 1000, 1000, long)
	if err := waitResult(t, "after the holder's expiry", done); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("granted %v after the holder went silent; its session lives 300ms", d)
	}

	// Ending the holder's session wakes the waiter at once.
	c := posixOwner(3, 3)
	set(c, lkWr, 5000, 5000)
	done = setWait(tab, context.Background(), b, lkRd, 5000, 5000, long)
	notYet(t, "before the end of the session", done)
	if _, err := tab.EndSession(context.Background(), &weftpb.EndLockSessionRequest{Session: 3}); err != nil {
		t.Fatal(err)
	}
	if err := waitResult(t, "after the end of the session", done); err != nil {
		t.Fatal(err)
	}
}

// The lock methods are served by Register, over real loopback TCP.
func TestLocksOverRPC(t *testing.T) {
	ctx := context.Background()
	mux := rpc.NewMux()
	New(Config{Grace: -1}).Register(mux)
	srv := rpc.NewServer(mux, rpc.ServerOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	conn, err := rpc.Dial(ctx, ln.Addr().String(), rpc.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	lock := func(o *weftpb.LockOwner) (*weftpb.SetLockReply, error) {
		var r weftpb.SetLockReply
		err := conn.Call(ctx, weftpb.MethodSetLock, &weftpb.SetLockRequest{Ino: 9, Owner: o,
			Lock: &weftpb.LockRange{Type: lkWr, End: toEOF, Pid: 77}}, &r)
		return &r, err
	}
	if r, err := lock(posixOwner(1, 1)); err != nil || !r.Granted {
		t.Fatalf("first lock: %v, %v", r, err)
	}
	if r, err := lock(posixOwner(2, 1)); err != nil || r.Granted || r.Conflict.GetPid() != 77 {
		t.Fatalf("conflicting lock: %v, %v", r, err)
	}
	var gr weftpb.GetLockReply
	if err := conn.Call(ctx, weftpb.MethodGetLock, &weftpb.GetLockRequest{Ino: 9, Owner: posixOwner(2, 1),
		Lock: &weftpb.LockRange{Type: lkRd, End: 10}}, &gr); err != nil || gr.Conflict.GetType() != lkWr {
		t.Fatalf("getlock: %v, %v", &gr, err)
	}
	var kr weftpb.LockKeepAliveReply
	if err := conn.Call(ctx, weftpb.MethodLockKeepAlive, &weftpb.LockKeepAliveRequest{Session: 1}, &kr); err != nil || !kr.Known {
		t.Fatalf("keepalive: %v, %v", &kr, err)
	}
	if err := conn.Call(ctx, weftpb.MethodEndLockSession, &weftpb.EndLockSessionRequest{Session: 1}, &weftpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if r, err := lock(posixOwner(2, 1)); err != nil || !r.Granted {
		t.Fatalf("lock after the holder's session ended: %v, %v", r, err)
	}
	// A blocked waiter is released when its caller cancels: the cancel
	// travels to the server.
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	var r weftpb.SetLockReply
	err = conn.Call(cctx, weftpb.MethodSetLock, &weftpb.SetLockRequest{Ino: 9, Owner: posixOwner(3, 1),
		Lock: &weftpb.LockRange{Type: lkRd}, WaitMs: 60_000}, &r)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("waiting lock with a 200ms deadline: %v, %v after %v", &r, err, time.Since(start))
	}
}
