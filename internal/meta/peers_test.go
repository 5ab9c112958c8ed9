package meta

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/proto/weftpb"
)

// testCluster is n meta servers in this process, talking to each other over
// loopback, each on a crashable in-memory file system.
type testCluster struct {
	t     *testing.T
	addrs []string
	cfgs  []Config
	mu    sync.Mutex // guards fss, srvs and hooks against a failpoint's crash
	fss   []*vfs.MemFS
	srvs  []*Server
	hooks []func(string) error // each server's failpoint, if any
	rpcs  []*rpc.Server
	clock *fakeClock
}

// errCrash is what a failpoint returns to stop its operation.
var errCrash = errors.New("crash")

func newTestCluster(t *testing.T, n int, mod func(id int, c *Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, fss: make([]*vfs.MemFS, n), srvs: make([]*Server, n), rpcs: make([]*rpc.Server, n),
		hooks: make([]func(string) error, n)}
	var lns []net.Listener
	for range n {
		ln, err := rpc.ListenPicked() // restarted on its address
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		c.addrs = append(c.addrs, ln.Addr().String())
	}
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	c.clock = clock
	for id := range n {
		cfg := Config{ID: id, Dir: "/meta", Peers: c.addrs, Now: clock.Now, SplitThreshold: 4000}
		if mod != nil {
			mod(id, &cfg)
		}
		cfg.Failpoint = func(name string) error {
			c.mu.Lock()
			hook := c.hooks[id]
			c.mu.Unlock()
			if hook == nil {
				return nil
			}
			return hook(name)
		}
		c.cfgs = append(c.cfgs, cfg)
		c.fss[id] = vfs.NewCrashableMem()
	}
	t.Cleanup(func() {
		for id := range n {
			c.stop(id)
		}
	})
	for id := range n {
		c.start(id, lns[id])
	}
	return c
}

// start opens server id on its file system and serves it on ln (or its
// address again).
func (c *testCluster) start(id int, ln net.Listener) {
	c.t.Helper()
	if ln == nil {
		var err error
		for deadline := time.Now().Add(5 * time.Second); ; {
			if ln, err = net.Listen("tcp", c.addrs[id]); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			c.t.Fatalf("listen again on %s: %v", c.addrs[id], err)
		}
	}
	cfg := c.cfgs[id]
	cfg.FS = c.fss[id]
	cfg.Registry = prometheus.NewRegistry()
	s, err := Open(cfg)
	if err != nil {
		ln.Close()
		c.t.Fatalf("open meta %d: %v", id, err)
	}
	mux := rpc.NewMux()
	s.Register(mux)
	r := rpc.NewServer(mux, rpc.ServerOptions{})
	go r.Serve(ln)
	c.mu.Lock()
	c.srvs[id], c.rpcs[id] = s, r
	c.mu.Unlock()
}

func (c *testCluster) stop(id int) {
	c.mu.Lock()
	s, r := c.srvs[id], c.rpcs[id]
	c.srvs[id], c.rpcs[id] = nil, nil
	c.mu.Unlock()
	if r != nil {
		r.Close()
	}
	if s != nil {
		s.Close()
	}
}

func (c *testCluster) srv(id int) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srvs[id]
}

// crashAt sets a failpoint on server id that, the first time name is
// reached, keeps what server id's disk holds at that moment (as a power
// cut would) and stops the operation; every later call of name stops its
// operation too, so the old server gets no further. The channel is closed
// at the crash.
func (c *testCluster) crashAt(id int, name string) (crashed <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	hook := func(point string) error {
		if point != name {
			return nil
		}
		once.Do(func() {
			c.mu.Lock()
			c.fss[id] = c.fss[id].CrashClone(vfs.CrashCloneCfg{})
			c.mu.Unlock()
			close(ch)
		})
		return errCrash
	}
	c.mu.Lock()
	c.hooks[id] = hook
	c.mu.Unlock()
	return ch
}

// restart stops server id and opens it again on its crashed disk, without
// the failpoint.
func (c *testCluster) restart(id int) {
	c.t.Helper()
	c.stop(id)
	c.mu.Lock()
	c.hooks[id] = nil
	c.mu.Unlock()
	c.start(id, nil)
}

// on runs call on every server until one does not answer WrongServer.
func (c *testCluster) on(call func(s *Server) error) error {
	var err error
	for id := range c.srvs {
		if err = call(c.srv(id)); errs.KindOf(err) != errs.WrongServer {
			return err
		}
	}
	return err
}

// eventually waits for cond with a deadline.
func (c *testCluster) eventually(what string, cond func() bool) {
	c.t.Helper()
	waitfor.Until(c.t, 15*time.Second, what, cond)
}

// keysWithTag counts server id's keys with the given tag.
func (c *testCluster) keysWithTag(id int, tag byte) int {
	s := c.srv(id)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tag}, UpperBound: []byte{tag + 1}})
	if err != nil {
		c.t.Fatal(err)
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		c.t.Fatal(err)
	}
	return n
}

// dirOn makes a directory under the root that server id owns, splitting the
// root across the servers first (the cluster needs a split threshold of a
// few entries).
func (c *testCluster) dirOn(id int, prefix string) *weftpb.Attr {
	c.t.Helper()
	// The root splits in the background: make directories until one lands
	// on server id, for up to 10 s.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		var a *weftpb.Attr
		err := c.on(func(s *Server) error {
			r, err := s.Mkdir(ctx, &weftpb.MkdirRequest{Creds: rootCreds(), Parent: root, Name: fmt.Sprintf("%s%d", prefix, i), Mode: 0o777})
			if err == nil {
				a = r.Attr
			}
			return err
		})
		if err != nil && errs.KindOf(err) != errs.WrongServer {
			c.t.Fatalf("mkdir: %v", err)
		}
		if a != nil && core.Ino(a.Ino).Server() == id {
			return a
		}
	}
	c.t.Fatalf("no directory on meta %d after 10 s of mkdirs", id)
	return nil
}

func (c *testCluster) lookupOn(id int, parent uint64, name string) (*weftpb.Attr, error) {
	r, err := c.srv(id).Lookup(ctx, &weftpb.LookupRequest{Creds: rootCreds(), Parent: parent, Name: name})
	if err != nil {
		return nil, err
	}
	return r.Attr, nil
}

// entryNames lists the names of dir's entries that server id holds.
func (c *testCluster) entryNames(id int, dir core.Ino) []string {
	c.t.Helper()
	p := dirPrefix(dir)
	it, err := c.srv(id).db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		c.t.Fatal(err)
	}
	var names []string
	for it.First(); it.Valid(); it.Next() {
		_, _, name, ok := entrySuffix(it.Key())
		if !ok {
			c.t.Fatalf("bad entry key %q", it.Key())
		}
		names = append(names, name)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		c.t.Fatal(err)
	}
	return names
}
