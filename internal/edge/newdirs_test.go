package edge_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
)

// TestEdgeNewDirQueueSeen: a write-back client of an edge makes a
// directory and a file in it, both queued. A direct client reads the
// parent under read leases, which recalls the parent's write lease (the
// client sends the mkdir), then reads the new directory under read leases:
// it must see the file, whose create returned before. The upstream grants
// a new directory's write lease only to the session that sent the batch,
// which through an edge is the edge's: the edge granted the client none,
// so nothing recalled the file's create and the listing was empty (the
// two-site history's failure, TestLinzTwoSitesWriteBack). The client's
// write-back window is long, so that its flusher does not send the queue
// meanwhile.
func TestEdgeNewDirQueueSeen(t *testing.T) {
	p := twoSitesUpstream(t, 2, 0)
	ctx := testCtx(t, 2*time.Minute)
	cc := cluster.ClientConfig(startEdge(t, p.ClusterFile()).cfg, core.Root, nil)
	cc.WriteBack = true
	cc.WriteBackWindow = time.Hour
	wb, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	direct := siteClient(t, p.Config(), false)
	direct.OnRecall(func([]client.LeaseKey) {}) // it caches nothing
	readDir := func(path string) []string {
		t.Helper()
		a, err := direct.Lstat(ctx, path)
		if err != nil {
			t.Fatalf("direct: lstat %s: %v", path, err)
		}
		if l := direct.ReadLease(ctx, direct.DirLeases(a.Ino)...); l.Remaining() == 0 {
			t.Fatalf("direct: no read lease on %s", path)
		}
		es, err := direct.ReadDir(ctx, path)
		if err != nil {
			t.Fatalf("direct: readdir %s: %v", path, err)
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name)
		}
		return names
	}

	if err := direct.MkdirAll(ctx, "/t", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := wb.Mkdir(ctx, "/t/d", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := wb.Open(ctx, "/t/d/x", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if got := readDir("/t"); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("direct: /t lists %q after the edge client's mkdir returned; want [d]", got)
	}
	if got := readDir("/t/d"); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("direct: /t/d lists %q after the edge client's create of x in it returned; want [x]", got)
	}
}
