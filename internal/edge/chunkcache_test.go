package edge_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
)

// TestEdgeSiteRereadsAreLocalAndCoherent: data does not go through the
// edge, so what a client at the edge's site reads again comes from its
// own chunk cache (client/chunkcache.go), not across the link. A rewrite
// at the upstream site (same size, mtime set back) is what that client
// reads next: at its next open, and on a file it keeps open, whose lease
// the rewrite recalls through the edge.
func TestEdgeSiteRereadsAreLocalAndCoherent(t *testing.T) {
	p := startUpstream(t, 1)
	e := startEdge(t, p.ClusterFile())
	ctx := testCtx(t, 90*time.Second)
	direct := newClient(t, p.Config())
	site := newClient(t, e.cfg)
	var ino core.Ino
	site.OnRecall(func([]client.LeaseKey) { site.MarkStale(ino) }) // as the FUSE layer does

	const size = 300 << 10 // past the inline limit
	old := randomData(t, size)
	writeAt(t, ctx, direct, "/f", old, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	a, err := direct.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if got := readWhole(t, ctx, site, "/f"); !bytes.Equal(got, old) {
			t.Fatalf("read %d at the edge site: wrong bytes", i)
		}
	}
	if site.ChunkCacheStats().Hits == 0 {
		t.Fatal("the second read at the edge site took nothing from the chunk cache")
	}

	held, err := site.Open(ctx, "/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	ino = held.Ino()
	buf := make([]byte, size)
	if _, err := held.ReadAt(buf, 0); err != nil || !bytes.Equal(buf, old) {
		t.Fatalf("read of the held file: %v, or wrong bytes", err)
	}

	fresh := randomData(t, size)
	writeAt(t, ctx, direct, "/f", fresh, os.O_WRONLY)
	if err := direct.Chtimes(ctx, "/f", a.Atime, a.Mtime); err != nil {
		t.Fatal(err)
	}
	if _, err := held.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, fresh) {
		t.Fatal("the file held open at the edge site read the bytes cached before the upstream rewrite")
	}
	if got := readWhole(t, ctx, site, "/f"); !bytes.Equal(got, fresh) {
		t.Fatal("a new open at the edge site read the bytes cached before the upstream rewrite")
	}
}

func randomData(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// writeAt opens path with flags, writes data at 0 and closes it.
func writeAt(t *testing.T, ctx context.Context, c *client.Client, path string, data []byte, flags int) {
	t.Helper()
	f, err := c.Open(ctx, path, flags, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readWhole(t *testing.T, ctx context.Context, c *client.Client, path string) []byte {
	t.Helper()
	f, err := c.Open(ctx, path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
