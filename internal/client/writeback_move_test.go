package client_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// maildir is two directories under root, tmp and cur, made and sent by c.
func moveDirs(t *testing.T, ctx context.Context, c *client.Client) (tmp, cur core.Ino) {
	t.Helper()
	return mkdirSent(t, ctx, c, core.RootIno, "tmp", 0o755).Ino, mkdirSent(t, ctx, c, core.RootIno, "cur", 0o755).Ino
}

func msgName(i int) string { return fmt.Sprintf("m%03d", i) }

// deliver writes message i in tmp and renames it into cur, as a maildir
// delivery does.
func deliver(t *testing.T, ctx context.Context, c *client.Client, tmp, cur core.Ino, i int) {
	t.Helper()
	f, err := c.CreateAt(ctx, tmp, msgName(i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatalf("create %s: %v", msgName(i), err)
	}
	if _, err := f.Write(wbContent(i)); err != nil {
		t.Fatalf("write %s: %v", msgName(i), err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", msgName(i), err)
	}
	if err := c.RenameAt(ctx, tmp, msgName(i), cur, msgName(i), 0); err != nil {
		t.Fatalf("rename %s: %v", msgName(i), err)
	}
}

// checkIn checks that c sees message i in dir, whole, and not in other.
func checkIn(t *testing.T, ctx context.Context, c *client.Client, dir, other core.Ino, i int) {
	t.Helper()
	name := msgName(i)
	if _, err := c.LookupAt(ctx, other, name); !errs.Is(err, errs.NotExist) {
		t.Errorf("%s is still in the directory it left (lookup: %v)", name, err)
	}
	a, err := c.LookupAt(ctx, dir, name)
	if err != nil {
		t.Errorf("lookup %s: %v", name, err)
		return
	}
	if a.Nlink != 1 || a.Size != uint64(len(wbContent(i))) {
		t.Errorf("%s: nlink %d size %d, want 1 and %d", name, a.Nlink, a.Size, len(wbContent(i)))
	}
	if s, err := c.GetAttr(ctx, client.Ref{Ino: a.Ino, Parent: dir, Name: name}); err != nil || s.Size != a.Size {
		t.Errorf("stat %s: size %d (%v), want %d", name, s.Size, err, a.Size)
	}
	f, err := c.OpenRef(ctx, client.Ref{Ino: a.Ino, Parent: dir, Name: name}, os.O_RDONLY)
	if err != nil {
		t.Errorf("open %s: %v", name, err)
		return
	}
	got, err := io.ReadAll(f)
	f.Close()
	if err != nil || !bytes.Equal(got, wbContent(i)) {
		t.Errorf("%s: read %q (%v), want %q", name, got, err, wbContent(i))
	}
}

// listed returns the names c reads in dir.
func listed(t *testing.T, ctx context.Context, c *client.Client, dir core.Ino) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	if err := c.ReadDirAt(ctx, dir, false, func(e core.DirEntry) error { out[e.Name] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// A rename between two directories a write-back client holds completes in
// the client: no rename request and no batch until a sync, a recall or
// the window. Its own lookups, stats and opens see the file in the new
// directory only, at once; a client without leases does not see it yet; a
// second client's read lease on either directory recalls the writer's,
// which sends the rename first; a sync makes it durable.
func TestWriteBackRenameAcrossDirs(t *testing.T) {
	for _, recall := range []string{"cur", "tmp", "sync"} {
		t.Run(recall, func(t *testing.T) {
			cfg := startLongLeaseCluster(t, 1)
			ctx := context.Background()
			m := &methodCounter{}
			a := newCountedClient(t, cfg, true, m)
			plain := newClientOf(t, cfg, false)
			tmp, cur := moveDirs(t, ctx, a)
			// A file already on the servers moves by a BatchRename;
			// new ones by their create, folded.
			deliverSent(t, ctx, a, tmp, 0)
			if err := a.SyncDir(ctx, tmp); err != nil {
				t.Fatal(err)
			}
			if err := a.RenameAt(ctx, tmp, msgName(0), cur, msgName(0), 0); err != nil {
				t.Fatal(err)
			}
			batches0 := m.count("apply_batch")
			for i := 1; i < 20; i++ {
				deliver(t, ctx, a, tmp, cur, i)
			}
			for _, method := range []string{"rename", "create", "commit", "apply_batch"} {
				if n := m.count(method); method == "apply_batch" && n != batches0 || method != "apply_batch" && n > 0 {
					t.Errorf("%d %s requests before any sync: the moves did not complete in the client", n, method)
				}
			}
			if _, err := plain.LookupAt(ctx, cur, msgName(0)); !errs.Is(err, errs.NotExist) {
				t.Errorf("a client without leases sees a queued rename at once (%v): it went to the servers", err)
			}
			if _, err := plain.LookupAt(ctx, tmp, msgName(0)); err != nil {
				t.Errorf("a client without leases no longer sees %s where the servers have it: %v", msgName(0), err)
			}
			// The writer's lookups, stats and opens of the moved files
			// are answered from its queue (m000's open would be a
			// request, which sends the queue first: only looked up).
			if _, err := a.LookupAt(ctx, tmp, msgName(0)); !errs.Is(err, errs.NotExist) {
				t.Errorf("the writer still sees %s in tmp: %v", msgName(0), err)
			}
			if got, err := a.LookupAt(ctx, cur, msgName(0)); err != nil || got.Size != uint64(len(wbContent(0))) {
				t.Errorf("the writer's lookup of cur/%s: size %d (%v)", msgName(0), got.Size, err)
			}
			for i := 1; i < 20; i++ {
				checkIn(t, ctx, a, cur, tmp, i)
			}
			if n := m.count("apply_batch"); n != batches0 {
				t.Errorf("the writer's own reads sent %d batches", n-batches0)
			}
			other := plain
			switch recall {
			case "cur", "tmp":
				reader := newClientOf(t, cfg, false)
				reader.OnRecall(func([]client.LeaseKey) {})
				dir := cur
				if recall == "tmp" {
					dir = tmp
				}
				if l := reader.ReadLease(ctx, reader.DirLeases(dir)...); l.Denied() {
					t.Fatal("read lease denied")
				}
				other = reader
			case "sync":
				// fsync of the destination sends the source's queue.
				if err := a.SyncDir(ctx, cur); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 20 {
				checkIn(t, ctx, other, cur, tmp, i)
			}
			if got := listed(t, ctx, other, tmp); len(got) != 0 {
				t.Errorf("tmp lists %v after the moves", got)
			}
			if got := listed(t, ctx, other, cur); len(got) != 20 {
				t.Errorf("cur lists %d names, want 20", len(got))
			}
			if n := m.count("rename"); n > 0 {
				t.Errorf("%d rename requests", n)
			}
			// The writer's readdir agrees.
			if got := listed(t, ctx, a, cur); len(got) != 20 {
				t.Errorf("the writer lists %d names in cur, want 20", len(got))
			}
		})
	}
}

// deliverSent writes message i in tmp (not moved).
func deliverSent(t *testing.T, ctx context.Context, c *client.Client, tmp core.Ino, i int) {
	t.Helper()
	f, err := c.CreateAt(ctx, tmp, msgName(i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(wbContent(i)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A crash of the write-back client (its queue dropped unsent) leaves each
// moved file where the servers last had it: renames made before a sync
// are in the new directory, later ones in the old; each file is in exactly
// one of the two, whole, with one link. Changes of the destination made
// after a rename into it (an unlink, a rename on) go after it.
func TestWriteBackRenameAcrossDirsCrash(t *testing.T) {
	cfg := startLongLeaseCluster(t, 1)
	ctx := context.Background()
	a := newClientOf(t, cfg, true)
	tmp, cur := moveDirs(t, ctx, a)
	const n = 12
	for i := range n {
		deliverSent(t, ctx, a, tmp, i)
	}
	if err := a.SyncDir(ctx, tmp); err != nil {
		t.Fatal(err)
	}
	// 0..5 move and are synced; 5 is then unlinked from cur, in cur's
	// own queue, which must go after tmp's rename into cur.
	for i := range 6 {
		if err := a.RenameAt(ctx, tmp, msgName(i), cur, msgName(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.UnlinkAt(ctx, cur, msgName(5)); err != nil {
		t.Fatal(err)
	}
	if err := a.SyncDir(ctx, cur); err != nil {
		t.Fatal(err)
	}
	// 6..11 move, and are lost in the crash.
	for i := 6; i < n; i++ {
		if err := a.RenameAt(ctx, tmp, msgName(i), cur, msgName(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	a.DropWriteBack()
	a.Close()
	b := newClientOf(t, cfg, false)
	for i := range n {
		switch {
		case i == 5:
			for _, d := range []core.Ino{tmp, cur} {
				if _, err := b.LookupAt(ctx, d, msgName(i)); !errs.Is(err, errs.NotExist) {
					t.Errorf("the unlinked %s: lookup %v", msgName(i), err)
				}
			}
		case i < 6:
			checkIn(t, ctx, b, cur, tmp, i)
		default:
			checkIn(t, ctx, b, tmp, cur, i)
		}
	}
	if got := listed(t, ctx, b, cur); len(got) != 5 {
		t.Errorf("cur lists %v, want m000..m004", got)
	}
	if got := listed(t, ctx, b, tmp); len(got) != n-6 {
		t.Errorf("tmp lists %v, want m006..m011", got)
	}
}

// Between directories whose partitions are on two meta servers the rename
// goes to the servers at once; on one it is written back. Either way the
// file ends up in one place.
func TestWriteBackRenameAcrossDirsTwoServers(t *testing.T) {
	cfg := startLongLeaseCluster(t, 2)
	ctx := context.Background()
	m := &methodCounter{}
	a := newCountedClient(t, cfg, true, m)
	plain := newClientOf(t, cfg, false)
	var dirs []core.Ino
	for i := range 4 {
		dirs = append(dirs, mkdirSent(t, ctx, a, core.RootIno, fmt.Sprintf("d%d", i), 0o755).Ino)
	}
	same := func(x, y core.Ino) bool { return core.PartitionServer(x, 0, 2) == core.PartitionServer(y, 0, 2) }
	var pairs [2][2]core.Ino // one pair on one server, one across
	found := [2]bool{}
	for _, x := range dirs {
		for _, y := range dirs {
			if x == y {
				continue
			}
			k := 0
			if !same(x, y) {
				k = 1
			}
			if !found[k] {
				pairs[k], found[k] = [2]core.Ino{x, y}, true
			}
		}
	}
	if !found[0] || !found[1] {
		t.Skipf("four directories on %v: no pair on one server and one across", dirs)
	}
	for k, p := range pairs {
		i := 100 + k
		before := m.count("rename")
		deliver(t, ctx, a, p[0], p[1], i)
		if got := m.count("rename") - before; got != k {
			t.Errorf("pair %d (across servers: %v): %d rename requests, want %d", k, k == 1, got, k)
		}
		checkIn(t, ctx, a, p[1], p[0], i)
	}
	if err := a.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	for k, p := range pairs {
		checkIn(t, ctx, plain, p[1], p[0], 100+k)
	}
}

// A file moved A→Y→K, unlinked in K, and K removed from A, all queued:
// the removal's batch in A sends K's queue first, which waits for Y's,
// which waits for A's rename into Y. The client sends the chain before it
// queues the rmdir, so no flush waits for a queue whose token it holds
// (this deadlocked until the send's deadline), and the servers end with
// nothing in Y, no K, in order.
func TestWriteBackRenameAcrossDirsThenRmdir(t *testing.T) {
	cfg := startLongLeaseCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := newClientOf(t, cfg, true)
	plain := newClientOf(t, cfg, false)
	dirA := mkdirSent(t, ctx, a, core.RootIno, "A", 0o755).Ino
	dirY := mkdirSent(t, ctx, a, core.RootIno, "Y", 0o755).Ino
	dirK := mkdirSent(t, ctx, a, dirA, "K", 0o755).Ino
	deliverSent(t, ctx, a, dirA, 0)
	if err := a.RenameAt(ctx, dirA, msgName(0), dirY, msgName(0), 0); err != nil {
		t.Fatal(err)
	}
	if err := a.RenameAt(ctx, dirY, msgName(0), dirK, msgName(0), 0); err != nil {
		t.Fatal(err)
	}
	if err := a.UnlinkAt(ctx, dirK, msgName(0)); err != nil {
		t.Fatal(err)
	}
	if err := a.RmdirAt(ctx, dirA, "K"); err != nil {
		t.Fatal(err)
	}
	if err := a.SyncAll(ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}
	for _, d := range []core.Ino{dirA, dirY} {
		if got := listed(t, ctx, plain, d); len(got) != 0 {
			t.Errorf("directory %d lists %v, want nothing", d, got)
		}
	}
	if _, err := plain.LookupAt(ctx, dirA, "K"); !errs.Is(err, errs.NotExist) {
		t.Errorf("K after its rmdir: %v", err)
	}
}
