package client_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
)

// leasesExpired is how many recalled leases cfg's meta servers took back
// at the end of their term instead of a release (Client.LeasesExpired).
func leasesExpired(t *testing.T, cfg *config.Cluster) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := newClientOf(t, cfg, false).LeasesExpired(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// newTestClient starts a real embedded cluster (Pebble and chunk files in a
// temp dir, loopback TCP) and returns a root client of it with a small chunk
// size, so that multi-chunk paths run on small files.
func newTestClient(t testing.TB, chunkSize int64) *client.Client {
	return newTestClientBackend(t, chunkSize, "")
}

// newTestClientBackend is newTestClient with the store's backend ("disk",
// "mem"; "" is the default).
func newTestClientBackend(t testing.TB, chunkSize int64, backend string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	emb, err := cluster.StartEmbedded(ctx, cluster.EmbeddedOptions{Dir: t.TempDir(), Backend: backend})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() { emb.Close() })
	cc := cluster.ClientConfig(emb.Config(), core.Root, nil)
	cc.ChunkSize = chunkSize
	c, err := client.New(cc)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newMultiClient starts metas meta servers (GIGA+ with the given split
// threshold, and splitBits levels per split; 0 is the default) and one
// store, each on its own loopback port in this process, and returns a root
// client that knows all of them.
func newMultiClient(t testing.TB, metas, threshold, splitBits int, chunkSize int64) (*client.Client, *config.Cluster) {
	t.Helper()
	cfg := startServers(t, metas, func(cfg *config.Cluster) {
		cfg.SplitThreshold = threshold
		if splitBits > 0 {
			cfg.SplitBits = splitBits
		}
	})
	cc := cluster.ClientConfig(cfg, core.Root, nil)
	cc.ChunkSize = chunkSize
	c, err := client.New(cc)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, cfg
}

// startServers starts metas meta servers and one store, each on its own
// loopback port in this process, with the default cluster settings as tune
// changes them, and returns the cluster's configuration. Everything stops
// by t.Cleanup.
func startServers(t testing.TB, metas int, tune func(*config.Cluster)) *config.Cluster {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	tune(cfg)
	var lns []net.Listener
	for i := range metas {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		cfg.Meta = append(cfg.Meta, config.DefaultMetaServer(ln.Addr().String(), filepath.Join(dir, fmt.Sprintf("meta%d", i))))
	}
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = []config.StoreServer{config.DefaultStoreServer(sln.Addr().String(), filepath.Join(dir, "store0"))}
	ctx := context.Background()
	for i := range metas {
		m, err := cluster.StartMeta(ctx, cfg, i, cluster.Options{Listener: lns[i]})
		if err != nil {
			t.Fatalf("start meta %d: %v", i, err)
		}
		t.Cleanup(func() { m.Close() })
	}
	s, err := cluster.StartStore(ctx, cfg, 0, cluster.Options{Listener: sln})
	if err != nil {
		t.Fatalf("start store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return cfg
}
