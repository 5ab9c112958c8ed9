package fsck

import (
	"bytes"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/proto/weftpb"
)

// putChunk writes a chunk straight to the store, as a client that died
// before its commit (or a lost reclaim) leaves one.
func (tc *testCluster) putChunk(ino core.Ino, index uint64, data []byte) {
	tc.t.Helper()
	p := rpc.NewPeer(tc.cfg.Store[0].Addr, rpc.DialOptions{})
	defer p.Close()
	req := &weftpb.WriteChunkRequest{Chunk: &weftpb.ChunkID{Ino: uint64(ino), Index: index}, Sync: true}
	if _, err := p.CallData(ctx, weftpb.MethodWriteChunk, req, data, &weftpb.WriteChunkReply{}); err != nil {
		tc.t.Fatalf("write chunk: %v", err)
	}
}

func (tc *testCluster) gc(dryRun bool, now time.Time) *GCReport {
	tc.t.Helper()
	c, err := Connect(ctx, tc.cfg, 15*time.Second)
	if err != nil {
		tc.t.Fatalf("connect: %v", err)
	}
	defer c.Close()
	r, err := GC(ctx, c, GCOptions{DryRun: dryRun, ChunkSize: int64(tc.cfg.ChunkSize), Now: func() time.Time { return now }})
	if err != nil {
		tc.t.Fatalf("gc: %v", err)
	}
	return r
}

// TestGCDeletesOrphansOnly: gc deletes the chunks of an inode no meta server
// knows and a live file's chunks past its end, after the grace period only
// and not in a dry run, and keeps every byte of the live files.
func TestGCDeletesOrphansOnly(t *testing.T) {
	tc := newTestCluster(t, 2, 4000)
	c := tc.client()
	data := bytes.Repeat([]byte("gc keeps me "), 500_000) // 6 MB: 2 chunks
	if _, err := c.WriteFrom(ctx, "/live", bytes.NewReader(data), 0o644, nil); err != nil {
		t.Fatal(err)
	}
	a, err := c.Stat(ctx, "/live")
	if err != nil {
		t.Fatal(err)
	}
	dead := core.Ino(1<<40 + 12345)
	tc.putChunk(dead, 0, []byte("leaked"))
	tc.putChunk(dead, 3, []byte("leaked too"))
	tc.putChunk(a.Ino, 7, []byte("past the end"))

	if r := tc.gc(false, time.Now()); r.Orphans != 0 || r.Young != 3 || r.Reclaimed != 0 {
		t.Fatalf("within the grace period: %+v, want 3 young chunks left alone", r)
	}
	later := time.Now().Add(time.Hour)
	if r := tc.gc(true, later); r.Orphans != 3 || r.Reclaimed != 0 {
		t.Fatalf("dry run: %+v, want 3 orphans, none deleted", r)
	}
	if r := tc.gc(false, later); r.Orphans != 3 || r.Reclaimed != 3 || len(r.Errors) != 0 {
		t.Fatalf("gc: %+v, want 3 orphans deleted", r)
	}
	if r := tc.gc(true, later); r.Orphans != 0 || r.Chunks != 2 {
		t.Fatalf("after gc: %+v, want the live file's 2 chunks and nothing else", r)
	}
	var got bytes.Buffer
	if _, err := c.ReadTo(ctx, "/live", &got, nil); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("live file after gc: %v, equal %v", err, bytes.Equal(got.Bytes(), data))
	}
}

// TestGCLeavesHeldFilesAlone: the chunks of a file unlinked while open are
// no orphans while its reclaim is held, and --release-held lets a held
// record older than its age go to the reclaimer.
func TestGCLeavesHeldFilesAlone(t *testing.T) {
	tc := newTestCluster(t, 1, 4000)
	c := tc.client()
	data := bytes.Repeat([]byte("held "), 1_000_000)
	if _, err := c.WriteFrom(ctx, "/open", bytes.NewReader(data), 0o644, nil); err != nil {
		t.Fatal(err)
	}
	f, err := c.Open(ctx, "/open", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := c.Unlink(ctx, "/open"); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	r := tc.gc(false, later)
	if r.Orphans != 0 || r.HeldReclaims != 1 || r.Chunks == 0 {
		t.Fatalf("gc with an open-unlinked file: %+v, want its chunks kept under 1 held reclaim", r)
	}
	cl, err := Connect(ctx, tc.cfg, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r, err = GC(ctx, cl, GCOptions{ChunkSize: int64(tc.cfg.ChunkSize), ReleaseHeld: time.Minute, Now: func() time.Time { return later }})
	if err != nil || r.Released != 1 {
		t.Fatalf("release held: %+v, %v", r, err)
	}
	waitfor.Until(t, 20*time.Second, "the released reclaim deletes the chunks", func() bool { return tc.gc(true, later).Chunks == 0 })
}
