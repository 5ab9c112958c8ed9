package cluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// Two clients of a cluster of real meta and store processes: the first
// writes back creates, renames and unlinks in a directory; the second's
// read lease on the directory (what a mount takes before it reads)
// recalls the first's write lease, and it then sees every queued change.
// After the recall the writer leaves the directory to the others for a
// while (its next change goes to the servers at once), so a third
// client's create of the same name finds it.
func TestWriteBackTwoClientsProcs(t *testing.T) {
	p := startProcs(t, ProcsOptions{Dir: t.TempDir(), Meta: 2, Store: 1})
	cfg := p.Config()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	newClient := func(writeBack bool) *client.Client {
		cc := ClientConfig(cfg, core.Root, nil)
		cc.WriteBack, cc.WriteBackWindow = writeBack, time.Hour
		c, err := client.New(cc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b, other := newClient(true), newClient(false), newClient(false)
	b.OnRecall(func([]client.LeaseKey) {})
	d, err := a.MkdirAt(ctx, core.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	// The mkdir is written back too: sent here, as the others learn d's
	// number from the test rather than from a lookup in the root (whose
	// read lease would recall a's write lease and send it).
	if err := a.SyncDir(ctx, core.RootIno); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range 100 {
		name := fmt.Sprintf("f%03d", i)
		f, err := a.CreateAt(ctx, d.Ino, name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		want[name] = true
		if i%10 == 3 {
			to := fmt.Sprintf("r%03d", i)
			if err := a.RenameAt(ctx, d.Ino, name, d.Ino, to, 0); err != nil {
				t.Fatal(err)
			}
			delete(want, name)
			want[to] = true
		}
		if i%10 == 7 {
			if err := a.UnlinkAt(ctx, d.Ino, name); err != nil {
				t.Fatal(err)
			}
			delete(want, name)
		}
	}
	if _, err := other.LookupAt(ctx, d.Ino, "f099"); !errs.Is(err, errs.NotExist) {
		t.Errorf("a client without leases sees the last queued create at once (%v): nothing was written back", err)
	}
	if l := b.ReadLease(ctx, b.DirLeases(d.Ino)...); l.Denied() {
		t.Fatal("read lease denied")
	}
	got := map[string]bool{}
	if err := b.ReadDirAt(ctx, d.Ino, false, func(e core.DirEntry) error { got[e.Name] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("the second client lists %d names, want %d", len(got), len(want))
	}
	for n := range want {
		if !got[n] {
			t.Errorf("the second client does not see %s", n)
		}
	}
	// The writer goes on.
	f, err := a.CreateAt(ctx, d.Ino, "late", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := other.CreateAt(ctx, d.Ino, "late", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errs.Is(err, errs.Exist) {
		t.Errorf("a create of a name the writer queued: %v, want Exist", err)
	}
}
