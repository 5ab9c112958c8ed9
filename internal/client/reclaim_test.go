package client_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/waitfor"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// reclaimCluster is one meta server and stores store servers (R=1, 64 KiB
// chunks) in this process, each store stoppable and restartable on its
// address with its data.
type reclaimCluster struct {
	t      *testing.T
	cfg    *config.Cluster
	stores []*cluster.Server
	c      *client.Client
}

const reclaimChunk = 64 << 10

func newReclaimCluster(t *testing.T, stores int) *reclaimCluster {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.ChunkSize = reclaimChunk
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
	for i := range stores {
		ln := listen()
		slns = append(slns, ln)
		cfg.Store = append(cfg.Store, config.DefaultStoreServer(ln.Addr().String(), filepath.Join(dir, fmt.Sprintf("store%d", i))))
	}
	rc := &reclaimCluster{t: t, cfg: cfg, stores: make([]*cluster.Server, stores)}
	ctx := context.Background()
	m, err := cluster.StartMeta(ctx, cfg, 0, cluster.Options{Listener: mln})
	if err != nil {
		t.Fatalf("start meta: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	for i := range stores {
		rc.startStore(i, slns[i])
	}
	t.Cleanup(func() {
		for _, s := range rc.stores {
			if s != nil {
				s.Close()
			}
		}
	})
	cc := cluster.ClientConfig(cfg, core.Root, nil)
	cc.RetryFor = time.Second
	rc.c, err = client.New(cc)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { rc.c.Close() })
	return rc
}

// startStore starts store i, on ln or, when ln is nil, on its address again.
func (rc *reclaimCluster) startStore(i int, ln net.Listener) {
	rc.t.Helper()
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp", rc.cfg.Store[i].Addr)
		if err != nil {
			rc.t.Fatalf("listen again on store %d's address: %v", i, err)
		}
	}
	s, err := cluster.StartStore(context.Background(), rc.cfg, i, cluster.Options{Listener: ln})
	if err != nil {
		rc.t.Fatalf("start store %d: %v", i, err)
	}
	rc.stores[i] = s
}

func (rc *reclaimCluster) stopStore(i int) {
	rc.t.Helper()
	if err := rc.stores[i].Close(); err != nil {
		rc.t.Logf("stop store %d: %v", i, err)
	}
	rc.stores[i] = nil
}

// chunksOn returns how many chunks store i holds.
func (rc *reclaimCluster) chunksOn(i int) uint64 {
	rc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := rpc.Dial(ctx, rc.cfg.Store[i].Addr, rpc.DialOptions{})
	if err != nil {
		rc.t.Fatalf("dial store %d: %v", i, err)
	}
	defer conn.Close()
	var r pb.StoreStatFSReply
	if err := conn.Call(ctx, pb.MethodStoreStatFS, &pb.StoreStatFSRequest{}, &r); err != nil {
		rc.t.Fatalf("statfs store %d: %v", i, err)
	}
	return r.Chunks
}

func (rc *reclaimCluster) writeFile(path string, data []byte) core.Ino {
	rc.t.Helper()
	ctx := context.Background()
	f, err := rc.c.Create(ctx, path, 0o644)
	if err != nil {
		rc.t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		rc.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		rc.t.Fatal(err)
	}
	return f.Ino()
}

// TestUnlinkWithStoreDownReclaimsLater: an unlink while a store is down
// leaves that store's chunks behind; once it is back, the meta server's
// reclaimer deletes them without any client action.
func TestUnlinkWithStoreDownReclaimsLater(t *testing.T) {
	rc := newReclaimCluster(t, 2)
	ctx := context.Background()
	rc.writeFile("/big", pattern(8*reclaimChunk, 3))
	if rc.chunksOn(0) == 0 || rc.chunksOn(1) == 0 {
		t.Fatalf("chunks not spread: %d and %d", rc.chunksOn(0), rc.chunksOn(1))
	}
	rc.stopStore(1)
	if err := rc.c.Unlink(ctx, "/big"); err != nil {
		t.Fatalf("unlink with a store down: %v", err)
	}
	waitfor.Until(t, 20*time.Second, "store 0 still holds chunks of the unlinked file", func() bool { return rc.chunksOn(0) == 0 })
	rc.startStore(1, nil)
	waitfor.Until(t, 30*time.Second, "store 1 still holds chunks of the unlinked file after it came back", func() bool { return rc.chunksOn(1) == 0 })
}

// TestTruncateLostTailDoesNotReappear: a truncate whose drop on the stores
// fails (the store holding the new end is down) must not let the old bytes
// past the new size come back when the file grows again.
func TestTruncateLostTailDoesNotReappear(t *testing.T) {
	rc := newReclaimCluster(t, 2)
	ctx := context.Background()
	data := pattern(4*reclaimChunk, 7)
	ino := rc.writeFile("/f", data)
	newSize := int64(reclaimChunk + reclaimChunk/2)
	down := core.ChunkReplicas(ino, 1, 2, 1)[0] // holds the new end
	rc.stopStore(down)
	// The truncate may report the stores' failure, but once it is
	// committed the old bytes must never be seen again.
	if err := rc.c.Truncate(ctx, "/f", newSize); err != nil {
		t.Logf("truncate with store %d down: %v", down, err)
	}
	a, err := rc.c.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != uint64(newSize) {
		t.Skipf("truncate not committed (size %d): nothing to check", a.Size)
	}
	rc.startStore(down, nil)
	full := int64(len(data))
	waitfor.Until(t, 30*time.Second, "the file could not grow again", func() bool {
		err := rc.c.Truncate(ctx, "/f", full)
		if err != nil && !errs.Is(err, errs.Unavailable) {
			t.Fatalf("grow: %v", err)
		}
		return err == nil
	})
	f, err := rc.c.Open(ctx, "/f", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, full)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:newSize], data[:newSize]) {
		t.Fatal("bytes before the truncated size changed")
	}
	if i := bytes.IndexFunc(got[newSize:], func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("old bytes reappeared at offset %d after the file grew again", newSize+int64(i))
	}
}

// TestTruncateThenWriteSurvivesReclaim: the race the truncate's ordering
// closes. A truncate answers only after its drop finished (or, with a store
// down, refuses growth until it has), so a write right after it is never
// removed by the drop.
func TestTruncateThenWriteSurvivesReclaim(t *testing.T) {
	rc := newReclaimCluster(t, 2)
	ctx := context.Background()
	for round := range 20 {
		path := fmt.Sprintf("/r%d", round)
		rc.writeFile(path, pattern(3*reclaimChunk, byte(round)))
		f, err := rc.c.Open(ctx, path, 2, 0) // O_RDWR
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(reclaimChunk / 2); err != nil {
			t.Fatal(err)
		}
		fresh := pattern(3*reclaimChunk, byte(round+100))
		if _, err := f.WriteAt(fresh[reclaimChunk/2:], reclaimChunk/2); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		// Let any reclaim the truncate left run, then read.
		waitfor.Until(t, 10*time.Second, "reclaims pending", func() bool { return pendingReclaims(t, rc) == 0 })
		var buf bytes.Buffer
		if _, err := rc.c.ReadTo(ctx, path, &buf, nil); err != nil {
			t.Fatal(err)
		}
		want := append(pattern(3*reclaimChunk, byte(round))[:reclaimChunk/2], fresh[reclaimChunk/2:]...)
		if !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("round %d: the bytes written after the truncate did not survive", round)
		}
	}
}

// pendingReclaims counts the meta server's reclaim records.
func pendingReclaims(t *testing.T, rc *reclaimCluster) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := rpc.Dial(ctx, rc.cfg.Meta[0].Addr, rpc.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var r pb.ScanReply
	if err := conn.Call(ctx, pb.MethodScan, &pb.ScanRequest{Start: []byte("r"), End: []byte("s")}, &r); err != nil {
		t.Fatal(err)
	}
	return len(r.Pairs)
}

// TestOpenUnlinkedFileKeepsChunks: a file unlinked while this client holds
// it open stays readable until the last close; then its chunks go.
func TestOpenUnlinkedFileKeepsChunks(t *testing.T) {
	rc := newReclaimCluster(t, 2)
	ctx := context.Background()
	data := pattern(4*reclaimChunk, 9)
	rc.writeFile("/o", data)
	f, err := rc.c.Open(ctx, "/o", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.c.Unlink(ctx, "/o"); err != nil {
		t.Fatal(err)
	}
	// Give a wrongly unheld record every chance to run.
	waitfor.Until(t, 10*time.Second, "no held reclaim record", func() bool { return pendingReclaims(t, rc) == 1 })
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("open-unlinked file lost its bytes: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 20*time.Second, "chunks of the closed unlinked file remain", func() bool {
		return rc.chunksOn(0) == 0 && rc.chunksOn(1) == 0
	})
}

// TestReclaimAcrossMetaServers: with two meta servers and split
// directories, files removed by unlinks and renames that run across servers
// (hard links whose record lives on another server than the entry) leave no
// chunk behind.
func TestReclaimAcrossMetaServers(t *testing.T) {
	c, cfg := newMultiClient(t, 2, 4, 0, reclaimChunk)
	ctx := context.Background()
	for _, d := range []string{"/a", "/b"} {
		if err := c.Mkdir(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path string) {
		f, err := c.Create(ctx, path, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(pattern(2*reclaimChunk+100, 1)); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 12 {
		write(fmt.Sprintf("/a/f%d", i))
		write(fmt.Sprintf("/b/g%d", i))
		if i%3 == 0 {
			if err := c.Link(ctx, fmt.Sprintf("/a/f%d", i), fmt.Sprintf("/b/l%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 12 {
		if err := c.Rename(ctx, fmt.Sprintf("/b/g%d", i), fmt.Sprintf("/a/f%d", i), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.RemoveAll(ctx, "/a"); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveAll(ctx, "/b"); err != nil {
		t.Fatal(err)
	}
	rc := &reclaimCluster{t: t, cfg: cfg}
	waitfor.Until(t, 30*time.Second, "chunks left after every file went", func() bool { return rc.chunksOn(0) == 0 })
}
