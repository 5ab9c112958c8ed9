package store

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// readReply reads as the wire does and returns the reply with the bytes.
func readReply(s *Server, ino, idx uint64, off, n int64) (*weftpb.ReadChunkReply, []byte, error) {
	r, att, err := s.ReadChunkData(context.Background(), &weftpb.ReadChunkRequest{Chunk: cid(ino, idx), Offset: off, Length: n}, nil)
	if err != nil {
		return nil, nil, err
	}
	defer att.Release()
	return r, append([]byte(nil), att.Data...), nil
}

// TestDiskCutChunkIsLost is issue 12 item 1b: a chunk file cut at a block
// boundary below its written size (a lost tail) must read as errs.Lost, on
// every path, never as a short chunk that a client fills with zeros.
func TestDiskCutChunkIsLost(t *testing.T) {
	s, _ := diskStore(t, t.TempDir())
	data := randBytes(rand.New(rand.NewPCG(3, 4)), 4*DefaultBlockSize+300)
	mustWrite(t, s, 5, 2, 0, data)
	r, got, err := readReply(s, 5, 2, 0, 1<<20)
	if err != nil || !r.Found || r.ChunkSize != int64(len(data)) || r.Version == 0 {
		t.Fatalf("read before the cut: %v, %v", r, err)
	}
	wantBytes(t, "read before the cut", got, data)

	d := s.backend.(*diskBackend)
	if err := os.Truncate(d.chunkPath(ChunkKey{5, 2}), d.layout.dataOff+2*DefaultBlockSize); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ off, n int64 }{{0, 1 << 20}, {0, 100}, {3 * DefaultBlockSize, 100}} {
		_, _, err := readReply(s, 5, 2, c.off, c.n)
		wantKind(t, "wire read of a cut chunk", err, errs.Lost)
		_, err = s.ReadChunk(context.Background(), &weftpb.ReadChunkRequest{Chunk: cid(5, 2), Offset: c.off, Length: c.n})
		wantKind(t, "read of a cut chunk", err, errs.Lost)
		out := tempFile(t, "dst", nil, os.O_RDWR)
		_, err = localIO(t, s, &weftpb.LocalIORequest{Chunk: cid(5, 2), Offset: c.off, Length: c.n}, out)
		wantKind(t, "same-host read of a cut chunk", err, errs.Lost)
	}
}

// TestReadReplyDescribesChunk: a read says whether the store holds the
// chunk, its recorded size and its version, which every change raises; a
// missing chunk of a complete store is a hole (found = false, no error).
func TestReadReplyDescribesChunk(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		r, got, err := readReply(s, 8, 0, 0, 100)
		if err != nil || r.Found || len(got) != 0 {
			t.Fatalf("read of a missing chunk: %v, %d bytes, %v", r, len(got), err)
		}
		mustWrite(t, s, 8, 0, 1000, []byte("abc"))
		r1, _, err := readReply(s, 8, 0, 2000, 100) // past the end: still described
		if err != nil || !r1.Found || r1.ChunkSize != 1003 || r1.Version == 0 {
			t.Fatalf("read past the end: %v, %v", r1, err)
		}
		mustWrite(t, s, 8, 0, 0, []byte("x"))
		r2, _, _ := readReply(s, 8, 0, 0, 1)
		mustTruncate(t, s, 8, 0, 10)
		r3, got, _ := readReply(s, 8, 0, 0, 100)
		if r2.Version <= r1.Version || r3.Version <= r2.Version || r3.ChunkSize != 10 || len(got) != 10 {
			t.Fatalf("versions %d, %d, %d; size %d, %d bytes", r1.Version, r2.Version, r3.Version, r3.ChunkSize, len(got))
		}
		out := tempFile(t, "dst", nil, os.O_RDWR)
		lr := localRead(t, s, &weftpb.LocalIORequest{Chunk: cid(8, 0), Length: 100}, out)
		if !lr.Found || lr.ChunkSize != 10 || lr.Version != r3.Version || lr.Length != 10 {
			t.Fatalf("same-host read: %v", lr)
		}
		lr = localRead(t, s, &weftpb.LocalIORequest{Chunk: cid(8, 1), Length: 100}, out)
		if lr.Found || lr.Length != 0 || lr.Error != "" {
			t.Fatalf("same-host read of a missing chunk: %v", lr)
		}
	})
}

// localRead runs a same-host read and returns its whole reply.
func localRead(t *testing.T, s *Server, req *weftpb.LocalIORequest, f *os.File) *weftpb.LocalIOReply {
	t.Helper()
	msg, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return s.handleLocal(msg, int(f.Fd()), rpc.PeerCred{}).(*weftpb.LocalIOReply)
}

// TestDiskStaleTailDropped: a growth that crashed after its data but before
// its state leaves bytes past the recorded size; they stay hidden, and a
// later growth over them reads zeros in its gap, not the stale bytes.
func TestDiskStaleTailDropped(t *testing.T) {
	dir := t.TempDir()
	s, _ := diskStore(t, dir)
	mustWrite(t, s, 1, 0, 0, []byte("head"))
	d := s.backend.(*diskBackend)
	d.hook = func(step int) error {
		if step == 2 { // before the state step
			return errCrash
		}
		return nil
	}
	s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(1, 0), Offset: 100, Data: []byte("stale bytes")})
	s.Close()

	s2, _ := diskStore(t, dir)
	r, got, err := readReply(s2, 1, 0, 0, 1000)
	if err != nil || r.ChunkSize != 4 {
		t.Fatalf("after the crash: %v, %v", r, err)
	}
	wantBytes(t, "after the crash", got, []byte("head"))
	mustWrite(t, s2, 1, 0, 200, []byte("tail"))
	want := append(append([]byte("head"), make([]byte, 196)...), "tail"...)
	wantBytes(t, "growth over the stale bytes", mustRead(t, s2, 1, 0, 0, 1000), want)
}

// TestDiskTornStateSlot: a torn newer state slot leaves the older one. It
// describes the chunk before the last change: after a write within the
// size, the same size; after a shrink that cut the file, a size the file
// no longer reaches, which reads as lost, never as zeros.
func TestDiskTornStateSlot(t *testing.T) {
	s, _ := diskStore(t, t.TempDir())
	tear := func(version uint64) {
		f, err := os.OpenFile(s.backend.(*diskBackend).chunkPath(ChunkKey{1, 0}), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{0xff, 0xff}, slotOff(version)+3); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, s, 1, 0, 0, []byte("first"))
	r1, _, _ := readReply(s, 1, 0, 0, 10)
	mustWrite(t, s, 1, 0, 0, []byte("FI"))
	r2, _, _ := readReply(s, 1, 0, 0, 10)
	tear(r2.Version)
	r, got, err := readReply(s, 1, 0, 0, 10)
	if err != nil || r.Version != r1.Version || r.ChunkSize != 5 {
		t.Fatalf("with the newer slot torn: %v, %v (before the write %v)", r, err, r1)
	}
	wantBytes(t, "with the newer slot torn", got, []byte("FIrst"))

	mustTruncate(t, s, 1, 0, 3) // rewrites the torn slot
	r3, _, _ := readReply(s, 1, 0, 0, 10)
	tear(r3.Version)
	_, _, err = readReply(s, 1, 0, 0, 10)
	wantKind(t, "read with the shrink's slot torn", err, errs.Lost)
}

// TestDiskLostChunkRewritable: writes to a chunk that lost its tail fail as
// Lost too (they would vouch for bytes it no longer has), and removing it
// lets it be written anew, as repair does.
func TestDiskLostChunkRewritable(t *testing.T) {
	s, _ := diskStore(t, t.TempDir())
	data := randBytes(rand.New(rand.NewPCG(5, 5)), 3*DefaultBlockSize)
	mustWrite(t, s, 6, 0, 0, data)
	d := s.backend.(*diskBackend)
	if err := os.Truncate(d.chunkPath(ChunkKey{6, 0}), d.layout.dataOff+DefaultBlockSize); err != nil {
		t.Fatal(err)
	}
	_, err := s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(6, 0), Offset: 10, Data: []byte("x")})
	wantKind(t, "write to a lost chunk", err, errs.Lost)
	lr, err := s.ListChunks(context.Background(), &weftpb.ListChunksRequest{Ino: 6})
	if err != nil || len(lr.Chunks) != 1 || lr.Chunks[0].Version != 0 {
		t.Fatalf("a lost chunk is listed as %v, %v; want version 0", lr, err)
	}
	mustTruncate(t, s, 6, 0, 0)
	mustWrite(t, s, 6, 0, 0, data)
	wantBytes(t, "rewritten chunk", mustRead(t, s, 6, 0, 0, 1<<20), data)
}

// TestTruncateOfMissingChunkCreatesNothing: a truncate of a chunk this
// store does not hold (lost, or never written) leaves it missing. Making a
// zero-filled chunk would answer a lost chunk's reads with zeros.
func TestTruncateOfMissingChunkCreatesNothing(t *testing.T) {
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			s := openStore(t, bc.cfg(t))
			for _, size := range []int64{0, 100} {
				if _, err := s.TruncateChunk(context.Background(), &weftpb.TruncateChunkRequest{Chunk: cid(7, 3), Size: size}); err != nil {
					t.Fatalf("truncate of a missing chunk to %d: %v", size, err)
				}
				r, _, err := readReply(s, 7, 3, 0, 200)
				if err != nil || r.Found {
					t.Fatalf("after a truncate to %d, the missing chunk reads %v, %v; want not found", size, r, err)
				}
			}
		})
	}
}
