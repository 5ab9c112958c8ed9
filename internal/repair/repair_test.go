package repair

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// fakeStore is a store's chunk methods over a map, for the pass's logic;
// the real stores are exercised by the cluster tests.
type fakeStore struct {
	mu     sync.Mutex
	chunks map[[2]uint64]fakeChunk
	down   bool
	// beforeReplace runs before a replace is applied (a racing writer).
	beforeReplace func()
}

type fakeChunk struct {
	data    []byte
	version uint64
}

func newFake() *fakeStore { return &fakeStore{chunks: map[[2]uint64]fakeChunk{}} }

func (f *fakeStore) put(ino, idx uint64, data []byte, version uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.chunks[[2]uint64{ino, idx}] = fakeChunk{append([]byte(nil), data...), version}
}

func (f *fakeStore) get(ino, idx uint64) (fakeChunk, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.chunks[[2]uint64{ino, idx}]
	return c, ok
}

func (f *fakeStore) Call(_ context.Context, method uint16, req, resp proto.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errs.New(errs.Unavailable, "call", "down")
	}
	if method == weftpb.MethodStoreStatFS {
		return nil
	}
	if method != weftpb.MethodListChunks {
		return errs.New(errs.NotSupported, "call", "method %d", method)
	}
	r := req.(*weftpb.ListChunksRequest)
	var keys [][2]uint64
	for k := range f.chunks {
		after := r.GetAfter()
		if after != nil && (k[0] < after.GetIno() || k[0] == after.GetIno() && k[1] <= after.GetIndex()) {
			continue
		}
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		return keys[a][0] < keys[b][0] || keys[a][0] == keys[b][0] && keys[a][1] < keys[b][1]
	})
	out := resp.(*weftpb.ListChunksReply)
	limit := int(r.GetLimit())
	if len(keys) > limit {
		keys, out.More = keys[:limit], true
	}
	for _, k := range keys {
		c := f.chunks[k]
		out.Chunks = append(out.Chunks, &weftpb.ChunkInfo{
			Chunk: &weftpb.ChunkID{Ino: k[0], Index: k[1]}, Size: int64(len(c.data)), Version: c.version,
		})
	}
	return nil
}

func (f *fakeStore) Send(context.Context, uint16, proto.Message) error { return nil }

func (f *fakeStore) CallData(_ context.Context, method uint16, req proto.Message, data []byte, resp proto.Message) ([]byte, error) {
	if method == weftpb.MethodWriteChunk && f.beforeReplace != nil {
		f.beforeReplace()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errs.New(errs.Unavailable, "call", "down")
	}
	switch method {
	case weftpb.MethodReadChunk:
		r := req.(*weftpb.ReadChunkRequest)
		c, ok := f.chunks[[2]uint64{r.GetChunk().GetIno(), r.GetChunk().GetIndex()}]
		out := resp.(*weftpb.ReadChunkReply)
		out.Found, out.ChunkSize, out.Version = ok, int64(len(c.data)), c.version
		return append([]byte(nil), c.data...), nil
	case weftpb.MethodWriteChunk:
		r := req.(*weftpb.WriteChunkRequest)
		k := [2]uint64{r.GetChunk().GetIno(), r.GetChunk().GetIndex()}
		if !r.GetReplace() {
			return nil, errs.New(errs.NotSupported, "write", "only replaces")
		}
		if f.chunks[k].version != r.GetExpectVersion() {
			return nil, errs.New(errs.Stale, "write", "version moved")
		}
		f.chunks[k] = fakeChunk{append([]byte(nil), data...), r.GetSetVersion()}
		return nil, nil
	}
	return nil, errs.New(errs.NotSupported, "call", "method %d", method)
}

// cluster writes n chunks of ino 7 to their placed replicas of stores.
func cluster(t *testing.T, stores, r, n int) ([]*fakeStore, []Store) {
	t.Helper()
	fakes := make([]*fakeStore, stores)
	all := make([]Store, stores)
	for i := range fakes {
		fakes[i] = newFake()
		all[i] = fakes[i]
	}
	for idx := range uint64(n) {
		for _, s := range core.ChunkReplicas(7, idx, stores, r) {
			fakes[s].put(7, idx, content(idx, 3), 3)
		}
	}
	return fakes, all
}

func content(idx, version uint64) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("chunk %d v%d;", idx, version)), 100)
}

// checkPlaced fails unless every chunk is on its placed replicas with want's
// content and version.
func checkPlaced(t *testing.T, fakes []*fakeStore, r, n int, version uint64) {
	t.Helper()
	for idx := range uint64(n) {
		for _, s := range core.ChunkReplicas(7, idx, len(fakes), r) {
			c, ok := fakes[s].get(7, idx)
			if !ok || c.version != version || !bytes.Equal(c.data, content(idx, version)) {
				t.Fatalf("chunk %d on store %d: present %v version %d, want version %d", idx, s, ok, c.version, version)
			}
		}
	}
}

func TestRepairRefillsAnEmptiedStore(t *testing.T) {
	fakes, stores := cluster(t, 3, 2, 2500) // more than two listing pages
	fakes[1].chunks = map[[2]uint64]fakeChunk{}
	ctx := context.Background()

	dry, err := Run(ctx, Config{Stores: stores, Replication: 2, Only: -1, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.UnderReplicated == 0 || dry.Copied != 0 || dry.Clean() {
		t.Fatalf("dry run: %v", dry)
	}
	rep, err := Run(ctx, Config{Stores: stores, Replication: 2, Only: -1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Missing != dry.Missing || rep.Copied != rep.Missing || !rep.Clean() {
		t.Fatalf("repair: %v (dry run %v)", rep, dry)
	}
	checkPlaced(t, fakes, 2, 2500, 3)
	again, err := Run(ctx, Config{Stores: stores, Replication: 2, Only: -1, Verify: true})
	if err != nil || again.UnderReplicated != 0 || !again.Clean() {
		t.Fatalf("second pass: %v, %v", again, err)
	}
}

func TestRepairReplacesStaleCopiesWithTheNewestVersion(t *testing.T) {
	fakes, stores := cluster(t, 3, 2, 20)
	// Chunk 5 took a write on one replica only (the other was down): the
	// newer version wins wherever it is.
	placed := core.ChunkReplicas(7, 5, 3, 2)
	fakes[placed[1]].put(7, 5, content(5, 4), 4)
	rep, err := Run(context.Background(), Config{Stores: stores, Replication: 2, Only: -1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stale != 1 || rep.Copied != 1 {
		t.Fatalf("repair: %v", rep)
	}
	c, _ := fakes[placed[0]].get(7, 5)
	if c.version != 4 || !bytes.Equal(c.data, content(5, 4)) {
		t.Fatalf("stale copy not replaced: version %d", c.version)
	}
}

func TestRepairNeverOverwritesARacingWrite(t *testing.T) {
	fakes, stores := cluster(t, 2, 2, 1)
	fakes[1].chunks = map[[2]uint64]fakeChunk{}
	// A client's write reaches the emptied store after the listing and
	// before the copy.
	fakes[1].beforeReplace = func() { fakes[1].put(7, 0, content(0, 9), 1) }
	rep, err := Run(context.Background(), Config{Stores: stores, Replication: 2, Only: -1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Raced != 1 || rep.Copied != 0 || rep.Clean() {
		t.Fatalf("repair: %v", rep)
	}
	if c, _ := fakes[1].get(7, 0); !bytes.Equal(c.data, content(0, 9)) {
		t.Fatal("the repair overwrote a write that raced it")
	}
}

func TestRepairReportsAnUnreachableStore(t *testing.T) {
	fakes, stores := cluster(t, 3, 2, 50)
	fakes[2].chunks = map[[2]uint64]fakeChunk{}
	fakes[0].down = true
	rep, err := Run(context.Background(), Config{Stores: stores, Replication: 2, Only: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Unreachable) != 1 || rep.Unreachable[0] != 0 || rep.Clean() {
		t.Fatalf("repair: %v", rep)
	}
	// Store 2 got back every chunk placed on it that store 1 holds.
	for idx := range uint64(50) {
		placed := core.ChunkReplicas(7, idx, 3, 2)
		if placed[0] != 0 && placed[1] != 0 {
			if _, ok := fakes[2].get(7, idx); !ok {
				t.Fatalf("chunk %d not restored on store 2", idx)
			}
		}
	}
}

func TestRepairOnlyTouchesItsStore(t *testing.T) {
	fakes, stores := cluster(t, 3, 2, 60)
	fakes[0].chunks = map[[2]uint64]fakeChunk{}
	fakes[1].chunks = map[[2]uint64]fakeChunk{}
	rep, err := Run(context.Background(), Config{Stores: stores, Replication: 2, Only: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Copied == 0 {
		t.Fatalf("repair: %v", rep)
	}
	if n := len(fakes[0].chunks); n != 0 {
		t.Fatalf("store 0 got %d chunks from a pass for store 1", n)
	}
}
