package cluster

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
)

func startEmbedded(t *testing.T, opts EmbeddedOptions) *Embedded {
	t.Helper()
	e, err := StartEmbedded(context.Background(), opts)
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// reachable reports whether a weft RPC handshake with addr succeeds, with
// cfg's admin identity.
func reachable(t *testing.T, cfg *config.Cluster, addr string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	dial, err := DialOptions(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := rpc.Dial(ctx, addr, dial)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func TestEmbeddedStartWritesClusterFile(t *testing.T) {
	dir := t.TempDir()
	e := startEmbedded(t, EmbeddedOptions{Dir: dir})

	for _, addr := range []string{e.MetaAddr(), e.StoreAddr()} {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" || port == "0" {
			t.Errorf("server address %q, want 127.0.0.1 and a picked port", addr)
		}
		if !reachable(t, e.Config(), addr) {
			t.Errorf("no weft server answers at %s", addr)
		}
	}
	if e.ClusterFile() != filepath.Join(dir, "weft.toml") {
		t.Errorf("ClusterFile() = %q", e.ClusterFile())
	}
	cfg, err := config.Load(e.ClusterFile())
	if err != nil {
		t.Fatalf("the written cluster file does not load: %v", err)
	}
	if cfg.Meta[0].Addr != e.MetaAddr() || cfg.Store[0].Addr != e.StoreAddr() {
		t.Errorf("file names %s and %s, servers run at %s and %s",
			cfg.Meta[0].Addr, cfg.Store[0].Addr, e.MetaAddr(), e.StoreAddr())
	}
	if cfg.Meta[0].Dir != filepath.Join(dir, "meta0") || cfg.Store[0].Dir != filepath.Join(dir, "store0") {
		t.Errorf("data dirs %q, %q", cfg.Meta[0].Dir, cfg.Store[0].Dir)
	}
	if cfg.Durability != "sync" || cfg.Store[0].Backend != "disk" {
		t.Errorf("defaults not applied: durability %q backend %q", cfg.Durability, cfg.Store[0].Backend)
	}
	if got := e.Config(); got.Meta[0].Addr != e.MetaAddr() {
		t.Errorf("Config() meta addr %q", got.Meta[0].Addr)
	}
}

func TestEmbeddedRestartKeepsAddressesAndSettings(t *testing.T) {
	dir := t.TempDir()
	e, err := StartEmbedded(context.Background(), EmbeddedOptions{Dir: dir, Durability: "async", Backend: "mem", MemLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	metaAddr, storeAddr := e.MetaAddr(), e.StoreAddr()
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	e2 := startEmbedded(t, EmbeddedOptions{Dir: dir})
	if e2.MetaAddr() != metaAddr || e2.StoreAddr() != storeAddr {
		t.Errorf("restart moved the servers: %s %s, were %s %s", e2.MetaAddr(), e2.StoreAddr(), metaAddr, storeAddr)
	}
	cfg := e2.Config()
	if cfg.Durability != "async" || cfg.Store[0].Backend != "mem" || cfg.Store[0].MemLimit != 64<<20 {
		t.Errorf("restart lost settings: durability %q backend %q mem_limit %d",
			cfg.Durability, cfg.Store[0].Backend, cfg.Store[0].MemLimit)
	}
	if !reachable(t, cfg, metaAddr) {
		t.Error("meta server does not answer after restart")
	}
}

func TestEmbeddedCloseFreesPorts(t *testing.T) {
	e, err := StartEmbedded(context.Background(), EmbeddedOptions{Dir: t.TempDir(), MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addrs := []string{e.MetaAddr(), e.StoreAddr(), e.MetricsAddr()}
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s still in use after Close: %v", addr, err)
			continue
		}
		ln.Close()
	}
}

func TestEmbeddedMetrics(t *testing.T) {
	e := startEmbedded(t, EmbeddedOptions{Dir: t.TempDir(), MetricsAddr: "127.0.0.1:0"})
	if !reachable(t, e.Config(), e.MetaAddr()) || !reachable(t, e.Config(), e.StoreAddr()) {
		t.Fatal("servers do not answer")
	}
	resp, err := http.Get("http://" + e.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"go_goroutines", "process_start_time_seconds"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cfg, err := config.Load(e.ClusterFile())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Meta[0].MetricsAddr != e.MetricsAddr() {
		t.Errorf("file records metrics_addr %q, serving at %q", cfg.Meta[0].MetricsAddr, e.MetricsAddr())
	}
}

func TestEmbeddedRefusesBackendChange(t *testing.T) {
	dir := t.TempDir()
	e, err := StartEmbedded(context.Background(), EmbeddedOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	_, err = StartEmbedded(context.Background(), EmbeddedOptions{Dir: dir, Backend: "mem"})
	if !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "created with the disk backend") {
		t.Errorf("backend change: %v", err)
	}
}

func TestEmbeddedRefusesMultiServerFile(t *testing.T) {
	dir := t.TempDir()
	c := config.Default()
	c.Meta = []config.MetaServer{config.DefaultMetaServer("127.0.0.1:7000", "m0"), config.DefaultMetaServer("127.0.0.1:7001", "m1")}
	c.Store = []config.StoreServer{config.DefaultStoreServer("127.0.0.1:7100", "s0")}
	if err := c.Write(filepath.Join(dir, ClusterFileName)); err != nil {
		t.Fatal(err)
	}
	_, err := StartEmbedded(context.Background(), EmbeddedOptions{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "not an embedded cluster") {
		t.Errorf("StartEmbedded on a 2-meta file: %v", err)
	}
}

func TestEmbeddedBadOptions(t *testing.T) {
	if _, err := StartEmbedded(context.Background(), EmbeddedOptions{}); !errs.Is(err, errs.Invalid) {
		t.Errorf("no dir: %v", err)
	}
	dir := t.TempDir()
	_, err := StartEmbedded(context.Background(), EmbeddedOptions{Dir: dir, Durability: "later"})
	if !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "durability") {
		t.Errorf("bad durability: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ClusterFileName)); !os.IsNotExist(err) {
		t.Errorf("a failed first start wrote a cluster file: %v", err)
	}
}

// TestStartFromClusterFile runs separately started meta and store servers the
// way weft meta and weft store do.
func TestStartFromClusterFile(t *testing.T) {
	dir := t.TempDir()
	metaLn := listenLoopback(t)
	storeLn := listenLoopback(t)
	cfg := config.Default()
	cfg.Meta = []config.MetaServer{config.DefaultMetaServer(metaLn.Addr().String(), filepath.Join(dir, "m0"))}
	cfg.Store = []config.StoreServer{config.DefaultStoreServer(storeLn.Addr().String(), "")}
	ctx := context.Background()

	m, err := StartMeta(ctx, cfg, 0, Options{Listener: metaLn, MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if m.Addr() != metaLn.Addr().String() || !reachable(t, cfg, m.Addr()) {
		t.Errorf("meta server not serving at %s", metaLn.Addr())
	}
	if m.MetricsAddr() == "" || m.Registry() == nil {
		t.Error("meta server has no metrics")
	}

	// The store's dir comes from the command line here.
	s, err := StartStore(ctx, cfg, 0, Options{Listener: storeLn, Dir: filepath.Join(dir, "s0")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if !reachable(t, cfg, s.Addr()) {
		t.Errorf("store server not serving at %s", s.Addr())
	}
	if s.MetricsAddr() != "" {
		t.Errorf("store serves metrics at %q without being asked", s.MetricsAddr())
	}
}

func TestStartErrors(t *testing.T) {
	cfg := config.Default()
	cfg.Meta = []config.MetaServer{config.DefaultMetaServer("127.0.0.1:7000", "")}
	cfg.Store = []config.StoreServer{config.DefaultStoreServer("127.0.0.1:7100", "")}
	ctx := context.Background()
	if _, err := StartMeta(ctx, cfg, 1, Options{}); !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "meta servers 0..0") {
		t.Errorf("meta id out of range: %v", err)
	}
	if _, err := StartStore(ctx, cfg, -1, Options{}); !errs.Is(err, errs.Invalid) {
		t.Errorf("store id out of range: %v", err)
	}
	if _, err := StartMeta(ctx, cfg, 0, Options{}); !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "meta[0].dir is empty") {
		t.Errorf("meta without dir: %v", err)
	}
	if _, err := StartStore(ctx, cfg, 0, Options{}); !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "store[0].dir is empty") {
		t.Errorf("disk store without dir: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := StartMeta(canceled, cfg, 0, Options{Dir: t.TempDir()}); !errs.Is(err, errs.Canceled) {
		t.Errorf("canceled start: %v", err)
	}
	// An address in use fails the start and leaves nothing behind.
	busy := listenLoopback(t)
	cfg.Meta[0].Addr = busy.Addr().String()
	dir := t.TempDir()
	if _, err := StartMeta(ctx, cfg, 0, Options{Dir: dir}); !errs.Is(err, errs.Busy) {
		t.Errorf("address in use: %v", err)
	}
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
