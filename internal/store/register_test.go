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
	if _, err := c.CallData(ctx, weftpb.MethodWriteChunk, &weftpb.WriteChunkRequest{Chunk: cid(1, 2), Offset: 10, Sync: true}, data, &weftpb.WriteChunkReply{}); err != nil {
		t.Fatalf("write: %v", err)
	}
	var rr weftpb.ReadChunkReply
	got, err := c.CallData(ctx, weftpb.MethodReadChunk, &weftpb.ReadChunkRequest{Chunk: cid(1, 2), Offset: 10, Length: 1 << 20}, nil, &rr)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	wantBytes(t, "read over tcp", got, data)
	if len(rr.Data) != 0 {
		t.Fatalf("the reply's proto carries %d bytes besides the attachment", len(rr.Data))
	}
	// A plain Call of ReadChunk cannot take the attachment.
	err = c.Call(ctx, weftpb.MethodReadChunk, &weftpb.ReadChunkRequest{Chunk: cid(1, 2), Length: 100}, &rr)
	wantKind(t, "read with Call", err, errs.Protocol)
	// Data in the proto field (an older caller) still writes.
	if err := c.Call(ctx, weftpb.MethodWriteChunk, &weftpb.WriteChunkRequest{Chunk: cid(1, 2), Offset: 14, Data: []byte("WEFT")}, &weftpb.WriteChunkReply{}); err != nil {
		t.Fatalf("write with proto data: %v", err)
	}
	_, err = c.CallData(ctx, weftpb.MethodWriteChunk, &weftpb.WriteChunkRequest{Chunk: cid(1, 2), Data: []byte("x")}, []byte("y"), &weftpb.WriteChunkReply{})
	wantKind(t, "data in both places", err, errs.Invalid)
	if err := c.Call(ctx, weftpb.MethodTruncateChunk, &weftpb.TruncateChunkRequest{Chunk: cid(1, 2), Size: 18}, &weftpb.TruncateChunkReply{}); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	if got, err := c.CallData(ctx, weftpb.MethodReadChunk, &weftpb.ReadChunkRequest{Chunk: cid(1, 2), Length: 100}, nil, &rr); err != nil || string(got) != "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00weftWEFT" {
		t.Fatalf("read after truncate: %q, %v", got, err)
	}
	if err := c.Call(ctx, weftpb.MethodSyncChunks, &weftpb.SyncChunksRequest{Ino: 1}, &weftpb.SyncChunksReply{}); err != nil {
		t.Fatalf("sync: %v", err)
	}
	var st weftpb.StoreStatFSReply
	if err := c.Call(ctx, weftpb.MethodStoreStatFS, &weftpb.StoreStatFSRequest{}, &st); err != nil || st.Chunks != 1 || st.Used != 18 || st.Capacity != 4<<20 || st.Id == "" || st.Incomplete {
		t.Fatalf("statfs: %v, %v", &st, err)
	}
	if !rr.Found || rr.ChunkSize != 18 || rr.Version != 3 { // 2 writes, a truncate
		t.Fatalf("read reply over tcp: %v", &rr)
	}
	var lr weftpb.ListChunksReply
	if err := c.Call(ctx, weftpb.MethodListChunks, &weftpb.ListChunksRequest{}, &lr); err != nil || len(lr.Chunks) != 1 || lr.Chunks[0].Version != 3 || lr.Chunks[0].Size != 18 {
		t.Fatalf("list: %v, %v", &lr, err)
	}
	err = c.Call(ctx, weftpb.MethodMarkStoreComplete, &weftpb.MarkStoreCompleteRequest{Id: "other"}, &weftpb.MarkStoreCompleteReply{})
	wantKind(t, "mark complete with another id", err, errs.Stale)
	if err := c.Call(ctx, weftpb.MethodMarkStoreComplete, &weftpb.MarkStoreCompleteRequest{Id: st.Id}, &weftpb.MarkStoreCompleteReply{}); err != nil {
		t.Fatalf("mark complete: %v", err)
	}

	// Errors keep their kind and message across the wire.
	_, err = c.CallData(ctx, weftpb.MethodWriteChunk, &weftpb.WriteChunkRequest{}, []byte("x"), &weftpb.WriteChunkReply{})
	wantKind(t, "write without a chunk id", err, errs.Invalid)
	s.backend.(*memBackend).flipByte(ChunkKey{1, 2}, 3)
	_, err = c.CallData(ctx, weftpb.MethodReadChunk, &weftpb.ReadChunkRequest{Chunk: cid(1, 2), Length: 100}, nil, &rr)
	wantKind(t, "corrupt read", err, errs.Corrupt)
	if !strings.Contains(err.Error(), "1/2") {
		t.Fatalf("corrupt error %q does not name the chunk", err)
	}

	var dr weftpb.DeleteChunksReply
	if err := c.Call(ctx, weftpb.MethodDeleteChunks, &weftpb.DeleteChunksRequest{Ino: 1}, &dr); err != nil || dr.Deleted != 1 {
		t.Fatalf("delete: %d, %v", dr.Deleted, err)
	}
}

// TestPooledReadsNeverLeak reads through pooled buffers after larger reads
// have filled them: a short chunk, a hole and an unaligned range must come
// back exact, with no byte of what the buffer held before.
func TestPooledReadsNeverLeak(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		big := []byte(strings.Repeat("x", 1<<20))
		mustWrite(t, s, 7, 0, 0, big)
		wantBytes(t, "big", mustRead(t, s, 7, 0, 0, 1<<20), big)
		mustWrite(t, s, 7, 1, 0, []byte(strings.Repeat("y", 1000)))
		wantBytes(t, "short chunk", mustRead(t, s, 7, 1, 0, 1<<20), []byte(strings.Repeat("y", 1000)))
		mustWrite(t, s, 7, 2, 3*DefaultBlockSize, []byte("z"))
		want := append(make([]byte, 3*DefaultBlockSize-5), 'z')
		wantBytes(t, "over a hole", mustRead(t, s, 7, 2, 5, 1<<20), want)
		wantBytes(t, "unaligned", mustRead(t, s, 7, 0, DefaultBlockSize-3, 7), []byte("xxxxxxx"))
		if got := mustRead(t, s, 7, 3, 0, 1<<20); len(got) != 0 {
			t.Fatalf("missing chunk read %d bytes", len(got))
		}
	})
}
