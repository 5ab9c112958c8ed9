package fsck

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
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/internal/meta"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

var ctx = context.Background()

// testCluster is real meta servers and one store server on loopback ports
// in this process, which a test can stop and start again on the same
// addresses and data.
type testCluster struct {
	t       *testing.T
	cfg     *config.Cluster
	metas   []*cluster.Server
	clients []*client.Client
}

func newTestCluster(t *testing.T, metas, threshold int) *testCluster {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.SplitThreshold = threshold
	for i := range metas {
		cfg.Meta = append(cfg.Meta, config.DefaultMetaServer(freeAddr(t), filepath.Join(dir, fmt.Sprintf("meta%d", i))))
	}
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = []config.StoreServer{config.DefaultStoreServer(sln.Addr().String(), filepath.Join(dir, "store0"))}
	s, err := cluster.StartStore(ctx, cfg, 0, cluster.Options{Listener: sln})
	if err != nil {
		t.Fatalf("start store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	tc := &testCluster{t: t, cfg: cfg}
	t.Cleanup(tc.stop)
	tc.start()
	return tc
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

// start starts every meta server.
func (tc *testCluster) start() {
	tc.t.Helper()
	for i, m := range tc.cfg.Meta {
		var ln net.Listener
		var err error
		for range 50 { // the port of a server just closed may linger briefly
			if ln, err = net.Listen("tcp", m.Addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			tc.t.Fatal(err)
		}
		s, err := cluster.StartMeta(ctx, tc.cfg, i, cluster.Options{Listener: ln})
		if err != nil {
			tc.t.Fatalf("start meta %d: %v", i, err)
		}
		tc.metas = append(tc.metas, s)
	}
}

// stop closes the clients and every meta server.
func (tc *testCluster) stop() {
	for _, c := range tc.clients {
		c.Close()
	}
	tc.clients = nil
	for _, m := range tc.metas {
		m.Close()
	}
	tc.metas = nil
}

func (tc *testCluster) client() *client.Client {
	tc.t.Helper()
	c, err := client.New(cluster.ClientConfig(tc.cfg, core.Root, nil))
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.clients = append(tc.clients, c)
	return c
}

// check runs fsck on the cluster as it is (running or stopped). The call
// timeout is above the meta servers' 10 s peer timeout: a coordinator whose
// peer call stalls holds its locks that long, and fsck may wait for them.
func (tc *testCluster) check(repair bool) *Report {
	tc.t.Helper()
	c, err := Connect(ctx, tc.cfg, 15*time.Second)
	if err != nil {
		tc.t.Fatalf("connect: %v", err)
	}
	defer c.Close()
	r, err := Check(ctx, c, Options{Repair: repair, Wait: 5 * time.Second})
	if err != nil {
		tc.t.Fatalf("check: %v", err)
	}
	return r
}

// stores opens every stopped meta server's store; the caller closes them.
type stores []*meta.Offline

func (tc *testCluster) open() stores {
	tc.t.Helper()
	var ss stores
	for i, m := range tc.cfg.Meta {
		o, err := meta.OpenOffline(m.Dir)
		if err != nil {
			tc.t.Fatalf("open meta %d: %v", i, err)
		}
		ss = append(ss, o)
	}
	return ss
}

func (ss stores) close() {
	for _, o := range ss {
		o.Close()
	}
}

func (ss stores) get(t *testing.T, srv int, key []byte) ([]byte, bool) {
	t.Helper()
	r, err := ss[srv].Scan(&weftpb.ScanRequest{Start: key, End: append(bytes.Clone(key), 0), Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Pairs) == 0 {
		return nil, false
	}
	return r.Pairs[0].Value, true
}

func (ss stores) apply(t *testing.T, srv int, ops ...*weftpb.KeyOp) {
	t.Helper()
	if err := ss[srv].Apply(ops); err != nil {
		t.Fatal(err)
	}
}

// entry finds name in dir on whichever server holds it.
func (ss stores) entry(t *testing.T, dir core.Ino, name string) (srv int, key, val []byte) {
	t.Helper()
	p := layout.DirPrefix(dir)
	for srv := range ss {
		r, err := ss[srv].Scan(&weftpb.ScanRequest{Start: p, End: layout.PrefixEnd(p), Limit: 4096})
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range r.Pairs {
			if _, _, _, n, ok := layout.EntryKeyParts(kv.Key); ok && n == name {
				return srv, kv.Key, kv.Value
			}
		}
	}
	t.Fatalf("no entry %q in directory %d", name, dir)
	return 0, nil, nil
}

// partition returns the partition record of dir on srv.
func (ss stores) partition(t *testing.T, srv int, dir core.Ino) *weftpb.InodeRecord {
	t.Helper()
	v, found := ss.get(t, srv, layout.InodeKey(dir))
	if !found {
		t.Fatalf("no partition of %d on meta %d", dir, srv)
	}
	r, err := decodeInode(v)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// place returns the server and partition that hold name in dir.
func (ss stores) place(t *testing.T, dir core.Ino, name string) (int, uint32) {
	t.Helper()
	h := core.NameHash(name)
	for srv := range ss {
		if v, found := ss.get(t, srv, layout.InodeKey(dir)); found {
			r, _ := decodeInode(v)
			if core.PartitionHolds(r.Partition, r.Radix, h) {
				return srv, r.Partition
			}
		}
	}
	t.Fatalf("no partition of directory %d holds %q", dir, name)
	return 0, 0
}

// otherPartition returns a server holding a partition of dir other than
// srv, and that partition's index.
func (ss stores) otherPartition(t *testing.T, dir core.Ino, srv int) (int, uint32) {
	t.Helper()
	for other := range ss {
		if other == srv {
			continue
		}
		if v, found := ss.get(t, other, layout.InodeKey(dir)); found {
			r, _ := decodeInode(v)
			return other, r.Partition
		}
	}
	t.Fatalf("directory %d has no partition outside meta %d", dir, srv)
	return 0, 0
}

// count adds to the counts of dir's partition record on srv, as an
// operation that adds or removes an entry there would.
func (ss stores) count(t *testing.T, srv int, dir core.Ino, entries, subdirs int) *weftpb.KeyOp {
	t.Helper()
	r := ss.partition(t, srv, dir)
	r.Entries = uint64(int64(r.Entries) + int64(entries))
	r.Nlink = uint32(int64(r.Nlink) + int64(subdirs))
	return &weftpb.KeyOp{Key: layout.InodeKey(dir), Value: marshal(r)}
}

// kinds lists the kinds of a report's findings, each once.
func kinds(r *Report) map[Kind]int {
	m := map[Kind]int{}
	for _, f := range r.Findings {
		m[f.Kind]++
	}
	return m
}

func describe(r *Report) string {
	var b bytes.Buffer
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "\n  %s", f)
	}
	for _, p := range r.Pending {
		fmt.Fprintf(&b, "\n  pending: %s", p)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n  note: %s", n)
	}
	return b.String()
}
