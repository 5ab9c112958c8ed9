package meta

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// A restarted meta server lets no change through for its grace period
// (clients may still trust leases it granted before); a new store has none.
func TestLeaseGraceAfterRestart(t *testing.T) {
	const grace = 300 * time.Millisecond
	e := newEnv(t, func(c *Config) { c.LeaseGrace = grace })
	start := time.Now()
	e.mkdir(rootCreds(), root, "a", 0o755)
	if d := time.Since(start); d > grace/2 {
		t.Errorf("mkdir on a new store took %v: it waited for a grace period", d)
	}
	// The grace period starts while the server opens, after restart and
	// before reopen returns: a change may end no earlier than grace after
	// restart.
	restart := time.Now()
	e.reopen()
	start = time.Now()
	e.mustLookup(root, "a") // reads go on
	if d := time.Since(start); d > grace/2 {
		t.Errorf("lookup after a restart took %v", d)
	}
	e.mkdir(rootCreds(), root, "b", 0o755)
	if d := time.Since(restart); d < grace {
		t.Errorf("mkdir %v after a restart, inside the grace period of %v", d, grace)
	}
}

// A client holding a read lease on a directory over a connection gets a
// recall when another client creates a name there; the create waits for
// its release. The requester's own lease is not recalled.
func TestLeaseRecallOverRPC(t *testing.T) {
	e := newEnv(t)
	mux := rpc.NewMux()
	e.Register(mux)
	srv := rpc.NewServer(mux, rpc.ServerOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	recalls := make(chan *weftpb.LeaseRecallRequest, 4)
	cb := rpc.NewMux()
	rpc.HandleOneWay(cb, weftpb.MethodLeaseRecall, func(_ context.Context, r *weftpb.LeaseRecallRequest) { recalls <- r })
	dial := func(m *rpc.Mux) *rpc.Conn {
		c, err := rpc.Dial(ctx, ln.Addr().String(), rpc.DialOptions{Mux: m})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder, other := dial(cb), dial(nil)
	acquire := func(c *rpc.Conn, session uint64) *weftpb.LeaseAcquireReply {
		var r weftpb.LeaseAcquireReply
		if err := c.Call(ctx, weftpb.MethodLeaseAcquire, &weftpb.LeaseAcquireRequest{Session: session,
			Mode: weftpb.LeaseMode_LEASE_READ, Keys: []uint64{root}}, &r); err != nil || len(r.Granted) != 1 || r.Seq == 0 {
			t.Fatalf("acquire: %v, %v", &r, err)
		}
		return &r
	}
	create := func(c *rpc.Conn, name string) <-chan error {
		done := make(chan error, 1)
		go func() {
			done <- c.Call(ctx, weftpb.MethodCreate, &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: name, Mode: 0o644, Exclusive: true}, &weftpb.CreateReply{})
		}()
		return done
	}
	g := acquire(holder, 1)

	// The holder's own create does not recall its lease.
	if err := <-create(holder, "mine"); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-recalls:
		t.Fatalf("recall of the requester's own lease: %v", r)
	default:
	}

	done := create(other, "f")
	var r *weftpb.LeaseRecallRequest
	select {
	case r = <-recalls:
	case <-time.After(10 * time.Second):
		t.Fatal("no recall")
	}
	if len(r.Keys) != 1 || r.Keys[0] != root || r.Session != 1 || r.Seqs[0] != g.Seq {
		t.Fatalf("recall %v, want root's grant %d of session 1", r, g.Seq)
	}
	select {
	case err := <-done:
		t.Fatalf("create returned (%v) before the release", err)
	case <-time.After(50 * time.Millisecond):
	}
	start := time.Now()
	if err := holder.Send(ctx, weftpb.MethodLeaseRelease, &weftpb.LeaseReleaseRequest{Session: 1, Keys: r.Keys, Seqs: r.Seqs}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("create finished %v after the release", d)
	}
}
