package posixtest

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/weftfs/weft/internal/errs"
)

// dataCases: what reads return after writes, holes and truncation, around
// the inline limit and chunk boundaries.
var dataCases = []testCase{
	{"ReadWriteOffsets", testReadWriteOffsets},
	{"HolesReadZeros", testHolesReadZeros},
	{"InlineLimit", testInlineLimit},
	{"GrowPastInlineLimit", testGrowPastInlineLimit},
	{"ChunkBoundaries", testChunkBoundaries},
	{"TruncateShrinkGrow", testTruncateShrinkGrow},
	{"FtruncateShrinkGrow", testFtruncateShrinkGrow},
	{"ReadAfterReopen", testReadAfterReopen},
}

func testReadWriteOffsets(t *testing.T, fs FS) {
	f, err := fs.Open("/f", os.O_RDWR|os.O_CREATE, 0o644)
	must(t, err, "create")
	defer f.Close()
	writeAt(t, f, []byte("hello world"), 0)
	writeAt(t, f, []byte("WORLD"), 6)
	writeAt(t, f, []byte("!"), 11)
	buf := make([]byte, 12)
	n, err := f.ReadAt(buf, 0)
	if n != 12 || string(buf) != "hello WORLD!" {
		t.Errorf("read back %q (%d, %v), want \"hello WORLD!\"", buf[:n], n, err)
	}
	// A read that runs past the end returns what is there and io.EOF.
	n, err = f.ReadAt(buf, 8)
	if n != 4 || string(buf[:n]) != "RLD!" || !isEOF(err) {
		t.Errorf("read across the end: %q, %v; want \"RLD!\", EOF", buf[:n], err)
	}
	n, err = f.ReadAt(buf, 100)
	if n != 0 || !isEOF(err) {
		t.Errorf("read past the end: %d, %v; want 0, EOF", n, err)
	}
	must(t, f.Close(), "close")
	wantContent(t, fs, "/f", []byte("hello WORLD!"))
}

func testHolesReadZeros(t *testing.T, fs FS) {
	f, err := fs.Open("/f", os.O_RDWR|os.O_CREATE, 0o644)
	must(t, err, "create")
	writeAt(t, f, []byte("abc"), 0)
	writeAt(t, f, []byte("xyz"), 10000)
	// A hole larger than a chunk, and data landing mid-chunk after it.
	writeAt(t, f, []byte("tail"), 3*TestChunkSize+100)
	must(t, f.Close(), "close")

	want := make([]byte, 3*TestChunkSize+104)
	copy(want, "abc")
	copy(want[10000:], "xyz")
	copy(want[3*TestChunkSize+100:], "tail")
	wantSize(t, fs, "/f", uint64(len(want)))
	got := readFile(t, fs, "/f")
	if i := firstDiff(got, want); i >= 0 {
		t.Errorf("sparse file differs at offset %d (len %d, want %d)", i, len(got), len(want))
	}

	// Writing past the end of an open file leaves a zero-filled hole too.
	f, err = fs.Open("/g", os.O_RDWR|os.O_CREATE, 0o644)
	must(t, err, "create")
	defer f.Close()
	writeAt(t, f, []byte{1}, 5000)
	buf := make([]byte, 5001)
	n, err := f.ReadAt(buf, 0)
	if n != 5001 || !bytes.Equal(buf[:5000], make([]byte, 5000)) || buf[5000] != 1 {
		t.Errorf("read of a hole before one byte: %d bytes, %v; want 5000 zeros and 1", n, err)
	}
}

func testInlineLimit(t *testing.T, fs FS) {
	for _, size := range []int{0, 1, TestInlineLimit - 1, TestInlineLimit, TestInlineLimit + 1, 2 * TestInlineLimit} {
		path := fmt.Sprintf("/f%d", size)
		data := pattern(size, byte(size))
		writeFile(t, fs, path, data, 0o644)
		wantSize(t, fs, path, uint64(size))
		wantContent(t, fs, path, data)
	}
}

func testGrowPastInlineLimit(t *testing.T, fs FS) {
	data := pattern(3*TestInlineLimit, 7)
	writeFile(t, fs, "/f", data[:100], 0o644)
	// Reopen and grow across the limit in two steps, then overwrite a range
	// that straddles it.
	f, err := fs.Open("/f", os.O_RDWR, 0)
	must(t, err, "reopen")
	writeAt(t, f, data[100:TestInlineLimit-10], 100)
	writeAt(t, f, data[TestInlineLimit-10:], TestInlineLimit-10)
	patch := []byte("straddles the inline limit")
	writeAt(t, f, patch, TestInlineLimit-5)
	copy(data[TestInlineLimit-5:], patch)
	must(t, f.Close(), "close")
	wantSize(t, fs, "/f", uint64(len(data)))
	wantContent(t, fs, "/f", data)
}

func testChunkBoundaries(t *testing.T, fs FS) {
	const size = 4*TestChunkSize + 123
	data := pattern(size, 3)
	f, err := fs.Open("/f", os.O_RDWR|os.O_CREATE, 0o644)
	must(t, err, "create")
	// Odd-sized sequential writes, so most of them straddle a boundary.
	for off := 0; off < size; off += 9999 {
		_, err := f.Write(data[off:min(off+9999, size)])
		must(t, err, fmt.Sprintf("write at %d", off))
	}
	// Overwrite ranges across each boundary.
	for i := 1; i <= 4; i++ {
		off := i*TestChunkSize - 10
		patch := bytes.Repeat([]byte{byte(0xA0 + i)}, 20)
		writeAt(t, f, patch, int64(off))
		copy(data[off:], patch)
	}
	must(t, f.Close(), "close")
	wantSize(t, fs, "/f", size)

	f, err = fs.Open("/f", os.O_RDONLY, 0)
	must(t, err, "reopen")
	defer f.Close()
	for _, r := range []struct{ off, n int }{
		{0, size},
		{TestChunkSize - 1, 2},
		{TestChunkSize - 100, 2*TestChunkSize + 200},
		{3*TestChunkSize + 5, TestChunkSize + 118},
	} {
		buf := make([]byte, r.n)
		n, err := f.ReadAt(buf, int64(r.off))
		if n != r.n || (err != nil && !isEOF(err)) {
			t.Errorf("read %d at %d: %d bytes, %v", r.n, r.off, n, err)
			continue
		}
		if i := firstDiff(buf, data[r.off:r.off+r.n]); i >= 0 {
			t.Errorf("read %d at %d: differs at offset %d", r.n, r.off, r.off+i)
		}
	}
}

func testTruncateShrinkGrow(t *testing.T, fs FS) {
	for _, c := range []struct {
		name               string
		size, shrink, grow int
	}{
		{"inline", 3000, 100, 4000},
		{"chunked", 3*TestChunkSize + 500, 1000, 2*TestChunkSize + 7},
		{"mid-chunk", 3*TestChunkSize + 500, TestChunkSize + 17, 4 * TestChunkSize},
	} {
		path := "/" + c.name
		data := pattern(c.size, 9)
		writeFile(t, fs, path, data, 0o644)
		must(t, fs.Truncate(path, int64(c.shrink)), "truncate "+path)
		wantSize(t, fs, path, uint64(c.shrink))
		must(t, fs.Truncate(path, int64(c.grow)), "truncate "+path)
		wantSize(t, fs, path, uint64(c.grow))
		want := make([]byte, c.grow)
		copy(want, data[:c.shrink])
		got := readFile(t, fs, path)
		if i := firstDiff(got, want); i >= 0 {
			t.Errorf("%s: after shrink to %d and grow to %d, differs at %d (old data must read as zeros)",
				c.name, c.shrink, c.grow, i)
		}
	}
	wantKind(t, fs.Truncate("/missing", 0), errs.NotExist, "truncate of a missing file")
}

func testFtruncateShrinkGrow(t *testing.T, fs FS) {
	data := pattern(2*TestChunkSize+10, 5)
	f, err := fs.Open("/f", os.O_RDWR|os.O_CREATE, 0o644)
	must(t, err, "create")
	writeAt(t, f, data, 0)
	must(t, f.Truncate(10), "ftruncate to 10")
	must(t, f.Truncate(TestChunkSize+10), "ftruncate to grow")
	buf := make([]byte, TestChunkSize+10)
	n, err := f.ReadAt(buf, 0)
	if n != len(buf) || err != nil && !isEOF(err) {
		t.Fatalf("read after ftruncate: %d, %v", n, err)
	}
	want := make([]byte, TestChunkSize+10)
	copy(want, data[:10])
	if i := firstDiff(buf, want); i >= 0 {
		t.Errorf("open file after ftruncate: differs at %d", i)
	}
	// A write after the shrink lands where asked, the rest stays zero.
	writeAt(t, f, []byte("z"), 2*TestChunkSize)
	must(t, f.Close(), "close")
	want = append(want, make([]byte, TestChunkSize-10)...)
	want = append(want, 'z')
	wantSize(t, fs, "/f", uint64(len(want)))
	got := readFile(t, fs, "/f")
	if i := firstDiff(got, want); i >= 0 {
		t.Errorf("after close: differs at %d", i)
	}
}

func testReadAfterReopen(t *testing.T, fs FS) {
	// A reader that opened the file before a writer closed it sees the new
	// data once it reopens (close-to-open).
	data := pattern(TestChunkSize+TestInlineLimit, 11)
	writeFile(t, fs, "/f", data[:10], 0o644)
	w, err := fs.Open("/f", os.O_WRONLY, 0)
	must(t, err, "open writer")
	writeAt(t, w, data, 0)
	must(t, w.Close(), "close writer")
	wantContent(t, fs, "/f", data)
	wantSize(t, fs, "/f", uint64(len(data)))
}
