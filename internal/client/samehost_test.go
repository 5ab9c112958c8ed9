package client_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
)

// sameHostCluster starts an embedded cluster (disk store, small chunks) and
// returns it with a client that uses the same-host path and one that does
// not.
func sameHostCluster(t *testing.T) (*cluster.Embedded, *client.Client, *client.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	emb, err := cluster.StartEmbedded(ctx, cluster.EmbeddedOptions{Dir: t.TempDir(), Backend: "disk"})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() { emb.Close() })
	var cs []*client.Client
	for _, off := range []bool{false, true} {
		cc := cluster.ClientConfig(emb.Config(), core.Root, nil)
		cc.ChunkSize, cc.InlineLimit, cc.NoSameHost = copyChunk, 4096, off
		c, err := client.New(cc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return emb, cs[0], cs[1]
}

func sameHostRequests(t *testing.T, emb *cluster.Embedded) float64 {
	t.Helper()
	mfs, err := emb.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "weft_store_same_host_requests_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no same-host metric")
	return 0
}

func localFile(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "local")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSameHostPutGet copies local files in and out through the store's
// same-host path (checked by the store's counter), from and to offsets
// within the local files, and compares with what the wire path reads and
// writes.
func TestSameHostPutGet(t *testing.T) {
	emb, c, wire := sameHostCluster(t)
	ctx := context.Background()
	for i, n := range []int{4097, copyChunk, copyChunk + 1, 7*copyChunk/2 + 3} {
		data := pattern(n+10, byte(i))
		src, err := os.Open(localFile(t, data))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.Seek(10, io.SeekStart); err != nil { // put copies from the offset on
			t.Fatal(err)
		}
		before := sameHostRequests(t, emb)
		var reported int64
		wrote, err := c.WriteFrom(ctx, "/f", src, 0o644, func(k int64) { reported += k })
		pos, _ := src.Seek(0, io.SeekCurrent)
		src.Close()
		if err != nil || wrote != int64(n) || reported != int64(n) || pos != int64(n+10) {
			t.Fatalf("WriteFrom %d bytes: wrote %d, reported %d, source left at %d, %v", n, wrote, reported, pos, err)
		}
		var got bytes.Buffer
		if _, err := wire.ReadTo(ctx, "/f", &got, nil); err != nil || !bytes.Equal(got.Bytes(), data[10:]) {
			t.Fatalf("%d bytes put by the same-host path read back over the wire: equal %v, %v", n, bytes.Equal(got.Bytes(), data[10:]), err)
		}

		// Get into a file behind a head that must stay.
		dstPath := localFile(t, []byte("head"))
		dst, err := os.OpenFile(dstPath, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		dst.Seek(4, io.SeekStart)
		read, err := c.ReadTo(ctx, "/f", dst, nil)
		pos, _ = dst.Seek(0, io.SeekCurrent)
		dst.Close()
		out, _ := os.ReadFile(dstPath)
		if err != nil || read != int64(n) || pos != int64(n+4) || !bytes.Equal(out, append([]byte("head"), data[10:]...)) {
			t.Fatalf("ReadTo of %d bytes into a file: read %d, left at %d, equal %v, %v", n, read, pos, bytes.Equal(out[min(4, len(out)):], data[10:]), err)
		}
		after := sameHostRequests(t, emb)
		if chunks := float64(2 * ((n + copyChunk - 1) / copyChunk)); after-before != chunks {
			t.Fatalf("%d bytes in and out: %v same-host requests, want %v (one per chunk each way)", n, after-before, chunks)
		}
	}
}

// TestSameHostGetHoles reads a sparse file into a local file full of junk:
// the holes and the short last chunk must arrive as zeros.
func TestSameHostGetHoles(t *testing.T) {
	emb, c, _ := sameHostCluster(t)
	ctx := context.Background()
	want := writeSparse(t, c, "/holes")
	p := localFile(t, bytes.Repeat([]byte{0xAA}, len(want)))
	dst, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	before := sameHostRequests(t, emb)
	if _, err := c.ReadTo(ctx, "/holes", dst, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
		t.Fatalf("sparse file read into junk: %d bytes, equal %v", len(got), bytes.Equal(got, want))
	}
	if sameHostRequests(t, emb) == before {
		t.Fatal("the same-host path was not used")
	}
}

// TestSameHostLeavesOtherFiles: sources and destinations the store must not
// touch (a pipe, a file open for appending) go over the wire, with the same
// result.
func TestSameHostLeavesOtherFiles(t *testing.T) {
	emb, c, _ := sameHostCluster(t)
	ctx := context.Background()
	data := pattern(3*copyChunk+1, 3)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		pw.Write(data)
		pw.Close()
	}()
	if _, err := c.WriteFrom(ctx, "/piped", pr, 0o644, nil); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	p := localFile(t, []byte("head"))
	dst, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadTo(ctx, "/piped", dst, nil); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	if got, _ := os.ReadFile(p); !bytes.Equal(got, append([]byte("head"), data...)) {
		t.Fatalf("piped in, appended out: %d bytes, equal %v", len(got), bytes.Equal(got[min(4, len(got)):], data))
	}
	if n := sameHostRequests(t, emb); n != 0 {
		t.Fatalf("%v same-host requests for a pipe and an appending file", n)
	}
}
