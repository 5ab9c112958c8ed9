package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"testing"
	"testing/iotest"

	"github.com/weftfs/weft/internal/client"
)

const copyChunk = 64 << 10 // small chunks: many per file, several in flight

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>12)
	}
	return b
}

// TestWriteFromReadTo round-trips files of awkward sizes through the put and
// get paths, with a source that returns short reads, and checks that both
// ReadTo and ordinary reads see the same bytes.
func TestWriteFromReadTo(t *testing.T) {
	c := newTestClient(t, copyChunk)
	ctx := context.Background()
	for i, n := range []int{0, 1, 4097, copyChunk - 1, copyChunk, copyChunk + 1, 7*copyChunk/2 + 3, 20 * copyChunk} {
		want := pattern(n, byte(i))
		name := "/f" + string(rune('a'+i))
		wrote, err := c.WriteFrom(ctx, name, iotest.HalfReader(bytes.NewReader(want)), 0o644, nil)
		if err != nil || wrote != int64(n) {
			t.Fatalf("WriteFrom %d bytes: wrote %d, %v", n, wrote, err)
		}
		var got bytes.Buffer
		if read, err := c.ReadTo(ctx, name, &got, nil); err != nil || read != int64(n) || !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("ReadTo of %d bytes: read %d, equal %v, %v", n, read, bytes.Equal(got.Bytes(), want), err)
		}
		f, err := c.Open(ctx, name, os.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		all, err := io.ReadAll(f)
		f.Close()
		if err != nil || !bytes.Equal(all, want) {
			t.Fatalf("Read of %d bytes: %d bytes, equal %v, %v", n, len(all), bytes.Equal(all, want), err)
		}
	}
}

// TestPooledBuffersNeverLeakIntoFiles fills the buffer pools with one
// pattern, then reads files whose content is partly holes, partly short
// chunks: every byte that was not written must read as zero, whichever path
// reads it.
func TestPooledBuffersNeverLeakIntoFiles(t *testing.T) {
	c := newTestClient(t, copyChunk)
	ctx := context.Background()
	junk := bytes.Repeat([]byte{0xAA}, 8*copyChunk)
	if _, err := c.WriteFrom(ctx, "/junk", bytes.NewReader(junk), 0o644, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadTo(ctx, "/junk", io.Discard, nil); err != nil {
		t.Fatal(err)
	}

	want := writeSparse(t, c, "/holes")
	var got bytes.Buffer
	if _, err := c.ReadTo(ctx, "/holes", &got, nil); err != nil || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("ReadTo of a sparse file: %d bytes, equal %v, %v", got.Len(), bytes.Equal(got.Bytes(), want), err)
	}
	r, err := c.Open(ctx, "/holes", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := bytes.Repeat([]byte{0xBB}, len(want))
	if n, err := r.ReadAt(buf, 0); n != len(want) || (err != nil && err != io.EOF) || !bytes.Equal(buf, want) {
		t.Fatalf("ReadAt of a sparse file: %d bytes, equal %v, %v", n, bytes.Equal(buf, want), err)
	}
}

// TestSmallWritesBuffer writes a file in small pieces, in order and then
// over itself at random, so dirty ranges grow, move and merge through the
// pooled buffers; the file must match a plain byte slice.
func TestSmallWritesBuffer(t *testing.T) {
	c := newTestClient(t, copyChunk)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, 3*copyChunk+500)
	f, err := c.Create(ctx, "/small", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	write := func(off int, p []byte) {
		t.Helper()
		copy(want[off:], p)
		if _, err := f.WriteAt(p, int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	for off := 0; off < len(want); off += 3000 { // a stream of small appends
		write(off, pattern(min(3000, len(want)-off), byte(off)))
	}
	for range 200 { // overwrites, some before a range, some bridging two
		off := rng.IntN(len(want) - 1)
		write(off, pattern(1+rng.IntN(min(9000, len(want)-off)), byte(rng.Uint32())))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := c.ReadTo(ctx, "/small", &got, nil); err != nil || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("read back: %d bytes, equal %v, %v", got.Len(), bytes.Equal(got.Bytes(), want), err)
	}
}

// TestReadToSeesOwnWrites: a file still open for writing in this client is
// read by ReadTo with its unflushed writes.
func TestReadToSeesOwnWrites(t *testing.T) {
	c := newTestClient(t, copyChunk)
	ctx := context.Background()
	f, err := c.Create(ctx, "/open", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := pattern(2*copyChunk+5, 9)
	if _, err := f.Write(want); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := c.ReadTo(ctx, "/open", &got, nil); err != nil || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("ReadTo: %d bytes, equal %v, %v", got.Len(), bytes.Equal(got.Bytes(), want), err)
	}
}

type failingReader struct{ n int }

var errSource = errors.New("source broke")

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errSource
	}
	k := min(len(p), r.n)
	r.n -= k
	return k, nil
}

// TestWriteFromReportsSourceErrors: a failing source fails WriteFrom with
// its error; what was read before is in the file.
func TestWriteFromReportsSourceErrors(t *testing.T) {
	c := newTestClient(t, copyChunk)
	ctx := context.Background()
	n, err := c.WriteFrom(ctx, "/broken", &failingReader{n: copyChunk + 10}, 0o644, nil)
	if !errors.Is(err, errSource) || n != copyChunk+10 {
		t.Fatalf("WriteFrom: %d, %v; want %d, the source's error", n, err, copyChunk+10)
	}
	a, err := c.Stat(ctx, "/broken")
	if err != nil || a.Size != copyChunk+10 {
		t.Fatalf("stat: size %d, %v", a.Size, err)
	}
}

// writeSparse writes path as a sparse file through c and returns its
// content: a byte in chunk 3, a byte in the middle of chunk 5, the end in
// chunk 6 (a chunk shorter than the file's last chunk would be), holes
// everywhere else.
func writeSparse(t *testing.T, c *client.Client, path string) []byte {
	t.Helper()
	ctx := context.Background()
	want := make([]byte, 6*copyChunk+100)
	f, err := c.Create(ctx, path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int{3 * copyChunk, 5*copyChunk + 77, 6*copyChunk + 10} {
		want[off] = 'x'
		if _, err := f.WriteAt([]byte{'x'}, int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(int64(len(want))); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}
