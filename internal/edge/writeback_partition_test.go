package edge_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/edge"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/waitfor"
)

// cutProxy forwards TCP connections to target until cut, and again after
// mend: a partition that can heal (a linksim link cannot be reopened).
type cutProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     struct {
		sync.Mutex
		down  bool
		conns map[net.Conn]struct{}
	}
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	p.mu.conns = map[net.Conn]struct{}{}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			continue
		}
		for _, pair := range [][2]net.Conn{{c, up}, {up, c}} {
			p.wg.Go(func() {
				_, _ = io.Copy(pair[0], pair[1])
				pair[0].Close()
				pair[1].Close()
			})
		}
	}
}

// track records a connection pair, or closes it while the proxy is cut.
func (p *cutProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		if p.mu.down {
			c.Close()
			continue
		}
		p.mu.conns[c] = struct{}{}
	}
	return !p.mu.down
}

// cut closes every connection and refuses new ones until mend.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.down = true
	for c := range p.mu.conns {
		c.Close()
	}
	clear(p.mu.conns)
}

func (p *cutProxy) mend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.down = false
}

// TestEdgeWriteBackPartitionDropsAndReports: a write-back edge holds a
// chmod when it is cut off from the upstream. A direct client's chmod of
// the file then waits at most one upstream term for the edge's lease, and
// stands: the edge drops what it held once its lease is no longer trusted,
// rather than send it over the other site's change when the link heals.
// The next fsync through the edge says the change was lost (EIO), once;
// the edge's clients then read the direct client's mode.
func TestEdgeWriteBackPartitionDropsAndReports(t *testing.T) {
	p := startUpstream(t, 1)
	ctx := testCtx(t, 90*time.Second)
	cfg := p.Config()
	proxy := startCutProxy(t, cfg.Meta[0].Addr)
	cfg.Meta[0].Addr = proxy.Addr()
	e, err := edge.Start(ctx, edge.Config{Upstream: cfg, Listen: "127.0.0.1:0", WriteBack: true, WriteBackWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	direct := newClient(t, p.Config())
	if err := direct.Mkdir(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(ctx, direct, "/d/f"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, e.Cluster())
	a, err := c.Stat(ctx, "/d/f")
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Stat(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	chmodQueued(t, ctx, c, direct, client.Ref{Ino: a.Ino, Parent: d.Ino, Name: "f"})

	proxy.cut()
	start := time.Now()
	if err := direct.Chmod(ctx, "/d/f", 0o604); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("a direct chmod waited %v for the cut-off edge; want about one upstream term (2 s)", took)
	}
	waitfor.Until(t, 30*time.Second, "the edge to drop the chmod it held", func() bool {
		return metricValue(t, e.Registry(), "weft_edge_writeback_lost_total") >= 1
	})
	proxy.mend()
	err = c.SyncNamespace(ctx)
	if !errs.Is(err, errs.IO) {
		t.Fatalf("fsync through the edge after it dropped a chmod: %v (kind %v); want an I/O error", err, errs.KindOf(err))
	}
	if err := c.SyncNamespace(ctx); err != nil {
		t.Errorf("a second fsync through the edge: %v; want nil (the loss is reported once)", err)
	}
	mustMode(t, direct, ctx, "/d/f", 0o604, "direct")
	mustMode(t, c, ctx, "/d/f", 0o604, "a client of the edge")
}
