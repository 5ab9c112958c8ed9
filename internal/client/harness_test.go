package client_test

import (
	"context"
	"testing"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
)

// newTestClient starts a real embedded cluster (Pebble and chunk files in a
// temp dir, loopback TCP) and returns a root client of it with a small chunk
// size, so that multi-chunk paths run on small files.
func newTestClient(t testing.TB, chunkSize int64) *client.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	emb, err := cluster.StartEmbedded(ctx, cluster.EmbeddedOptions{Dir: t.TempDir()})
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
