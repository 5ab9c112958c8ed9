package cluster

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"
	"time"
)

// TestFailedUploadIsNeverCommitted is issue 12 item 3: when uploads fail (a
// store killed mid-write), the error is sticky on the file (every later
// write, flush and close reports it) and nothing is committed after it: the
// file keeps its last committed size and content.
func TestFailedUploadIsNeverCommitted(t *testing.T) {
	p := startProcs(t, ProcsOptions{Dir: t.TempDir(), Meta: 1, Store: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c := newTestClient(t, p, true, nil)
	first := make([]byte, 2<<20)
	for i := range first {
		first[i] = byte(i*13) ^ byte(i>>9)
	}
	f, err := c.Create(ctx, "/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteContext(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := f.FlushContext(ctx); err != nil {
		t.Fatal(err)
	}

	if err := p.Kill(RoleStore, 0); err != nil {
		t.Fatal(err)
	}
	more := bytes.Repeat([]byte{0xAB}, 1<<20)
	var werr error
	for range 40 {
		if _, werr = f.WriteContext(ctx, more); werr != nil {
			break
		}
	}
	ferr := f.FlushContext(ctx)
	if werr == nil && ferr == nil {
		t.Fatal("40 MiB written and flushed to a killed store without an error")
	}
	// Sticky: every later write, flush and sync reports it, and so does close.
	if _, err := f.WriteContext(ctx, more); err == nil {
		t.Error("a write after the failed upload succeeded")
	}
	if err := f.FlushContext(ctx); err == nil {
		t.Error("a second flush after the failed upload succeeded")
	}
	if err := f.SyncContext(ctx); err == nil {
		t.Error("a sync after the failed upload succeeded")
	}
	if err := f.CloseContext(ctx); err == nil {
		t.Error("close after the failed upload succeeded")
	}

	if err := p.Restart(ctx, RoleStore, 0); err != nil {
		t.Fatal(err)
	}
	a, err := c.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != uint64(len(first)) {
		t.Fatalf("size %d after the failed upload, want the committed %d", a.Size, len(first))
	}
	g, err := c.Open(ctx, "/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	got, err := io.ReadAll(g)
	if err != nil || !bytes.Equal(got, first) {
		t.Fatalf("content after the failed upload: %d bytes, equal %v, %v", len(got), bytes.Equal(got, first), err)
	}
}
