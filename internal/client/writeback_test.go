package client_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/waitfor"
)

// newClientOf is a root client of cfg's cluster; writeBack turns on
// metadata write-back with a window long enough that only a recall, a
// sync or the lease's end sends the queue.
func newClientOf(t *testing.T, cfg *config.Cluster, writeBack bool) *client.Client {
	t.Helper()
	cc := cluster.ClientConfig(cfg, core.Root, nil)
	cc.WriteBack, cc.WriteBackWindow = writeBack, time.Hour
	c, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wbScript runs creates, a rename, a chmod and unlinks in dir on a
// write-back client, and returns the names that must exist afterwards
// (with their modes) and those that must not.
func wbScript(t *testing.T, ctx context.Context, c *client.Client, dir core.Ino) (map[string]uint32, []string) {
	t.Helper()
	want := map[string]uint32{}
	for i := range 20 {
		name := fmt.Sprintf("f%02d", i)
		f, err := c.CreateAt(ctx, dir, name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if err := f.Close(); err != nil {
			t.Fatalf("close %s: %v", name, err)
		}
		want[name] = 0o644
	}
	if err := c.RenameAt(ctx, dir, "f00", dir, "renamed", 0); err != nil {
		t.Fatalf("rename: %v", err)
	}
	delete(want, "f00")
	want["renamed"] = 0o644
	a, err := c.LookupAt(ctx, dir, "f01")
	if err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o600)
	if _, err := c.SetAttr(ctx, client.Ref{Ino: a.Ino, Parent: dir, Name: "f01"}, client.SetAttr{Mode: &mode}); err != nil {
		t.Fatalf("chmod: %v", err)
	}
	want["f01"] = 0o600
	gone := []string{"f00"}
	for i := 10; i < 15; i++ {
		name := fmt.Sprintf("f%02d", i)
		if err := c.UnlinkAt(ctx, dir, name); err != nil {
			t.Fatalf("unlink %s: %v", name, err)
		}
		delete(want, name)
		gone = append(gone, name)
	}
	return want, gone
}

// checkNames checks what c sees in dir.
func checkNames(t *testing.T, ctx context.Context, c *client.Client, dir core.Ino, want map[string]uint32, gone []string) {
	t.Helper()
	for name, mode := range want {
		a, err := c.LookupAt(ctx, dir, name)
		if err != nil {
			t.Errorf("lookup %s: %v", name, err)
			continue
		}
		if a.Mode&core.ModeBits != mode {
			t.Errorf("%s: mode %#o, want %#o", name, a.Mode&core.ModeBits, mode)
		}
	}
	for _, name := range gone {
		if _, err := c.LookupAt(ctx, dir, name); !errs.Is(err, errs.NotExist) {
			t.Errorf("lookup %s: %v, want NotExist", name, err)
		}
	}
	n := 0
	if err := c.ReadDirAt(ctx, dir, false, func(core.DirEntry) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Errorf("readdir: %d names, want %d", n, len(want))
	}
}

// A write-back client's changes complete in it (another client without
// leases does not see them yet: this fails if they went to the server one
// by one), the writer sees its own changes, and another client's read
// lease recalls the directory's write lease, which sends every queued
// change first.
func TestWriteBackRecallShowsQueuedChanges(t *testing.T) {
	for _, metas := range []int{1, 2} {
		t.Run(fmt.Sprintf("metas=%d", metas), func(t *testing.T) {
			_, cfg := newMultiClient(t, metas, 0, 0, 0)
			ctx := context.Background()
			a := newClientOf(t, cfg, true)
			plain := newClientOf(t, cfg, false)
			reader := newClientOf(t, cfg, false)
			reader.OnRecall(func([]client.LeaseKey) {})
			d := mkdirSent(t, ctx, a, core.RootIno, "d", 0o755)
			want, gone := wbScript(t, ctx, a, d.Ino)
			if _, err := plain.LookupAt(ctx, d.Ino, "f19"); !errs.Is(err, errs.NotExist) {
				t.Errorf("a client without leases sees a queued create at once (%v): nothing was written back", err)
			}
			for name := range want {
				if _, err := a.LookupAt(ctx, d.Ino, name); err != nil {
					t.Errorf("the writer does not see its own %s: %v", name, err)
				}
			}
			if l := reader.ReadLease(ctx, reader.DirLeases(d.Ino)...); l.Denied() {
				t.Fatal("read lease denied")
			}
			checkNames(t, ctx, reader, d.Ino, want, gone)
		})
	}
}

// Another client's change in the directory recalls the write lease first:
// it is ordered after every queued change (here: its create of a name the
// writer renamed away must succeed, and one the writer created must fail).
func TestWriteBackChangeByOtherClientOrdersAfterQueue(t *testing.T) {
	_, cfg := newMultiClient(t, 1, 0, 0, 0)
	ctx := context.Background()
	a := newClientOf(t, cfg, true)
	b := newClientOf(t, cfg, false)
	d := mkdirSent(t, ctx, a, core.RootIno, "d", 0o755)
	want, gone := wbScript(t, ctx, a, d.Ino)
	start := time.Now()
	if _, err := b.CreateAt(ctx, d.Ino, "f19", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errs.Is(err, errs.Exist) {
		t.Fatalf("create of a name the writer queued: %v, want Exist", err)
	}
	// Counted, not timed (a loaded machine makes slow recalls that
	// waited for no term).
	if n := leasesExpired(t, cfg); n > 0 {
		t.Errorf("the recall took %v: %d leases ran out their term instead of being released", time.Since(start), n)
	}
	f, err := b.CreateAt(ctx, d.Ino, "f00", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("create of a name the writer renamed away: %v", err)
	}
	f.Close()
	want["f00"] = 0o644
	checkNames(t, ctx, b, d.Ino, want, gone[1:])
}

// fsync of the directory makes the queue durable and surfaces nothing when
// all went well; a plain client then sees everything without any recall.
func TestWriteBackSyncDir(t *testing.T) {
	_, cfg := newMultiClient(t, 1, 0, 0, 0)
	ctx := context.Background()
	a := newClientOf(t, cfg, true)
	plain := newClientOf(t, cfg, false)
	d, err := a.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	want, gone := wbScript(t, ctx, a, d.Ino)
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	checkNames(t, ctx, plain, d.Ino, want, gone)
}

// The names a directory held before the write lease count: a write-back
// create of one of them fails with Exist, an unlink of one succeeds, and
// a lookup of a missing one says NotExist, from what the client read
// under its lease.
func TestWriteBackKnowsExistingNames(t *testing.T) {
	_, cfg := newMultiClient(t, 1, 0, 0, 0)
	ctx := context.Background()
	a := newClientOf(t, cfg, true)
	plain := newClientOf(t, cfg, false)
	d, err := plain.MkdirAt(ctx, core.RootIno, "d", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"pre1", "pre2"} {
		f, err := plain.CreateAt(ctx, d.Ino, n, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	f, err := a.CreateAt(ctx, d.Ino, "x", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := a.CreateAt(ctx, d.Ino, "pre1", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errs.Is(err, errs.Exist) {
		t.Errorf("exclusive create of an existing name: %v, want Exist", err)
	}
	if err := a.UnlinkAt(ctx, d.Ino, "pre2"); err != nil {
		t.Errorf("unlink of an existing name: %v", err)
	}
	if err := a.UnlinkAt(ctx, d.Ino, "nothing"); !errs.Is(err, errs.NotExist) {
		t.Errorf("unlink of a missing name: %v, want NotExist", err)
	}
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	checkNames(t, ctx, plain, d.Ino, map[string]uint32{"pre1": 0o644, "x": 0o644}, []string{"pre2", "nothing"})
}

// A written-back unlink of a file open here holds its chunks until the
// last close, and that close's release reaches the server after the
// unlink: the chunks go once the file is closed.
func TestWriteBackUnlinkOfOpenFileReclaimsAtClose(t *testing.T) {
	rc := newReclaimCluster(t, 1)
	ctx := context.Background()
	cc := cluster.ClientConfig(rc.cfg, core.Root, nil)
	cc.WriteBack, cc.WriteBackWindow = true, time.Hour
	a, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	data := pattern(3*reclaimChunk, 5)
	f, err := a.CreateAt(ctx, core.RootIno, "o", os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := a.UnlinkAt(ctx, core.RootIno, "o"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("open-unlinked file lost its bytes: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 20*time.Second, "chunks of the closed unlinked file remain", func() bool {
		return rc.chunksOn(0) == 0
	})
}

// What the client learnt under a write lease is forgotten with the lease:
// a name another client made after the lease ran out (no recall then) is
// seen by the next write-back create.
func TestWriteBackForgetsWithTheLease(t *testing.T) {
	_, cfg := newMultiClient(t, 1, 0, 0, 0)
	ctx := context.Background()
	a := newClientOf(t, cfg, true)
	plain := newClientOf(t, cfg, false)
	d, err := a.MkdirAt(ctx, core.RootIno, "d", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	f, err := a.CreateAt(ctx, d.Ino, "x", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := a.LookupAt(ctx, d.Ino, "y"); !errs.Is(err, errs.NotExist) {
		t.Fatalf("lookup y: %v", err)
	}
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "the idle write lease is forgotten", func() bool { return !a.WriteBackHeld(d.Ino) })
	g, err := plain.CreateAt(ctx, d.Ino, "y", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if _, err := a.CreateAt(ctx, d.Ino, "y", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errs.Is(err, errs.Exist) {
		t.Fatalf("create of a name made after the lease ended: %v, want Exist", err)
	}
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatalf("a batch was refused: %v", err)
	}
}

// rmdir of a directory whose files were removed under write-back sends
// those removals first: the directory is empty on the servers too.
func TestWriteBackRmdirAfterUnlinks(t *testing.T) {
	_, cfg := newMultiClient(t, 1, 0, 0, 0)
	ctx := context.Background()
	a := newClientOf(t, cfg, true)
	d, err := a.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		name := fmt.Sprintf("f%d", i)
		f, err := a.CreateAt(ctx, d.Ino, name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	// The creates are on the servers, the removals only queued.
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := a.UnlinkAt(ctx, d.Ino, fmt.Sprintf("f%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.RmdirAt(ctx, core.RootIno, "d"); err != nil {
		t.Fatalf("rmdir of a directory emptied by write-back: %v", err)
	}
}

// Another client's rmdir of a directory whose only files are still queued
// in a write-back client finds it not empty: its commit recalls the write
// lease and checks again once the queue is in.
func TestWriteBackOtherClientsRmdirSeesQueuedCreates(t *testing.T) {
	_, cfg := newMultiClient(t, 1, 0, 0, 0)
	ctx := context.Background()
	a := newClientOf(t, cfg, true)
	b := newClientOf(t, cfg, false)
	d, err := a.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	f, err := a.CreateAt(ctx, d.Ino, "f", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	start := time.Now()
	if err := b.RmdirAt(ctx, core.RootIno, "d"); !errs.Is(err, errs.NotEmpty) {
		t.Fatalf("rmdir of a directory with a queued create: %v, want NotEmpty", err)
	}
	if n := leasesExpired(t, cfg); n > 0 {
		t.Errorf("the rmdir took %v: %d leases ran out their term instead of being released", time.Since(start), n)
	}
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Errorf("the writer's batch was refused: %v", err)
	}
}
