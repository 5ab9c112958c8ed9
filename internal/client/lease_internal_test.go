package client

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// fakeLeaseServer is a meta server that grants every lease after delay,
// with term and ever-growing grant numbers, and records releases. Its
// recall sends a recall on the connection of the last acquire.
type fakeLeaseServer struct {
	addr     string
	term     time.Duration
	delay    time.Duration
	releases chan *weftpb.LeaseReleaseRequest

	mu   sync.Mutex
	seq  uint64
	conn *rpc.Conn
}

func startFakeLeaseServer(t *testing.T, term, delay time.Duration) *fakeLeaseServer {
	t.Helper()
	f := &fakeLeaseServer{term: term, delay: delay, releases: make(chan *weftpb.LeaseReleaseRequest, 16)}
	mux := rpc.NewMux()
	rpc.Handle(mux, weftpb.MethodLeaseAcquire, func(ctx context.Context, req *weftpb.LeaseAcquireRequest) (*weftpb.LeaseAcquireReply, error) {
		time.Sleep(f.delay) // a slow link or a busy server: the reply comes late
		f.mu.Lock()
		defer f.mu.Unlock()
		f.seq++
		f.conn = rpc.ConnFromContext(ctx)
		return &weftpb.LeaseAcquireReply{Granted: req.Keys, TermMs: uint32(f.term / time.Millisecond), Seq: f.seq}, nil
	})
	rpc.HandleOneWay(mux, weftpb.MethodLeaseRelease, func(_ context.Context, req *weftpb.LeaseReleaseRequest) { f.releases <- req })
	rpc.Handle(mux, weftpb.MethodLockKeepAlive, func(context.Context, *weftpb.LockKeepAliveRequest) (*weftpb.LockKeepAliveReply, error) {
		return &weftpb.LockKeepAliveReply{Known: true}, nil
	})
	rpc.Handle(mux, weftpb.MethodEndLockSession, func(context.Context, *weftpb.EndLockSessionRequest) (*weftpb.Empty, error) {
		return &weftpb.Empty{}, nil
	})
	srv := rpc.NewServer(mux, rpc.ServerOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	f.addr = ln.Addr().String()
	return f
}

// recall recalls grant seq of key from session.
func (f *fakeLeaseServer) recall(t *testing.T, session, key, seq uint64) {
	t.Helper()
	f.mu.Lock()
	c := f.conn
	f.mu.Unlock()
	if err := c.Send(context.Background(), weftpb.MethodLeaseRecall, &weftpb.LeaseRecallRequest{Session: session, Keys: []uint64{key}, Seqs: []uint64{seq}}); err != nil {
		t.Fatal(err)
	}
}

func newLeaseClient(t *testing.T, addr string) (*Client, chan []LeaseKey) {
	t.Helper()
	c, err := New(Config{MetaAddrs: []string{addr}, StoreAddrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	recalled := make(chan []LeaseKey, 16)
	c.OnRecall(func(keys []LeaseKey) { recalled <- keys })
	return c, recalled
}

// The client trusts a lease until a margin before its term ends, counted
// from when it sent the request: a reply that took long is trusted for
// that much less.
func TestLeaseTrustCountsFromSend(t *testing.T) {
	const term, delay = time.Second, 300 * time.Millisecond
	f := startFakeLeaseServer(t, term, delay)
	c, _ := newLeaseClient(t, f.addr)
	before := time.Now()
	l := c.ReadLease(context.Background(), LeaseKey{Ino: 7})
	rem := l.Remaining()
	if limit := term - leaseMargin(term) - time.Since(before) + 5*time.Millisecond; rem <= 0 || rem > limit {
		t.Fatalf("lease trusted for %v after a reply that took %v; want (0, %v]", rem, time.Since(before), limit)
	}
	if rem > term-leaseMargin(term)-delay {
		t.Fatalf("lease trusted for %v: the %v the reply took are not counted", rem, delay)
	}
}

// A recall drops the lease at once, tells the layer above, then releases
// exactly the recalled grant.
func TestLeaseRecallReleases(t *testing.T) {
	f := startFakeLeaseServer(t, 10*time.Second, 0)
	c, recalled := newLeaseClient(t, f.addr)
	l := c.ReadLease(context.Background(), LeaseKey{Ino: 7})
	if l.Remaining() <= 0 {
		t.Fatal("no lease")
	}
	// Held and trusted for long enough: no new request.
	if again := c.ReadLease(context.Background(), LeaseKey{Ino: 7}); again.held[0] != l.held[0] {
		t.Error("a held lease was acquired again")
	}
	session := c.locks.mu.id
	f.recall(t, session, 7, l.held[0].seq)
	select {
	case keys := <-recalled:
		if len(keys) != 1 || keys[0] != (LeaseKey{Ino: 7}) {
			t.Fatalf("recalled %v", keys)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnRecall not called")
	}
	if l.Remaining() != 0 {
		t.Error("a recalled lease is still trusted")
	}
	select {
	case r := <-f.releases:
		if r.Session != session || len(r.Keys) != 1 || r.Keys[0] != 7 || r.Seqs[0] != l.held[0].seq {
			t.Errorf("release %v, want key 7 grant %d", r, l.held[0].seq)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no release")
	}

	// A recall of an older grant leaves a newer one alone; an acquire
	// whose grant was recalled before its reply was stored is not
	// trusted.
	l2 := c.ReadLease(context.Background(), LeaseKey{Ino: 7})
	c.recalled(0, session, []uint64{7}, []uint64{l.held[0].seq})
	<-recalled
	if l2.Remaining() == 0 {
		t.Error("a recall of an older grant dropped the newer one")
	}
	f.mu.Lock()
	next := f.seq + 1
	f.mu.Unlock()
	c.recalled(0, session, []uint64{8}, []uint64{next}) // key 8's next grant, before its reply
	<-recalled
	if l3 := c.ReadLease(context.Background(), LeaseKey{Ino: 8}); l3.Remaining() != 0 {
		t.Error("a grant recalled before its reply arrived is trusted")
	}
	if got := c.ReadLease(context.Background(), LeaseKey{Ino: core.Ino(8)}); got.Remaining() == 0 {
		t.Error("a later grant of the key is not trusted")
	}
}

// A recall of a key's grant also ends the older grants of the key that
// the newer one replaced: a reply filled under an older one may still be on
// its way to the layer above, and the server knows one grant per key and
// session, so its change goes ahead once this one is released.
func TestLeaseRecallDropsOlderGrants(t *testing.T) {
	f := startFakeLeaseServer(t, time.Second, 0)
	c, recalled := newLeaseClient(t, f.addr)
	old := c.ReadLease(context.Background(), LeaseKey{Ino: 7})
	// Trusted for less than half its term (as it is after half a term has
	// passed): acquired again.
	c.leases.mu.Lock()
	old.held[0].trusted = time.Now().Add(400 * time.Millisecond)
	c.leases.mu.Unlock()
	renewed := c.ReadLease(context.Background(), LeaseKey{Ino: 7})
	if old.Remaining() == 0 || renewed.Remaining() == 0 || renewed.held[0] == old.held[0] {
		t.Fatalf("want two grants of key 7: %v %v", old.held, renewed.held)
	}
	c.recalled(0, c.locks.mu.id, []uint64{7}, []uint64{renewed.held[0].seq})
	<-recalled
	if old.Remaining() != 0 {
		t.Error("the grant a newer one replaced is still trusted after the newer one was recalled")
	}
	if renewed.Remaining() != 0 {
		t.Error("a recalled grant is still trusted")
	}
}

// A lease is renewed below half of its own term, not of the cluster's: an
// edge server grants 1 s terms in a cluster whose term is 2 s, and the
// client used to ask it again on every use.
func TestLeaseReusedForHalfItsOwnTerm(t *testing.T) {
	f := startFakeLeaseServer(t, time.Second, 0)
	c, _ := newLeaseClient(t, f.addr) // the cluster's term: 2 s (the default)
	if c.cfg.LeaseTerm != 2*time.Second {
		t.Fatalf("client term %v, want the 2 s default", c.cfg.LeaseTerm)
	}
	first := c.ReadLease(context.Background(), LeaseKey{Ino: 7})
	second := c.ReadLease(context.Background(), LeaseKey{Ino: 7})
	if first.Remaining() == 0 || second.Remaining() == 0 {
		t.Fatal("no lease granted")
	}
	f.mu.Lock()
	grants := f.seq
	f.mu.Unlock()
	if grants != 1 {
		t.Fatalf("%d grants for two uses of a fresh 1 s lease, want 1", grants)
	}
}
