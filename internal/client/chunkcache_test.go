package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
)

// cacheChunk is the chunk size of the chunk cache's tests: a file of a
// few chunks is a few hundred KiB.
const cacheChunk = 64 << 10

// cacheClient is a root client of cfg with the test chunk size and a chunk
// cache of limit bytes (0: the default).
func cacheClient(t *testing.T, cfg *config.Cluster, limit int64) *client.Client {
	t.Helper()
	cc := cluster.ClientConfig(cfg, core.Root, nil)
	cc.ChunkSize, cc.ReadCache = cacheChunk, limit
	c, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// putFile writes data as path (created or truncated) and closes it.
func putFile(t *testing.T, ctx context.Context, c *client.Client, path string, data []byte) {
	t.Helper()
	f, err := c.Open(ctx, path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// getFile opens path, reads it whole and closes it.
func getFile(t *testing.T, ctx context.Context, c *client.Client, path string) []byte {
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

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestChunkCacheServesRereads: a file read a second time, unchanged, comes
// from the chunk cache, whole and right.
func TestChunkCacheServesRereads(t *testing.T) {
	ctx := testContext(t)
	cfg := startServers(t, 1, func(*config.Cluster) {})
	c := cacheClient(t, cfg, 0)
	data := randomBytes(t, 3*cacheChunk+100)
	putFile(t, ctx, c, "/f", data)

	if got := getFile(t, ctx, c, "/f"); !bytes.Equal(got, data) {
		t.Fatal("first read: wrong bytes")
	}
	before := c.ChunkCacheStats()
	if before.Chunks != 4 {
		t.Fatalf("after one read the cache holds %d chunks; want the file's 4", before.Chunks)
	}
	if got := getFile(t, ctx, c, "/f"); !bytes.Equal(got, data) {
		t.Fatal("second read: wrong bytes")
	}
	if hits := c.ChunkCacheStats().Hits - before.Hits; hits != 4 {
		t.Fatalf("the second read took %d chunks from the cache; want 4", hits)
	}
	// A random read (ReadAt, not streaming) uses it too.
	f, err := c.Open(ctx, "/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := make([]byte, 1000)
	if _, err := f.ReadAt(p, 2*cacheChunk-500); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, data[2*cacheChunk-500:2*cacheChunk+500]) {
		t.Fatal("ReadAt across two cached chunks: wrong bytes")
	}
}

// TestChunkCacheSeesAnotherClientsWrite: another client rewrites the file
// with other bytes of the same size and sets its mtime back to what it
// was; a reader that cached the old content opens the file again and reads
// the new bytes (the server's ctime tells the versions apart).
func TestChunkCacheSeesAnotherClientsWrite(t *testing.T) {
	ctx := testContext(t)
	cfg := startServers(t, 1, func(*config.Cluster) {})
	reader, writer := cacheClient(t, cfg, 0), cacheClient(t, cfg, 0)
	old := randomBytes(t, 2*cacheChunk)
	putFile(t, ctx, writer, "/f", old)
	a, err := writer.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if got := getFile(t, ctx, reader, "/f"); !bytes.Equal(got, old) {
		t.Fatal("first read: wrong bytes")
	}

	fresh := randomBytes(t, len(old))
	f, err := writer.Open(ctx, "/f", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(fresh, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := writer.Chtimes(ctx, "/f", a.Atime, a.Mtime); err != nil {
		t.Fatal(err)
	}
	b, err := writer.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if b.Size != a.Size || !b.Mtime.Equal(a.Mtime) {
		t.Fatalf("the rewrite left size %d mtime %v; the test wants %d %v", b.Size, b.Mtime, a.Size, a.Mtime)
	}
	if got := getFile(t, ctx, reader, "/f"); !bytes.Equal(got, fresh) {
		t.Fatal("the reader was served the content it cached before another client's rewrite")
	}
}

// TestChunkCacheOpenFileFollowsRecall: with leases, a file kept open by the
// reader reads another client's closed rewrite at its next read: the
// recall marks it stale (as the FUSE layer does), and the refresh takes a
// version the cached chunks are not of.
func TestChunkCacheOpenFileFollowsRecall(t *testing.T) {
	ctx := testContext(t)
	cfg := startServers(t, 1, func(*config.Cluster) {})
	reader, writer := cacheClient(t, cfg, 0), cacheClient(t, cfg, 0)
	old := randomBytes(t, 2*cacheChunk)
	putFile(t, ctx, writer, "/f", old)
	var ino core.Ino
	reader.OnRecall(func([]client.LeaseKey) { reader.MarkStale(ino) })
	if got := getFile(t, ctx, reader, "/f"); !bytes.Equal(got, old) {
		t.Fatal("first read: wrong bytes")
	}
	f, err := reader.Open(ctx, "/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ino = f.Ino()
	p := make([]byte, len(old))
	if _, err := f.ReadAt(p, 0); err != nil || !bytes.Equal(p, old) {
		t.Fatalf("read of the open file: %v, or wrong bytes", err)
	}

	fresh := randomBytes(t, len(old))
	w, err := writer.Open(ctx, "/f", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(fresh, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, fresh) {
		t.Fatal("the open file was served the content cached before another client's closed rewrite")
	}
}

// TestChunkCacheOwnChanges: the reader's own changes to a cached file
// (a truncate and regrowth, which reads as zeros; a write) are what it
// reads next, on the same handle and after a new open.
func TestChunkCacheOwnChanges(t *testing.T) {
	ctx := testContext(t)
	cfg := startServers(t, 1, func(*config.Cluster) {})
	c := cacheClient(t, cfg, 0)
	data := randomBytes(t, 2*cacheChunk)
	putFile(t, ctx, c, "/f", data)
	if got := getFile(t, ctx, c, "/f"); !bytes.Equal(got, data) {
		t.Fatal("first read: wrong bytes")
	}

	f, err := c.Open(ctx, "/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, size := range []int64{0, int64(len(data))} {
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
	}
	p := make([]byte, len(data))
	if _, err := f.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, make([]byte, len(data))) {
		t.Fatal("after a truncate to 0 and back the handle read the cached content, not zeros")
	}
	if got := getFile(t, ctx, c, "/f"); !bytes.Equal(got, make([]byte, len(data))) {
		t.Fatal("after a truncate to 0 and back a new open read the cached content, not zeros")
	}

	fresh := randomBytes(t, cacheChunk)
	if _, err := f.WriteAt(fresh, cacheChunk); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := append(make([]byte, cacheChunk), fresh...)
	if got := getFile(t, ctx, c, "/f"); !bytes.Equal(got, want) {
		t.Fatal("after its own write the client read other bytes")
	}
}

// TestChunkCacheBound: reading more than the cache holds keeps it within
// its bound, and a cache turned off keeps nothing.
func TestChunkCacheBound(t *testing.T) {
	ctx := testContext(t)
	cfg := startServers(t, 1, func(*config.Cluster) {})
	c := cacheClient(t, cfg, 3*cacheChunk)
	off := cacheClient(t, cfg, -1)
	data := randomBytes(t, 8*cacheChunk)
	putFile(t, ctx, c, "/f", data)
	for range 2 {
		if got := getFile(t, ctx, c, "/f"); !bytes.Equal(got, data) {
			t.Fatal("wrong bytes")
		}
		if s := c.ChunkCacheStats(); s.Bytes > 3*cacheChunk || s.Chunks != 3 {
			t.Fatalf("cache of 3 chunks holds %d bytes in %d chunks", s.Bytes, s.Chunks)
		}
		if got := getFile(t, ctx, off, "/f"); !bytes.Equal(got, data) {
			t.Fatal("wrong bytes without a cache")
		}
		if s := off.ChunkCacheStats(); s != (client.ChunkCacheStats{}) {
			t.Fatalf("a client without a cache reports %+v", s)
		}
	}
}
