package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/meta"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestPatchgroupPowerCut is the crash checker of the patchgroups issue
// with a real loss of power: two meta servers in async durability on
// crashable in-memory file systems (what was not synced is lost at the
// cut), INBOX on one and Saved on the other. The server of INBOX syncs its
// WAL every 5 ms, the server of Saved never on its own, so without
// ordering an EXPUNGE becomes durable long before the COPY it follows. A
// mail move runs with patchgroups (each EXPUNGE depends on its COPY, each
// COPY on the previous EXPUNGE), the power is cut at a random point, and
// the servers come back from what their disks kept. Then every message is
// in INBOX or in Saved, whole, never in neither. The same move without
// patchgroups must lose messages, or the checker could not see a
// violation. WEFT_PGCRASH_RUNS sets the runs (make pgcrash).
func TestPatchgroupPowerCut(t *testing.T) {
	runs := 2
	if v, err := strconv.Atoi(os.Getenv("WEFT_PGCRASH_RUNS")); err == nil && v > 0 {
		runs = v
	}
	for run := range runs {
		if v := powerCutRun(t, true, false); v != "" {
			t.Errorf("run %d with patchgroups: %s", run, v)
		}
		// A write-back client queues the changes and sends them in
		// batches: the groups order the batches.
		if v := powerCutRun(t, true, true); v != "" {
			t.Errorf("run %d with patchgroups and a write-back client: %s", run, v)
		}
	}
	// The control run loses nothing by luck when the Saved server's WAL
	// was synced (a WAL rotation, for one, syncs it) between the last EXPUNGE
	// batch's copies and the cut: about 1 cut in 20. Three cuts that all
	// lose nothing mean the checker cannot see a violation.
	for try := range 3 {
		if v := powerCutRun(t, false, false); v != "" {
			t.Logf("without patchgroups (cut %d): %s", try+1, v)
			return
		}
	}
	t.Errorf("without patchgroups three power cuts lost nothing: the checker cannot tell")
}

const cutMessages, cutBatch = 200, 10

// cutCluster is two meta servers on crashable file systems and a mem store.
type cutCluster struct {
	t      *testing.T
	cfg    *config.Cluster
	fss    []*vfs.MemFS
	metas  []*meta.Server
	rpcs   []*rpc.Server
	every  []time.Duration // each meta server's WAL sync interval
	split  int             // the split threshold
	store  *cluster.Server
	client *client.Client
	wb     bool // the client writes back (client.Config.WriteBack)
	// batches counts the write-back batches the clients sent.
	batches batchCounter
}

type batchCounter struct{ n atomic.Int64 }

func (b *batchCounter) Observe(method uint16, _ time.Duration, _, _ int, err error) {
	if method == weftpb.MethodApplyBatch && err == nil {
		b.n.Add(1)
	}
}

func newCutCluster(t *testing.T) *cutCluster {
	cc := &cutCluster{t: t, cfg: config.Default(), fss: []*vfs.MemFS{vfs.NewCrashableMem(), vfs.NewCrashableMem()}}
	for range 2 {
		ln, err := rpc.ListenPicked()
		if err != nil {
			t.Fatal(err)
		}
		ln.Close() // the address is taken again by start
		cc.cfg.Meta = append(cc.cfg.Meta, config.DefaultMetaServer(ln.Addr().String(), "/meta"))
	}
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := config.DefaultStoreServer(sln.Addr().String(), filepath.Join(t.TempDir(), "store"))
	st.Backend, st.MemLimit = config.BackendMem, 1<<30
	cc.cfg.Store = []config.StoreServer{st}
	cc.cfg.Durability = config.DurabilityAsync
	if cc.store, err = cluster.StartStore(context.Background(), cc.cfg, 0, cluster.Options{Listener: sln}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.store.Close() })
	// Until the directories are placed: the root splits at once, so that
	// new directories land on both servers.
	cc.every, cc.split = []time.Duration{time.Hour, time.Hour}, 2
	cc.metas, cc.rpcs = make([]*meta.Server, 2), make([]*rpc.Server, 2)
	for id := range 2 {
		cc.start(id)
	}
	t.Cleanup(cc.stop)
	return cc
}

func (cc *cutCluster) start(id int) {
	var peers []string
	for _, m := range cc.cfg.Meta {
		peers = append(peers, m.Addr)
	}
	s, err := meta.Open(meta.Config{ID: id, Dir: "/meta", FS: cc.fss[id], Peers: peers, Durability: meta.DurabilityAsync,
		AsyncInterval: cc.every[id], SplitThreshold: cc.split, SplitBits: 1, Stores: []string{cc.cfg.Store[0].Addr}, ChunkSize: int64(cc.cfg.ChunkSize), Replication: 1})
	if err != nil {
		cc.t.Fatal(err)
	}
	var ln net.Listener
	for deadline := time.Now().Add(5 * time.Second); ; {
		if ln, err = net.Listen("tcp", cc.cfg.Meta[id].Addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		cc.t.Fatal(err)
	}
	mux := rpc.NewMux()
	s.Register(mux)
	r := rpc.NewServer(mux, rpc.ServerOptions{})
	go r.Serve(ln)
	cc.metas[id], cc.rpcs[id] = s, r
}

func (cc *cutCluster) stop() {
	if cc.client != nil {
		cc.client.Close()
		cc.client = nil
	}
	for id := range cc.metas {
		if cc.rpcs[id] != nil {
			cc.rpcs[id].Close()
			cc.metas[id].Close()
			cc.rpcs[id], cc.metas[id] = nil, nil
		}
	}
}

func (cc *cutCluster) newClient() *client.Client {
	cfg := cluster.ClientConfig(cc.cfg, core.Root, nil)
	cfg.WriteBack = cc.wb
	cfg.Dial.Observer = &cc.batches
	c, err := client.New(cfg)
	if err != nil {
		cc.t.Fatal(err)
	}
	cc.client = c
	return c
}

// powerCut keeps what each server's disk holds now, stops everything and
// starts the meta servers again on it.
func (cc *cutCluster) powerCut() {
	for id := range cc.fss {
		cc.fss[id] = cc.fss[id].CrashClone(vfs.CrashCloneCfg{})
	}
	cc.stop()
	for id := range cc.metas {
		cc.start(id)
	}
}

// dirOn makes directory path so that meta server id holds it: it makes
// path+suffixes until one lands there (the parent splits in the
// background), for up to 20 s, and renames that one to path.
func dirOn(ctx context.Context, t *testing.T, c *client.Client, path string, id int) {
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		p := fmt.Sprintf("%s.%d", path, i)
		if err := c.Mkdir(ctx, p, 0o755); err != nil {
			t.Fatal(err)
		}
		a, err := c.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if core.Ino(a.Ino).Server() == id {
			if err := c.Rename(ctx, p, path, 0); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no directory on meta server %d", id)
}

func cutName(i int) string { return fmt.Sprintf("%d.M%dP1.weft:2,S", 1700000000+i, i) }

func cutBody(i int) []byte {
	line := []byte(fmt.Sprintf("message %d ", i))
	return bytes.Repeat(line, 2048/len(line)+1)[:2048]
}

func powerCutRun(t *testing.T, withPG, writeBack bool) string {
	ctx := context.Background()
	cc := newCutCluster(t)
	c := cc.newClient()
	cc.wb = writeBack // from the move on: the set-up is synced anyway
	dirOn(ctx, t, c, "/INBOX", 0)
	dirOn(ctx, t, c, "/Saved", 1)
	for _, d := range []string{"/Saved/tmp", "/Saved/cur"} {
		dirOn(ctx, t, c, d, 1)
	}
	if err := c.SyncNamespace(ctx); err != nil {
		t.Fatal(err)
	}
	// Now no more splits (the folders stay whole on their servers), the
	// INBOX server syncs often, the Saved server only when asked.
	cc.stop()
	cc.every, cc.split = []time.Duration{5 * time.Millisecond, time.Hour}, 1_000_000
	for id := range cc.metas {
		cc.start(id)
	}
	c = cc.newClient()
	for i := range cutMessages {
		if err := writeWhole(ctx, c, "/INBOX/"+cutName(i), cutBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SyncNamespace(ctx); err != nil {
		t.Fatal(err)
	}
	cc.batches.n.Store(0)
	// The cut comes at a random operation of the move, after the first
	// EXPUNGE (3 operations a message: create, rename, unlink).
	if err := moveMail(ctx, c, withPG, 3*cutBatch+rand.IntN(3*(cutMessages-cutBatch))); err != nil {
		t.Fatal(err)
	}
	if writeBack && cc.batches.n.Load() == 0 {
		t.Fatalf("the write-back client sent no batch: the changes did not go through its queues")
	}
	// The INBOX server's latest sync came just before the cut (as its
	// 5 ms timer makes likely anyway): without it the control run could
	// lose nothing by luck.
	if _, err := cc.metas[0].SyncMeta(ctx, &weftpb.SyncMetaRequest{}); err != nil {
		t.Fatal(err)
	}
	cc.powerCut()
	c = cc.newClient()
	var bad []string
	for i := range cutMessages {
		_, err := c.Stat(ctx, "/INBOX/"+cutName(i))
		inInbox := err == nil
		if err != nil && !errs.Is(err, errs.NotExist) {
			t.Fatal(err)
		}
		saved, err := readWhole(ctx, c, "/Saved/cur/"+cutName(i))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case saved != nil && !bytes.Equal(saved, cutBody(i)):
			bad = append(bad, fmt.Sprintf("message %d in Saved has %d wrong bytes", i, len(saved)))
		case saved == nil && !inInbox:
			bad = append(bad, fmt.Sprintf("message %d is in neither folder", i))
		}
	}
	cc.stop()
	if len(bad) > 3 {
		bad = append(bad[:3], fmt.Sprintf("and %d more", len(bad)-3))
	}
	return fmt.Sprint(bad)[1 : len(fmt.Sprint(bad))-1]
}

// moveMail moves every message from INBOX to Saved, cutBatch at a time,
// and stops before its operation number cutAt (nothing of it is in flight
// at the cut).
func moveMail(ctx context.Context, c *client.Client, withPG bool, cutAt int) error {
	ops := 0
	stop := func() bool { ops++; return ops > cutAt }
	var prev *client.Patchgroup
	group := func(after *client.Patchgroup) (*client.Patchgroup, error) {
		if !withPG {
			return nil, nil
		}
		g := c.NewPatchgroup()
		if after != nil {
			if err := g.DependOn(after); err != nil {
				return nil, err
			}
		}
		return g, c.Engage(g)
	}
	end := func(g *client.Patchgroup) error {
		if g == nil {
			return nil
		}
		return c.Disengage(g)
	}
	for start := 0; start < cutMessages; start += cutBatch {
		copyG, err := group(prev)
		if err != nil {
			return err
		}
		for i := start; i < start+cutBatch; i++ {
			if stop() {
				return end(copyG)
			}
			if err := writeWhole(ctx, c, "/Saved/tmp/"+cutName(i), cutBody(i)); err != nil {
				return err
			}
			if stop() {
				return end(copyG)
			}
			if err := c.Rename(ctx, "/Saved/tmp/"+cutName(i), "/Saved/cur/"+cutName(i), 0); err != nil {
				return err
			}
		}
		if err := end(copyG); err != nil {
			return err
		}
		expunge, err := group(copyG)
		if err != nil {
			return err
		}
		for i := start; i < start+cutBatch; i++ {
			if stop() {
				return end(expunge)
			}
			if err := c.Unlink(ctx, "/INBOX/"+cutName(i)); err != nil {
				return err
			}
		}
		if err := end(expunge); err != nil {
			return err
		}
		prev = expunge
	}
	return nil
}

func writeWhole(ctx context.Context, c *client.Client, path string, data []byte) error {
	f, err := c.Create(ctx, path, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

// readWhole returns the file's content, or nil if it does not exist.
func readWhole(ctx context.Context, c *client.Client, path string) ([]byte, error) {
	f, err := c.Open(ctx, path, os.O_RDONLY, 0)
	if errs.Is(err, errs.NotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}
