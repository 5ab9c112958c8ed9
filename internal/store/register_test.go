package store

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestServeOverTCP runs every store method through the real transport on
// loopback, including a corrupt read whose kind and chunk id must reach the
// caller.
func TestServeOverTCP(t *testing.T) {
	s := openStore(t, Config{Backend: "mem", MemLimit: 4 << 20})
	mux := rpc.NewMux()
	s.Register(mux)
	srv := rpc.NewServer(mux, rpc.ServerOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, ln.Addr().String(), rpc.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	data := []byte(strings.Repeat("weft", 1<<16)) // 256 KiB: several blocks
	if err := c.Call(ctx, weftpb.MethodWriteChunk, &weftpb.WriteChunkRequest{Chunk: cid(1, 2), Offset: 10, Data: data, Sync: true}, &weftpb.WriteChunkReply{}); err != nil {
		t.Fatalf("write: %v", err)
	}
	var rr weftpb.ReadChunkReply
	if err := c.Call(ctx, weftpb.MethodReadChunk, &weftpb.ReadChunkRequest{Chunk: cid(1, 2), Offset: 10, Length: 1 << 20}, &rr); err != nil {
		t.Fatalf("read: %v", err)
	}
	wantBytes(t, "read over tcp", rr.Data, data)
	if err := c.Call(ctx, weftpb.MethodTruncateChunk, &weftpb.TruncateChunkRequest{Chunk: cid(1, 2), Size: 14}, &weftpb.TruncateChunkReply{}); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	if err := c.Call(ctx, weftpb.MethodReadChunk, &weftpb.ReadChunkRequest{Chunk: cid(1, 2), Length: 100}, &rr); err != nil || string(rr.Data) != "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00weft" {
		t.Fatalf("read after truncate: %q, %v", rr.Data, err)
	}
	if err := c.Call(ctx, weftpb.MethodSyncChunks, &weftpb.SyncChunksRequest{Ino: 1}, &weftpb.SyncChunksReply{}); err != nil {
		t.Fatalf("sync: %v", err)
	}
	var st weftpb.StoreStatFSReply
	if err := c.Call(ctx, weftpb.MethodStoreStatFS, &weftpb.StoreStatFSRequest{}, &st); err != nil || st.Chunks != 1 || st.Used != 14 || st.Capacity != 4<<20 {
		t.Fatalf("statfs: %v, %v", &st, err)
	}

	// Errors keep their kind and message across the wire.
	err = c.Call(ctx, weftpb.MethodWriteChunk, &weftpb.WriteChunkRequest{Data: []byte("x")}, &weftpb.WriteChunkReply{})
	wantKind(t, "write without a chunk id", err, errs.Invalid)
	s.backend.(*memBackend).flipByte(ChunkKey{1, 2}, 3)
	err = c.Call(ctx, weftpb.MethodReadChunk, &weftpb.ReadChunkRequest{Chunk: cid(1, 2), Length: 100}, &rr)
	wantKind(t, "corrupt read", err, errs.Corrupt)
	if !strings.Contains(err.Error(), "1/2") {
		t.Fatalf("corrupt error %q does not name the chunk", err)
	}

	var dr weftpb.DeleteChunksReply
	if err := c.Call(ctx, weftpb.MethodDeleteChunks, &weftpb.DeleteChunksRequest{Ino: 1}, &dr); err != nil || dr.Deleted != 1 {
		t.Fatalf("delete: %d, %v", dr.Deleted, err)
	}
}
