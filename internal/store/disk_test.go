package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

func diskStore(t *testing.T, dir string) (*Server, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return openStore(t, Config{Backend: "disk", Dir: dir, Registry: reg}), reg
}

// flipOnDisk flips byte off of chunk k's data in its file.
func flipOnDisk(t *testing.T, s *Server, k ChunkKey, off int64) {
	t.Helper()
	d := s.backend.(*diskBackend)
	f, err := os.OpenFile(d.chunkPath(k), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	at := d.layout.dataOff + off
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

func TestDiskCorruption(t *testing.T) {
	s, reg := diskStore(t, t.TempDir())
	r := rand.New(rand.NewPCG(5, 6))
	data := randBytes(r, 3*DefaultBlockSize+100)
	mustWrite(t, s, 0xabc, 4, 0, data)
	flipOnDisk(t, s, ChunkKey{0xabc, 4}, DefaultBlockSize+123)

	_, err := read(s, 0xabc, 4, DefaultBlockSize+100, 50)
	wantKind(t, "read of the flipped block", err, errs.Corrupt)
	if !strings.Contains(err.Error(), "abc/4") {
		t.Fatalf("corrupt error %q does not name the chunk", err)
	}
	_, err = read(s, 0xabc, 4, 0, 1<<20)
	wantKind(t, "read spanning the flipped block", err, errs.Corrupt)
	wantBytes(t, "block before", mustRead(t, s, 0xabc, 4, 0, DefaultBlockSize), data[:DefaultBlockSize])
	wantBytes(t, "blocks after", mustRead(t, s, 0xabc, 4, 2*DefaultBlockSize, 1<<20), data[2*DefaultBlockSize:])
	if n := metricValue(t, reg, "weft_store_corrupt_reads_total"); n != 2 {
		t.Fatalf("corrupt counter = %v, want 2", n)
	}

	// A partial write into the block cannot vouch for the rest of it.
	_, err = s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(0xabc, 4), Offset: DefaultBlockSize + 1, Data: []byte("x")})
	wantKind(t, "partial write into the corrupt block", err, errs.Corrupt)
	// A whole-block write heals it.
	mustWrite(t, s, 0xabc, 4, DefaultBlockSize, data[DefaultBlockSize:2*DefaultBlockSize])
	wantBytes(t, "healed", mustRead(t, s, 0xabc, 4, 0, 1<<20), data)

	// Damage in the last, partial block; then a shrink that keeps part of it.
	flipOnDisk(t, s, ChunkKey{0xabc, 4}, 3*DefaultBlockSize+1)
	_, err = s.TruncateChunk(context.Background(), &weftpb.TruncateChunkRequest{Chunk: cid(0xabc, 4), Size: 3*DefaultBlockSize + 50})
	wantKind(t, "shrink keeping part of a corrupt block", err, errs.Corrupt)
	mustTruncate(t, s, 0xabc, 4, 3*DefaultBlockSize) // dropping the block heals
	wantBytes(t, "after dropping the corrupt block", mustRead(t, s, 0xabc, 4, 0, 1<<20), data[:3*DefaultBlockSize])
}

func TestDiskBadHeader(t *testing.T) {
	s, _ := diskStore(t, t.TempDir())
	mustWrite(t, s, 1, 0, 0, []byte("data"))
	p := s.backend.(*diskBackend).chunkPath(ChunkKey{1, 0})
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("X"), 0)
	f.Close()
	_, err = read(s, 1, 0, 0, 10)
	wantKind(t, "read with a bad header", err, errs.Corrupt)
	// Truncating to 0 removes the file whatever it holds.
	mustTruncate(t, s, 1, 0, 0)
	mustWrite(t, s, 1, 0, 0, []byte("new"))
	wantBytes(t, "after recreate", mustRead(t, s, 1, 0, 0, 10), []byte("new"))
}

func TestDiskRestart(t *testing.T) {
	dir := t.TempDir()
	s, _ := diskStore(t, dir)
	r := rand.New(rand.NewPCG(7, 8))
	big := randBytes(r, 2<<20+5)
	mustWrite(t, s, 1<<52|9, 0, 0, big)
	mustWrite(t, s, 1<<52|9, 3, 100, []byte("small"))
	mustWrite(t, s, 2, 0, 0, []byte("two"))
	if _, err := s.SyncChunks(context.Background(), &weftpb.SyncChunksRequest{Ino: 1<<52 | 9}); err != nil {
		t.Fatal(err)
	}
	// A second server on the same directory is refused while the first runs.
	_, err := Open(Config{Backend: "disk", Dir: dir, Registry: prometheus.NewRegistry()})
	wantKind(t, "second open of a directory in use", err, errs.Busy)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash during a creation leaves a .tmp file, which Open removes.
	tmp := s.backend.(*diskBackend).chunkPath(ChunkKey{2, 1}) + ".tmp"
	if err := os.WriteFile(tmp, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}

	s2, _ := diskStore(t, dir)
	wantBytes(t, "big chunk after restart", mustRead(t, s2, 1<<52|9, 0, 0, 4<<20), big)
	want := append(make([]byte, 100), "small"...)
	wantBytes(t, "small chunk after restart", mustRead(t, s2, 1<<52|9, 3, 0, 1000), want)
	wantBytes(t, "other inode after restart", mustRead(t, s2, 2, 0, 0, 10), []byte("two"))
	if n := chunkCount(t, s2); n != 3 {
		t.Fatalf("chunks after restart = %d, want 3", n)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover .tmp not removed: %v", err)
	}
	st, err := s2.StatFS(context.Background(), nil)
	if err != nil || st.Capacity == 0 || st.Used == 0 || st.Used > st.Capacity {
		t.Fatalf("statfs = %v, %v", st, err)
	}
}

var errCrash = errors.New("simulated crash")

// TestDiskCrashBetweenSteps stops a change after each of its steps, as a
// kill -9 would, reopens the store and checks that every block reads either
// its old or its new bytes (never wrong bytes, never an error for a block
// whose bytes are whole), and that the store then takes new writes.
func TestDiskCrashBetweenSteps(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	old := randBytes(r, 3*DefaultBlockSize+500)
	patch := randBytes(r, DefaultBlockSize+1000) // covers block 1 whole, edges in blocks 0..2
	const patchAt = DefaultBlockSize - 500
	want := append([]byte(nil), old...)
	copy(want[patchAt:], patch)

	// Steps (apply): 0 entries {old, new}; 1 data; 2 state; 3 entries
	// {new, new}, with state and data swapped for a shrink. newFrom is the
	// first step before which a crash leaves the new bytes: the data step
	// for a write within the size, the state step for a growth (until it,
	// the recorded size hides the new bytes) and for a shrink.
	changes := map[string]struct {
		do            func(s *Server)
		before, after []byte
		newFrom       int
	}{
		"write": {
			do: func(s *Server) {
				s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(1, 0), Offset: patchAt, Data: patch})
			},
			before: old, after: want, newFrom: 2,
		},
		"grow": {
			do: func(s *Server) {
				s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(1, 0), Offset: int64(len(old)) + 10, Data: []byte("end")})
			},
			before: old, after: append(append(append([]byte(nil), old...), make([]byte, 10)...), "end"...),
			newFrom: 3,
		},
		"shrink": {
			do: func(s *Server) {
				s.TruncateChunk(context.Background(), &weftpb.TruncateChunkRequest{Chunk: cid(1, 0), Size: 100})
			},
			before: old, after: old[:100], newFrom: 2,
		},
	}
	for name, c := range changes {
		for crashAt := range 5 { // before step 0, 1, 2, 3; 4: no crash
			t.Run(name+"/"+string(rune('0'+crashAt)), func(t *testing.T) {
				dir := t.TempDir()
				s, _ := diskStore(t, dir)
				mustWrite(t, s, 1, 0, 0, old)
				d := s.backend.(*diskBackend)
				d.hook = func(step int) error {
					if step == crashAt {
						return errCrash
					}
					return nil
				}
				c.do(s)
				s.Close()

				s2, _ := diskStore(t, dir)
				expect := c.after
				if crashAt < c.newFrom {
					expect = c.before
				}
				wantBytes(t, "after crash", mustRead(t, s2, 1, 0, 0, 1<<20), expect)
				// A change after the crash works and reads back.
				mustWrite(t, s2, 1, 0, 7, []byte("fresh"))
				copyExpect := append([]byte(nil), expect...)
				if len(copyExpect) < 12 {
					copyExpect = append(copyExpect, make([]byte, 12-len(copyExpect))...)
				}
				copy(copyExpect[7:], "fresh")
				wantBytes(t, "write after crash", mustRead(t, s2, 1, 0, 0, 1<<20), copyExpect)
			})
		}
	}
}

// TestDiskTornBlock writes half of a change's data, as a crash in the middle
// of pwrite would: the torn block reads as Corrupt, the others are intact.
func TestDiskTornBlock(t *testing.T) {
	dir := t.TempDir()
	s, _ := diskStore(t, dir)
	r := rand.New(rand.NewPCG(11, 12))
	old := randBytes(r, 2*DefaultBlockSize)
	mustWrite(t, s, 1, 0, 0, old)
	d := s.backend.(*diskBackend)
	d.hook = func(step int) error {
		if step == 1 { // entries {old,new} are written: tear the data, crash
			flipOnDisk(t, s, ChunkKey{1, 0}, DefaultBlockSize+10)
			return errCrash
		}
		return nil
	}
	_, err := s.WriteChunk(context.Background(), &weftpb.WriteChunkRequest{Chunk: cid(1, 0), Offset: DefaultBlockSize, Data: make([]byte, 100)})
	if !errors.Is(err, errCrash) {
		t.Fatalf("write = %v, want the simulated crash", err)
	}
	s.Close()
	s2, _ := diskStore(t, dir)
	_, err = read(s2, 1, 0, DefaultBlockSize, 10)
	wantKind(t, "torn block", err, errs.Corrupt)
	wantBytes(t, "untouched block", mustRead(t, s2, 1, 0, 0, DefaultBlockSize), old[:DefaultBlockSize])
}

func TestDiskLayoutFiles(t *testing.T) {
	dir := t.TempDir()
	s, _ := diskStore(t, dir)
	mustWrite(t, s, 0x1234, 0x10, 0, []byte("x"))
	matches, err := filepath.Glob(filepath.Join(dir, "chunks", "??", "0000000000001234", "0000000000000010"))
	if err != nil || len(matches) != 1 {
		t.Fatalf("chunk file not where the package doc says: %v %v", matches, err)
	}
	fi, err := os.Stat(matches[0])
	if err != nil || fi.Size() != newLayout(DefaultBlockSize, DefaultMaxChunkSize).dataOff+1 {
		t.Fatalf("chunk file size = %v, %v", fi.Size(), err)
	}
	if _, err := s.DeleteChunks(context.Background(), &weftpb.DeleteChunksRequest{Ino: 0x1234}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(matches[0])); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("empty inode directory left behind: %v", err)
	}
}
