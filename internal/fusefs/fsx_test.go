package fusefs

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/rpc"
)

// The fsx test, after the classic file system exerciser: random pwrite,
// pread, ftruncate, fallocate (grow and punch hole), SEEK_DATA/SEEK_HOLE,
// shared mmap reads and writes (also while the file is written with
// pwrite), fsync, close/reopen and page-cache drops on one file through a
// mount, each checked against an in-memory copy: the size after every step,
// the bytes an operation touched right after it, and the whole file every
// 64 steps and at the end. A failure prints the seed and the last steps.
//
// mmap of a file served by the same process can deadlock (package doc), so
// the server and the program doing the operations are never one process:
// TestFsx mounts with the weft binary and operates from the test;
// TestFsxRaceServer serves from the test (under the race detector, when the
// tests run with -race) and operates from a child process.
//
// Environment:
//
//	WEFT_FSX_OPS       operations of TestFsx (default 50000; make fsx-long: 1000000)
//	WEFT_FSX_RACE_OPS  operations of TestFsxRaceServer (default 3000)
//	WEFT_FSX_SEED      replay a run with this seed (printed by every run)

// fsxShape is the file an fsx run works on: four chunks, so that operations
// cross chunk boundaries and the inline limit (4 KiB) all the time.
type fsxShape struct {
	chunk, maxLen, maxOp int
}

var (
	// The cluster file's smallest chunk size: TestFsx mounts with the
	// weft binary, which takes it from there.
	fsxBinaryShape = fsxShape{chunk: 64 << 10, maxLen: 256 << 10, maxOp: 24 << 10}
	fsxRaceShape   = fsxShape{chunk: 16 << 10, maxLen: 64 << 10, maxOp: 6 << 10}
)

func fsxSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WEFT_FSX_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WEFT_FSX_SEED=%q: %v", s, err)
		}
		seed = v
	}
	return seed
}

// TestFsx runs fsx on a mount served by the weft binary (weft up --mount
// -d): the cluster runs there too, since a server this process ran would
// deadlock with its page faults just as a FUSE server would.
func TestFsx(t *testing.T) {
	requireFUSE(t)
	data := t.TempDir()
	cfg := config.Default()
	cfg.ChunkSize = config.ByteSize(fsxBinaryShape.chunk)
	cfg.InlineLimit = 4 << 10
	cfg.Durability = config.DurabilityAsync
	cfg.Meta = []config.MetaServer{config.DefaultMetaServer(freeAddr(t), "meta0")}
	cfg.Store = []config.StoreServer{config.DefaultStoreServer(freeAddr(t), "store0")}
	if err := cfg.Write(filepath.Join(data, "weft.toml")); err != nil {
		t.Fatal(err)
	}
	mnt := newMountPoint(t)
	upBackground(t, data, mnt)

	ops := envInt(t, "WEFT_FSX_OPS", 50000)
	seed := fsxSeed(t)
	t.Logf("fsx: %d operations, seed %d (replay: WEFT_FSX_SEED=%d go test -run 'TestFsx$' ./internal/fusefs)", ops, seed, seed)
	x := newFsx(seed, mnt+"/fsx.data", fsxBinaryShape)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- x.run(ops) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("fsx seed %d: %v", seed, err)
		}
	case <-time.After(time.Duration(ops)*10*time.Millisecond + time.Minute):
		t.Fatalf("fsx seed %d: not done after %v (at step %d)", seed, time.Since(start), x.stepNow())
	}
	t.Logf("fsx: done: %d operations in %v (%s)", ops, time.Since(start).Round(time.Millisecond), x.counts())
}

// TestFsxRaceServer runs a shorter fsx on a mount this test process serves,
// from a child process.
func TestFsxRaceServer(t *testing.T) {
	requireFUSE(t)
	tc := startCluster(t)
	c := tc.client(t, func(cfg *client.Config) { cfg.ChunkSize = int64(fsxRaceShape.chunk) })
	m := mount(t, c, Options{})
	ops := envInt(t, "WEFT_FSX_RACE_OPS", 3000)
	seed := fsxSeed(t)
	t.Logf("fsx: %d operations, seed %d (replay: WEFT_FSX_SEED=%d go test -run 'TestFsxRaceServer$' ./internal/fusefs)", ops, seed, seed)

	timeout := time.Duration(ops)*20*time.Millisecond + time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFsxChild$", "-test.v", "-test.timeout="+timeout.String())
	cmd.Env = append(os.Environ(),
		"WEFT_FSX_CHILD_FILE="+m.Dir()+"/fsx.data",
		fmt.Sprintf("WEFT_FSX_CHILD_SEED=%d", seed),
		fmt.Sprintf("WEFT_FSX_CHILD_OPS=%d", ops))
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("fsx: done")) {
		t.Fatalf("fsx child failed (seed %d): %v\n%s", seed, err, tail(out, 6000))
	}
	t.Logf("%s", lastLine(out, "fsx: done"))
}

// TestFsxChild is the child side of TestFsxRaceServer; it does nothing
// when run directly.
func TestFsxChild(t *testing.T) {
	path := os.Getenv("WEFT_FSX_CHILD_FILE")
	if path == "" {
		t.Skip("helper process of TestFsxRaceServer")
	}
	seed, _ := strconv.ParseUint(os.Getenv("WEFT_FSX_CHILD_SEED"), 10, 64)
	ops, _ := strconv.Atoi(os.Getenv("WEFT_FSX_CHILD_OPS"))
	x := newFsx(seed, path, fsxRaceShape)
	start := time.Now()
	if err := x.run(ops); err != nil {
		t.Fatalf("fsx seed %d: %v", seed, err)
	}
	fmt.Printf("fsx: done: %d operations in %v (%s)\n", ops, time.Since(start).Round(time.Millisecond), x.counts())
}

// freeAddr is a loopback address free a moment ago, with a port a server
// can stop and start again on (rpc.PickAddr).
func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := rpc.PickAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func newFsx(seed uint64, path string, shape fsxShape) *fsx {
	return &fsx{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), path: path, shape: shape}
}

type fsx struct {
	rng   *rand.Rand
	path  string
	shape fsxShape
	fd    int
	at    atomic.Int64 // the step now running, for a report from another goroutine
	model []byte
	step  int
	log   []string // the last operations, for the failure report
	count map[string]int
}

func (x *fsx) run(ops int) error {
	x.count = make(map[string]int)
	fd, err := unix.Open(x.path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	x.fd = fd
	type op struct {
		name   string
		weight int
		fn     func() error
	}
	table := []op{
		{"write", 25, x.write}, {"read", 18, x.read}, {"truncate", 8, x.truncate},
		{"fallocate", 4, x.fallocate}, {"punch", 6, x.punch}, {"mmapread", 6, x.mmapRead},
		{"mmapwrite", 8, x.mmapWrite}, {"seek", 3, x.seek}, {"reopen", 4, x.reopen},
		{"dropcache", 3, x.dropCache}, {"fsync", 2, x.fsync}, {"mmapmix", 4, x.mmapMix},
	}
	total := 0
	for _, o := range table {
		total += o.weight
	}
	// Whatever happens, the descriptor is closed: a mount with a file
	// open stays busy.
	defer func() { unix.Close(x.fd) }()
	for x.step = 0; x.step < ops; x.step++ {
		x.at.Store(int64(x.step))
		r := x.rng.IntN(total)
		var o op
		for _, o = range table {
			if r < o.weight {
				break
			}
			r -= o.weight
		}
		x.count[o.name]++
		if err := o.fn(); err != nil {
			return x.failure(o.name, err)
		}
		if err := x.checkSize(); err != nil {
			return x.failure(o.name, err)
		}
		if x.step%64 == 63 {
			if err := x.checkAll(); err != nil {
				return x.failure("full check", err)
			}
		}
	}
	if err := x.reopen(); err != nil {
		return x.failure("final reopen", err)
	}
	return nil
}

func (x *fsx) stepNow() int64 { return x.at.Load() }

func (x *fsx) note(format string, args ...any) {
	x.log = append(x.log, fmt.Sprintf("%7d ", x.step)+fmt.Sprintf(format, args...))
	if len(x.log) > 30 {
		x.log = x.log[1:]
	}
}

func (x *fsx) failure(what string, err error) error {
	return fmt.Errorf("step %d (%s): %w\nlast operations:\n%s", x.step, what, err, strings.Join(x.log, "\n"))
}

func (x *fsx) counts() string {
	var parts []string
	for k, v := range x.count {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	return strings.Join(parts, ", ")
}

// span picks an operation's offset and length: mostly anywhere, sometimes
// at a chunk or inline boundary.
func (x *fsx) span(limit int) (int, int) {
	off := x.rng.IntN(limit + 1)
	if x.rng.IntN(4) == 0 {
		c := x.shape.chunk
		edges := []int{0, 4096, c, 2 * c, 3 * c}
		off = max(0, min(limit, edges[x.rng.IntN(len(edges))]+x.rng.IntN(9)-4))
	}
	n := 1 + x.rng.IntN(x.shape.maxOp)
	if x.rng.IntN(3) == 0 {
		n = 1 + x.rng.IntN(512)
	}
	return off, n
}

func (x *fsx) grow(size int) {
	if size > len(x.model) {
		x.model = append(x.model, make([]byte, size-len(x.model))...)
	}
}

func (x *fsx) write() error {
	off, n := x.span(x.shape.maxLen - 1)
	n = min(n, x.shape.maxLen-off)
	data := x.randomBytes(n)
	x.note("write %d+%d", off, n)
	if k, err := unix.Pwrite(x.fd, data, int64(off)); err != nil || k != n {
		return fmt.Errorf("pwrite %d+%d: wrote %d: %v", off, n, k, err)
	}
	x.grow(off + n)
	copy(x.model[off:], data)
	return x.checkRange(off, n)
}

func (x *fsx) read() error {
	off, n := x.span(len(x.model))
	x.note("read %d+%d", off, n)
	return x.checkRange(off, n)
}

func (x *fsx) truncate() error {
	size := x.rng.IntN(x.shape.maxLen + 1)
	switch x.rng.IntN(6) {
	case 0:
		size = 0
	case 1:
		size = x.rng.IntN(8192)
	}
	x.note("truncate %d (from %d)", size, len(x.model))
	if err := unix.Ftruncate(x.fd, int64(size)); err != nil {
		return fmt.Errorf("ftruncate %d: %v", size, err)
	}
	if size < len(x.model) {
		x.model = x.model[:size]
	} else {
		x.grow(size)
	}
	lo := max(0, size-100)
	return x.checkRange(lo, 200)
}

func (x *fsx) fallocate() error {
	off, n := x.span(x.shape.maxLen - 1)
	n = min(n, x.shape.maxLen-off)
	x.note("fallocate %d+%d", off, n)
	if err := unix.Fallocate(x.fd, 0, int64(off), int64(n)); err != nil {
		return fmt.Errorf("fallocate %d+%d: %v", off, n, err)
	}
	x.grow(off + n)
	return x.checkRange(off, n)
}

func (x *fsx) punch() error {
	if len(x.model) == 0 {
		return nil
	}
	off, n := x.span(len(x.model) - 1)
	x.note("punch %d+%d", off, n)
	if err := unix.Fallocate(x.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(n)); err != nil {
		return fmt.Errorf("punch %d+%d: %v", off, n, err)
	}
	clear(x.model[off:min(off+n, len(x.model))])
	return x.checkRange(off, n)
}

func (x *fsx) mmapRead() error {
	size := len(x.model)
	if size == 0 {
		return nil
	}
	b, err := unix.Mmap(x.fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap %d: %v", size, err)
	}
	defer unix.Munmap(b)
	off, n := x.span(size - 1)
	n = min(n, size-off)
	x.note("mmapread %d+%d", off, n)
	if i := firstDiff(b[off:off+n], x.model[off:off+n]); i >= 0 {
		return fmt.Errorf("mmap read %d+%d: byte %d is %#x, want %#x", off, n, off+i, b[off+i], x.model[off+i])
	}
	return nil
}

func (x *fsx) mmapWrite() error {
	size := len(x.model)
	if size == 0 {
		return nil
	}
	b, err := unix.Mmap(x.fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap %d: %v", size, err)
	}
	off, n := x.span(size - 1)
	n = min(n, size-off)
	x.note("mmapwrite %d+%d", off, n)
	copy(b[off:off+n], x.randomBytes(n))
	copy(x.model[off:off+n], b[off:off+n])
	if x.rng.IntN(2) == 0 {
		if err := unix.Msync(b, unix.MS_SYNC); err != nil {
			unix.Munmap(b)
			return fmt.Errorf("msync: %v", err)
		}
	}
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("munmap: %v", err)
	}
	return x.checkRange(off, n)
}

// mmapMix keeps a shared mapping while the file is written and read with
// pwrite and pread: each must see the other's bytes at once.
func (x *fsx) mmapMix() error {
	size := len(x.model)
	if size == 0 {
		return nil
	}
	b, err := unix.Mmap(x.fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap %d: %v", size, err)
	}
	defer unix.Munmap(b)
	off, n := x.span(size - 1)
	n = min(n, size-off)
	x.note("mmapmix: pwrite %d+%d, read through the map", off, n)
	data := x.randomBytes(n)
	if k, err := unix.Pwrite(x.fd, data, int64(off)); err != nil || k != n {
		return fmt.Errorf("pwrite %d+%d: %d, %v", off, n, k, err)
	}
	copy(x.model[off:], data)
	if i := firstDiff(b[off:off+n], data); i >= 0 {
		return fmt.Errorf("map after pwrite %d+%d: byte %d is %#x, want %#x", off, n, off+i, b[off+i], data[i])
	}
	off, n = x.span(size - 1)
	n = min(n, size-off)
	x.note("mmapmix: write the map %d+%d, pread", off, n)
	copy(b[off:off+n], x.randomBytes(n))
	copy(x.model[off:off+n], b[off:off+n])
	return x.checkRange(off, n)
}

func (x *fsx) seek() error {
	size := len(x.model)
	off := x.rng.IntN(size + 2)
	x.note("seek data/hole %d (size %d)", off, size)
	for _, whence := range []int{unix.SEEK_DATA, unix.SEEK_HOLE} {
		got, err := unix.Seek(x.fd, int64(off), whence)
		switch {
		case off >= size:
			if err != unix.ENXIO {
				return fmt.Errorf("lseek(%d, whence %d) at or past the end (%d): %d, %v; want ENXIO", off, whence, size, got, err)
			}
		case err != nil:
			return fmt.Errorf("lseek(%d, whence %d): %v", off, whence, err)
		case whence == unix.SEEK_DATA && got != int64(off), whence == unix.SEEK_HOLE && got != int64(size):
			return fmt.Errorf("lseek(%d, whence %d) = %d", off, whence, got)
		}
	}
	return nil
}

func (x *fsx) reopen() error {
	x.note("close and reopen")
	if err := unix.Close(x.fd); err != nil {
		return fmt.Errorf("close: %v", err)
	}
	fd, err := unix.Open(x.path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("reopen: %v", err)
	}
	x.fd = fd
	return x.checkAll()
}

func (x *fsx) dropCache() error {
	x.note("drop page cache")
	if err := unix.Fadvise(x.fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("fadvise: %v", err)
	}
	return x.checkAll()
}

func (x *fsx) fsync() error {
	x.note("fsync")
	if err := unix.Fsync(x.fd); err != nil {
		return fmt.Errorf("fsync: %v", err)
	}
	return nil
}

func (x *fsx) checkSize() error {
	var st unix.Stat_t
	if err := unix.Fstat(x.fd, &st); err != nil {
		return fmt.Errorf("fstat: %v", err)
	}
	if st.Size != int64(len(x.model)) {
		return fmt.Errorf("size %d, want %d", st.Size, len(x.model))
	}
	return nil
}

// checkRange reads [off, off+n) and compares it with the model, including
// a short read at the end of the file.
func (x *fsx) checkRange(off, n int) error {
	buf := make([]byte, n)
	k, err := unix.Pread(x.fd, buf, int64(off))
	if err != nil {
		return fmt.Errorf("pread %d+%d: %v", off, n, err)
	}
	want := []byte{}
	if off < len(x.model) {
		want = x.model[off:min(off+n, len(x.model))]
	}
	if k != len(want) {
		return fmt.Errorf("pread %d+%d: %d bytes, want %d (size %d)", off, n, k, len(want), len(x.model))
	}
	if i := firstDiff(buf[:k], want); i >= 0 {
		return fmt.Errorf("pread %d+%d: byte %d is %#x, want %#x", off, n, off+i, buf[i], want[i])
	}
	return nil
}

func (x *fsx) checkAll() error {
	if err := x.checkSize(); err != nil {
		return err
	}
	return x.checkRange(0, len(x.model)+1)
}

// randomBytes returns n nonzero random bytes (a punched hole reads as
// zeros, so written data never does).
func (x *fsx) randomBytes(n int) []byte {
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], x.rng.Uint64()|0x0101010101010101)
	}
	return b[:n]
}

// firstDiff returns the first offset where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		t.Fatalf("%s=%q is not a positive number", name, s)
	}
	return v
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func lastLine(b []byte, prefix string) string {
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
