package store

import (
	"context"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// localIO runs a same-host request on f as the socket would hand it over.
func localIO(t testing.TB, s *Server, req *weftpb.LocalIORequest, f *os.File) (int64, error) {
	t.Helper()
	msg, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	r := s.handleLocal(msg, int(f.Fd()), rpc.PeerCred{}).(*weftpb.LocalIOReply)
	if r.Error != "" {
		return 0, &errs.Error{Kind: errs.Kind(r.ErrorKind), Msg: r.Error}
	}
	return r.Length, nil
}

func tempFile(t *testing.T, name string, data []byte, flag int) *os.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, flag, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func fileBytes(t *testing.T, f *os.File) []byte {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSameHostCopies moves bytes between files and chunks as the same-host
// path does and reads them back the wire's way.
func TestSameHostCopies(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		r := rand.New(rand.NewPCG(7, 8))
		src := randBytes(r, 3*DefaultBlockSize+777)
		in := tempFile(t, "src", src, os.O_RDONLY)

		// File bytes [100, end) into chunk 9/2 at offset 50.
		n, err := localIO(t, s, &weftpb.LocalIORequest{Write: true, Chunk: cid(9, 2), Offset: 50, Length: int64(len(src) - 100), FileOffset: 100}, in)
		if err != nil || n != int64(len(src)-100) {
			t.Fatalf("write from file: %d, %v", n, err)
		}
		want := append(make([]byte, 50), src[100:]...)
		wantBytes(t, "chunk written from a file", mustRead(t, s, 9, 2, 0, 1<<20), want)

		// Chunk bytes [10, 10+2 blocks) into a file at offset 5000, behind
		// bytes that must stay.
		out := tempFile(t, "dst", []byte("keep"), os.O_RDWR)
		n, err = localIO(t, s, &weftpb.LocalIORequest{Chunk: cid(9, 2), Offset: 10, Length: 2 * DefaultBlockSize, FileOffset: 5000}, out)
		if err != nil || n != 2*DefaultBlockSize {
			t.Fatalf("read to file: %d, %v", n, err)
		}
		got := fileBytes(t, out)
		wantBytes(t, "file head", got[:4], []byte("keep"))
		wantBytes(t, "file written from a chunk", got[5000:], want[10:10+2*DefaultBlockSize])

		// Past the chunk's end the read is short; a missing chunk reads
		// nothing and leaves the file alone.
		n, err = localIO(t, s, &weftpb.LocalIORequest{Chunk: cid(9, 2), Offset: int64(len(want) - 3), Length: 100}, out)
		if err != nil || n != 3 {
			t.Fatalf("read at the chunk's end: %d, %v; want 3 bytes", n, err)
		}
		before := fileBytes(t, out)
		n, err = localIO(t, s, &weftpb.LocalIORequest{Chunk: cid(9, 3), Length: 100, FileOffset: 1 << 20}, out)
		if err != nil || n != 0 {
			t.Fatalf("read of a missing chunk: %d, %v", n, err)
		}
		wantBytes(t, "file after reading a hole", fileBytes(t, out), before)
	})
}

// TestSameHostRefuses sends requests the store must refuse, and checks each
// changed nothing.
func TestSameHostRefuses(t *testing.T) {
	s := openStore(t, Config{Backend: "disk", Dir: t.TempDir()})
	src := tempFile(t, "src", make([]byte, 1000), os.O_RDONLY)
	wonly := tempFile(t, "wonly", nil, os.O_WRONLY)
	appendOnly := tempFile(t, "append", nil, os.O_WRONLY|os.O_APPEND)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	mustWrite(t, s, 5, 0, 0, []byte("chunk"))

	for _, c := range []struct {
		what string
		req  *weftpb.LocalIORequest
		f    *os.File
		want errs.Kind
	}{
		{"write from a pipe", &weftpb.LocalIORequest{Write: true, Chunk: cid(4, 0), Length: 10}, pr, errs.Invalid},
		{"write from a write-only file", &weftpb.LocalIORequest{Write: true, Chunk: cid(4, 0), Length: 10}, wonly, errs.BadHandle},
		{"write past the source's end", &weftpb.LocalIORequest{Write: true, Chunk: cid(4, 0), Length: 1001}, src, errs.Invalid},
		{"write of a negative length", &weftpb.LocalIORequest{Write: true, Chunk: cid(4, 0), Length: -1}, src, errs.Invalid},
		{"write from a negative offset", &weftpb.LocalIORequest{Write: true, Chunk: cid(4, 0), Length: 1, FileOffset: -1}, src, errs.Invalid},
		{"write beyond the largest chunk", &weftpb.LocalIORequest{Write: true, Chunk: cid(4, 0), Offset: DefaultMaxChunkSize, Length: 1}, src, errs.Invalid},
		{"write without a chunk", &weftpb.LocalIORequest{Write: true, Length: 1}, src, errs.Invalid},
		{"read into a read-only file", &weftpb.LocalIORequest{Chunk: cid(5, 0), Length: 5}, src, errs.BadHandle},
		{"read into an appending file", &weftpb.LocalIORequest{Chunk: cid(5, 0), Length: 5}, appendOnly, errs.Invalid},
		{"read into a pipe", &weftpb.LocalIORequest{Chunk: cid(5, 0), Length: 5}, pw, errs.Invalid},
		{"read at a negative file offset", &weftpb.LocalIORequest{Chunk: cid(5, 0), Length: 5, FileOffset: -1}, wonly, errs.Invalid},
	} {
		_, err := localIO(t, s, c.req, c.f)
		wantKind(t, c.what, err, c.want)
	}
	if n := chunkCount(t, s); n != 1 {
		t.Fatalf("refused writes left %d chunks, want 1", n)
	}
	for _, f := range []*os.File{wonly, appendOnly} {
		if b := fileBytes(t, f); len(b) != 0 {
			t.Fatalf("refused reads wrote %d bytes into %s", len(b), f.Name())
		}
	}
	r := s.handleLocal([]byte{0xff, 0xff, 0xff}, int(src.Fd()), rpc.PeerCred{}).(*weftpb.LocalIOReply)
	wantKind(t, "garbage message", &errs.Error{Kind: errs.Kind(r.ErrorKind), Msg: r.Error}, errs.Protocol)
}

// TestSameHostCorruptChunk: a chunk that fails its checksum is reported,
// and none of it reaches the client's file.
func TestSameHostCorruptChunk(t *testing.T) {
	s, _ := diskStore(t, t.TempDir())
	data := randBytes(rand.New(rand.NewPCG(1, 2)), 2*DefaultBlockSize)
	mustWrite(t, s, 3, 1, 0, data)
	flipOnDisk(t, s, ChunkKey{3, 1}, DefaultBlockSize+5)
	out := tempFile(t, "dst", nil, os.O_RDWR)
	_, err := localIO(t, s, &weftpb.LocalIORequest{Chunk: cid(3, 1), Length: int64(len(data))}, out)
	wantKind(t, "read of a corrupt chunk", err, errs.Corrupt)
	if b := fileBytes(t, out); len(b) != 0 {
		t.Fatalf("a corrupt read wrote %d bytes into the client's file", len(b))
	}
}

// TestSameHostSocket runs the path end to end: the store's unix socket,
// a descriptor passed with each request, the metric.
func TestSameHostSocket(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := openStore(t, Config{Backend: "disk", Dir: t.TempDir(), Registry: reg})
	tcp, err := net.Listen("tcp", "127.0.0.1:0") // reserves the address the name is made of
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	addr := tcp.Addr().String()
	srv, err := s.ServeSameHost(rpc.SameHostName(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := rpc.DialSameHost(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	src := randBytes(rand.New(rand.NewPCG(3, 4)), 100_000)
	in := tempFile(t, "src", src, os.O_RDONLY)
	var r weftpb.LocalIOReply
	if err := conn.Call(ctx, &weftpb.LocalIORequest{Write: true, Chunk: cid(1, 0), Length: int64(len(src))}, in.Fd(), &r); err != nil || r.Error != "" {
		t.Fatalf("write: %v %q", err, r.Error)
	}
	out := tempFile(t, "dst", nil, os.O_RDWR)
	if err := conn.Call(ctx, &weftpb.LocalIORequest{Chunk: cid(1, 0), Length: 1 << 20}, out.Fd(), &r); err != nil || r.Error != "" || r.Length != int64(len(src)) {
		t.Fatalf("read: %d bytes, %v %q", r.Length, err, r.Error)
	}
	wantBytes(t, "round trip through the socket", fileBytes(t, out), src)
	if n := metricValue(t, reg, "weft_store_same_host_requests_total"); n != 2 {
		t.Fatalf("same-host requests counted %v, want 2", n)
	}
}
