package client_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/repair"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/waitfor"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// ecCluster is one meta server and a set of mem stores in this process,
// erasure-coded, whose stores a test stops and starts again (empty).
type ecCluster struct {
	t      testing.TB
	cfg    *config.Cluster
	stores []*cluster.Server
}

func newECCluster(t testing.TB, redundancy string, nStores int) *ecCluster {
	return newECClusterBackend(t, redundancy, nStores, config.BackendMem)
}

// newECClusterBackend is newECCluster with stores of the given backend.
func newECClusterBackend(t testing.TB, redundancy string, nStores int, backend string) *ecCluster {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	listen := func() net.Listener {
		ln, err := rpc.ListenPicked() // a killed store restarts on its address
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	mln := listen()
	cfg.Meta = []config.MetaServer{config.DefaultMetaServer(mln.Addr().String(), filepath.Join(dir, "meta0"))}
	var slns []net.Listener
	for range nStores {
		ln := listen()
		slns = append(slns, ln)
		st := config.StoreServer{Addr: ln.Addr().String(), Backend: backend, MemLimit: 256 << 20}
		if backend == config.BackendDisk {
			st.MemLimit, st.Dir = 0, filepath.Join(dir, fmt.Sprintf("store%d", len(cfg.Store)))
		}
		cfg.Store = append(cfg.Store, st)
	}
	if err := cfg.SetRedundancy(redundancy); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := cluster.StartMeta(ctx, cfg, 0, cluster.Options{Listener: mln})
	if err != nil {
		t.Fatalf("start meta: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	ec := &ecCluster{t: t, cfg: cfg, stores: make([]*cluster.Server, nStores)}
	// Free the stores' ports before any starts: a starting store asks its
	// peers whether they hold chunks, and a port nobody serves yet would
	// keep it waiting for its bound instead of being refused at once.
	for _, ln := range slns {
		ln.Close()
	}
	for i := range nStores {
		ec.startStore(i)
	}
	t.Cleanup(func() {
		for _, s := range ec.stores {
			if s != nil {
				s.Close()
			}
		}
	})
	return ec
}

func (ec *ecCluster) startStore(i int) {
	ec.t.Helper()
	ln, err := net.Listen("tcp", ec.cfg.Store[i].Addr)
	if err != nil {
		ec.t.Fatalf("listen on store %d's address: %v", i, err)
	}
	s, err := cluster.StartStore(context.Background(), ec.cfg, i, cluster.Options{Listener: ln})
	if err != nil {
		ec.t.Fatalf("start store %d: %v", i, err)
	}
	ec.stores[i] = s
}

func (ec *ecCluster) stopStore(i int) {
	ec.stores[i].Close()
	ec.stores[i] = nil
}

func (ec *ecCluster) client(chunkSize int64) *client.Client {
	ec.t.Helper()
	return ec.clientWith(chunkSize, nil)
}

// clientWith is client with adjust applied to its config.
func (ec *ecCluster) clientWith(chunkSize int64, adjust func(*client.Config)) *client.Client {
	ec.t.Helper()
	cc := cluster.ClientConfig(ec.cfg, core.Root, nil)
	cc.ChunkSize = chunkSize
	cc.InlineLimit = -1
	cc.ReplicaTimeout = 200 * time.Millisecond
	cc.StoreTimeout = 5 * time.Second
	// These tests watch what reads get from the stores (rebuilds, EIO
	// after a loss): a file read again must not come from memory.
	cc.ReadCache = -1
	if adjust != nil {
		adjust(&cc)
	}
	c, err := client.New(cc)
	if err != nil {
		ec.t.Fatalf("client: %v", err)
	}
	ec.t.Cleanup(func() { c.Close() })
	return c
}

// repair runs a repair pass over every store.
func (ec *ecCluster) repair(t testing.TB) *repair.Report {
	return ec.runRepair(t, repair.Config{})
}

// repairVerify is repair, with verify reading every unit.
func (ec *ecCluster) repairVerify(t testing.TB, verify bool) *repair.Report {
	return ec.runRepair(t, repair.Config{Verify: verify})
}

// runRepair runs a repair pass with cfg over every store of the cluster.
func (ec *ecCluster) runRepair(t testing.TB, cfg repair.Config) *repair.Report {
	t.Helper()
	for _, s := range ec.cfg.Store {
		p := rpc.NewPeer(s.Addr, rpc.DialOptions{})
		defer p.Close()
		cfg.Stores = append(cfg.Stores, p)
	}
	cfg.Replication, cfg.Erasure, cfg.Only = 1, ec.cfg.Erasure(), -1
	cfg.Logger = slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := repair.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	return rep
}

// testLogWriter writes a logger's lines to the test's log, where a
// failure shows them.
type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

const ecChunk = 64 << 10

func readAll(t testing.TB, c *client.Client, path string) ([]byte, error) {
	t.Helper()
	f, err := c.Open(context.Background(), path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// TestErasureModel writes files with random partial writes, holes,
// truncates and O_TRUNC reopens on ec:3+2 over 5 mem stores, then checks
// that with one and then two stores stopped or restarted empty every byte
// reads back as the model says: never an error, never a wrong byte.
func TestErasureModel(t *testing.T) {
	testErasureModel(t, nil)
}

// TestErasureModelBusyCache is TestErasureModel with a parity cache of two
// frames flushed after 5 ms: its flusher runs all the time, alongside the
// writes and truncates.
func TestErasureModelBusyCache(t *testing.T) {
	testErasureModel(t, func(cc *client.Config) { cc.ParityFrames, cc.ParityFrameAge = 2, 5*time.Millisecond })
}

// TestErasureModelHedged is TestErasureModelBusyCache with every unit read
// hedged at once by a rebuild from the rest of its stripe (as a read of a
// slow or suspect store is), inside writes too: the rebuild or the unit's
// own read, whichever loses, is canceled as the other answers. Before
// their fixes it failed every run: a hedge canceled just after its stripe
// lock was granted left the lock to lapse (repair raced), and a call
// canceled as its frame was written cut the store's connection, failing
// the other calls on it (docs/design.md).
func TestErasureModelHedged(t *testing.T) {
	testErasureModel(t, func(cc *client.Config) {
		cc.ParityFrames, cc.ParityFrameAge, cc.ReplicaTimeout = 2, 5*time.Millisecond, time.Microsecond
	})
}

// TestErasureModelHedgedNoCache is TestErasureModelHedged without the
// parity cache.
func TestErasureModelHedgedNoCache(t *testing.T) {
	testErasureModel(t, func(cc *client.Config) { cc.ParityFrames, cc.ReplicaTimeout = -1, time.Microsecond })
}

// TestErasureModelNoCache is TestErasureModel without the parity cache:
// every partial-stripe write is a reconstruct-write whose data unit's
// store keeps the replaced bytes (keep_old; the mem backend's kept blocks).
func TestErasureModelNoCache(t *testing.T) {
	testErasureModel(t, func(cc *client.Config) { cc.ParityFrames = -1 })
}

func testErasureModel(t *testing.T, adjust func(*client.Config)) {
	ec := newECCluster(t, "ec:3+2", 5)
	c := ec.clientWith(ecChunk, adjust)
	ctx := context.Background()
	files := map[string][]byte{}
	oplog := map[string][]string{}
	rapid.Check(t, func(rt *rapid.T) {
		path := fmt.Sprintf("/f%d", len(files))
		f, err := c.Create(ctx, path, 0o644)
		if err != nil {
			rt.Fatal(err)
		}
		var model []byte
		limit := 3 * 3 * ecChunk
		for range rapid.IntRange(1, 12).Draw(rt, "ops") {
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0:
				size := rapid.IntRange(0, len(model)).Draw(rt, "size")
				if err := f.Truncate(int64(size)); err != nil {
					rt.Fatalf("truncate %d: %v", size, err)
				}
				model = model[:size]
				oplog[path] = append(oplog[path], fmt.Sprintf("truncate to %d", size))
				continue
			case 1: // closed and opened again, maybe with O_TRUNC (an overwrite)
				if err := f.Close(); err != nil {
					rt.Fatal(err)
				}
				flags := os.O_RDWR
				if rapid.Bool().Draw(rt, "O_TRUNC") {
					flags |= os.O_TRUNC
					model = model[:0]
				}
				if f, err = c.Open(ctx, path, flags, 0); err != nil {
					rt.Fatal(err)
				}
				oplog[path] = append(oplog[path], fmt.Sprintf("reopen, O_TRUNC %v", flags&os.O_TRUNC != 0))
				continue
			}
			off := rapid.IntRange(0, limit).Draw(rt, "off")
			n := rapid.IntRange(1, 2*ecChunk).Draw(rt, "n")
			p := bytes.Repeat([]byte{byte(rapid.IntRange(1, 255).Draw(rt, "b"))}, n)
			p[0] = byte(off)
			if _, err := f.WriteAt(p, int64(off)); err != nil {
				rt.Fatalf("write %d at %d: %v", n, off, err)
			}
			if len(model) < off+n {
				model = append(model, make([]byte, off+n-len(model))...)
			}
			copy(model[off:], p)
			oplog[path] = append(oplog[path], fmt.Sprintf("write %d bytes at %d", n, off))
		}
		if err := f.Close(); err != nil {
			rt.Fatal(err)
		}
		files[path] = model
	})
	check := func(what string) {
		t.Helper()
		for path, want := range files {
			got, err := readAll(t, c, path)
			if err != nil || !bytes.Equal(got, want) {
				explainModelFailure(t, ec, c, path, oplog[path], got, want)
			}
			if err != nil {
				t.Fatalf("%s: read %s: %v", what, path, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: %s differs from what was written (%d bytes, want %d)", what, path, len(got), len(want))
			}
		}
	}
	check("all stores up")
	ec.stopStore(0)
	check("store 0 down")
	ec.startStore(0) // empty and incomplete: it serves no reads
	check("store 0 back empty")
	ec.stopStore(3)
	check("store 0 empty, store 3 down")
	ec.startStore(3)
	check("stores 0 and 3 back empty")

	// Repair rebuilds the two empty stores; then two others may go. A
	// stripe whose parity this live client still caches (marked stale)
	// is left to the next pass: the frames reach the stores within
	// ParityFrameAge, or at once when the stripe is read degraded.
	waitfor.Until(t, 10*time.Second, "the client's parity frames flushed", func() bool { return c.ParityCacheStats().Frames == 0 })
	rep := ec.repair(t)
	if !rep.Clean() || len(rep.Completed) != 2 || rep.Copied == 0 {
		t.Fatalf("repair: %v", rep)
	}
	t.Logf("repair: %v", rep)
	ec.stopStore(1)
	ec.stopStore(4)
	check("repaired; stores 1 and 4 down")
	ec.startStore(1)
	ec.startStore(4)
	if rep := ec.repair(t); !rep.Clean() || len(rep.Completed) != 2 {
		t.Fatalf("second repair: %v", rep)
	}
	ec.stopStore(0)
	ec.stopStore(3)
	check("repaired again; stores 0 and 3 down")
	st := c.ErasureStats()
	if st.Rebuilds == 0 {
		t.Fatalf("no rebuild happened: %+v", st)
	}
	t.Logf("transfers: %+v", st)
}

// TestErasureTooManyDown: with more stores down than a stripe has parity
// units, a read fails with EIO and returns no bytes.
func TestErasureTooManyDown(t *testing.T) {
	ec := newECCluster(t, "ec:4+1", 5)
	c := ec.client(ecChunk)
	ctx := context.Background()
	data := bytes.Repeat([]byte("weft"), 3*ecChunk)
	f, err := c.Create(ctx, "/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ec.stopStore(1)
	ec.stopStore(3)
	got, err := readAll(t, c, "/f")
	if !errs.Is(err, errs.IO) {
		t.Fatalf("read with 2 of 5 stores down under 4+1: %d bytes, error %v; want EIO", len(got), err)
	}
}

// TestErasureSuspectStoreStillRead: a store that failed lately is read in
// parallel with a rebuild; when the rebuild cannot succeed (another store
// is down now), the store's own answer must still be taken, not an EIO.
func TestErasureSuspectStoreStillRead(t *testing.T) {
	ec := newECCluster(t, "ec:4+1", 5)
	c := ec.client(ecChunk)
	ctx := context.Background()
	data := make([]byte, 9*ecChunk)
	for i := range data {
		data[i] = byte(i*7 + i>>9)
	}
	f, err := c.Create(ctx, "/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []int{0, 1} {
		ec.stopStore(s) // every store of the stripe is suspect in turn
		if got, err := readAll(t, c, "/f"); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("store %d down: %v", s, err)
		}
		ec.startStore(s)
		if rep := ec.repair(t); !rep.Clean() {
			t.Fatalf("repair: %v", rep)
		}
	}
	ec.stopStore(2)
	got, err := readAll(t, c, "/f")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("store 2 down, stores 0 and 1 repaired but suspect: %v", err)
	}
}

// TestErasureFailedWriteRolledBack: a write whose parity store is down
// fails, and the data range it did write is put back, so that once the
// parity store is back (a disk store: with its old parity), a rebuild of
// the stripe's other data unit still gives that unit's bytes.
func TestErasureFailedWriteRolledBack(t *testing.T) {
	ec := newECClusterBackend(t, "ec:2+1", 3, config.BackendDisk)
	c := ec.client(ecChunk)
	ctx := context.Background()
	data := make([]byte, 2*ecChunk)
	for i := range data {
		data[i] = byte(i*13 + 1)
	}
	f, err := c.Create(ctx, "/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	sc := ec.cfg.Erasure()
	stores := sc.Stores(f.Ino(), 0, 3) // d0, d1, parity
	ec.stopStore(stores[2])
	w := ec.client(ecChunk)
	g, err := w.Open(ctx, "/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.WriteAt(bytes.Repeat([]byte{0xee}, 1000), 500)
	if err == nil {
		err = g.Sync()
	}
	g.Close()
	if !errs.Is(err, errs.IO) {
		t.Fatalf("a write with its parity store down: %v, want EIO", err)
	}
	ec.startStore(stores[2]) // a disk store: its parity is as it was
	ec.stopStore(stores[1])  // d1 now reads by rebuilding from d0 and parity
	got, err := readAll(t, ec.client(ecChunk), "/f")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[ecChunk:], data[ecChunk:]) {
		t.Fatalf("chunk 1, rebuilt after a failed write to chunk 0, differs from what was written")
	}
}

// TestErasureRepairVerifyFixesStaleParity: parity that does not match its
// data (written here behind the client's back, as a crash between a write's
// data and its parity leaves it) is found by repair --verify and rewritten
// from the data, so a later rebuild gives the right bytes.
func TestErasureRepairVerifyFixesStaleParity(t *testing.T) {
	ec := newECClusterBackend(t, "ec:2+1", 3, config.BackendDisk)
	c := ec.client(ecChunk)
	ctx := context.Background()
	data := make([]byte, 2*ecChunk)
	for i := range data {
		data[i] = byte(i*5 + 3)
	}
	f, err := c.Create(ctx, "/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	sc := ec.cfg.Erasure()
	stores := sc.Stores(f.Ino(), 0, 3)
	p := rpc.NewPeer(ec.cfg.Store[stores[2]].Addr, rpc.DialOptions{})
	defer p.Close()
	req := &pb.WriteChunkRequest{Chunk: &pb.ChunkID{Ino: uint64(f.Ino()), Index: sc.ParityIndex(0, 0)}, Offset: 100}
	if _, err := p.CallData(ctx, pb.MethodWriteChunk, req, []byte("stale parity"), &pb.WriteChunkReply{}); err != nil {
		t.Fatal(err)
	}
	rep := ec.repairVerify(t, true)
	if rep.Stale != 1 || !rep.Clean() {
		t.Fatalf("repair --verify: %v; want the stale parity unit rewritten", rep)
	}
	ec.stopStore(stores[1])
	got, err := readAll(t, ec.client(ecChunk), "/f")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after repair --verify, chunk 1 rebuilt from chunk 0 and parity: %v, equal %v", err, bytes.Equal(got, data))
	}
}

// TestErasureTransfersPerSmallWrite pins the cost of writes: a whole
// stripe written in order goes out as one full-stripe write (k+m unit
// writes, no reads; stripefull.go), and a small write into a written
// stripe (reconstruct-write, stripe.go) costs k-1 range reads (the other
// data units; the unit's own old bytes stay on its store for a rollback,
// stripeundo.go) and 1+m range writes.
func TestErasureTransfersPerSmallWrite(t *testing.T) {
	ec := newECCluster(t, "ec:4+1", 5)
	c := ec.client(ecChunk)
	ctx := context.Background()
	f, err := c.Create(ctx, "/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 4*ecChunk)); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	before := c.ErasureStats()
	if before.Reads != 0 || before.Writes != 5 {
		t.Fatalf("a full stripe cost %d reads and %d writes; want 0 and 5", before.Reads, before.Writes)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{1}, 4096), ecChunk+100); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	after := c.ErasureStats()
	reads, writes := after.Reads-before.Reads, after.Writes-before.Writes
	t.Logf("a 4 KiB write into a written ec:4+1 stripe: %d unit reads, %d unit writes", reads, writes)
	if reads != 3 || writes != 2 || after.Rebuilds != before.Rebuilds {
		t.Fatalf("a small write cost %d reads and %d writes (%d rebuilds); want 3 and 2", reads, writes, after.Rebuilds-before.Rebuilds)
	}
}

// explainModelFailure logs what a model test did to path (ops), where
// the bytes read differ from the model, and what the stores hold of each
// unit and stale mark of the file's first stripes, for a failure that may
// not come again.
func explainModelFailure(t *testing.T, ec *ecCluster, c *client.Client, path string, ops []string, got, want []byte) {
	t.Helper()
	for _, o := range ops {
		t.Logf("op %s", o)
	}
	for i := 0; i < min(len(got), len(want)); i++ {
		j := i
		for j < min(len(got), len(want)) && got[j] != want[j] {
			j++
		}
		if j > i {
			t.Logf("differs at [%d,%d): got %#x, want %#x", i, j, got[i], want[i])
			i = j
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := c.Stat(ctx, path)
	if err != nil {
		t.Logf("stat %s: %v", path, err)
		return
	}
	t.Logf("%s: inode %d, size %d, parity cache %+v", path, a.Ino, a.Size, c.ParityCacheStats())
	sc := ec.cfg.Erasure()
	peers := make([]*rpc.Peer, len(ec.cfg.Store))
	for i, s := range ec.cfg.Store {
		peers[i] = rpc.NewPeer(s.Addr, rpc.DialOptions{})
		defer peers[i].Close()
	}
	held := func(s int, index uint64, n int64) string {
		var r pb.ReadChunkReply
		req := &pb.ReadChunkRequest{Chunk: &pb.ChunkID{Ino: uint64(a.Ino), Index: index}, Length: n}
		if _, err := peers[s].CallData(ctx, pb.MethodReadChunk, req, nil, &r); err != nil {
			return err.Error()
		}
		return fmt.Sprintf("found %v, %d bytes", r.Found, r.ChunkSize)
	}
	for st := range uint64(4) {
		stores := sc.Stores(a.Ino, st, len(peers))
		for pos := range sc.Width() {
			line := fmt.Sprintf("stripe %d unit %d on store %d: %s", st, pos, stores[pos], held(stores[pos], sc.UnitIndex(st, pos), ecChunk))
			if pos >= sc.K {
				line += "; mark: " + held(stores[pos], sc.MarkIndex(st, pos-sc.K), 1)
			}
			t.Log(line)
		}
	}
}
