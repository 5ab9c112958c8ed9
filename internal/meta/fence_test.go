package meta

import (
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// heldCount is how many coordinators' locks server id holds.
func (c *testCluster) heldCount(id int) int {
	g := &c.srv(id).giga
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.mu.held)
}

// TestReplayAfterLockExpiry is the known gap of the cross-server commit
// (docs/design.md): a coordinator dies after writing its intent, the
// participant's locks for it expire, a later operation changes the same
// keys, and then the coordinator restarts and replays its intent. The
// replay must not overwrite the later operation.
func TestReplayAfterLockExpiry(t *testing.T) {
	for _, tc := range []struct {
		point string
		// later runs on the participant once its locks expired and
		// returns what dst/g must be at the end: an ino, or 0 for absent.
		later func(t *testing.T, c *testCluster, dst uint64) uint64
		// srcStays: the rename is abandoned (nothing of it was applied).
		srcStays bool
	}{
		{
			// Nothing applied anywhere: a new dst/g is made meanwhile, and
			// the rename is abandoned.
			point: FailDistIntentWritten, srcStays: true,
			later: func(t *testing.T, c *testCluster, dst uint64) uint64 {
				r, err := c.srv(1).Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: dst, Name: "g", Mode: 0o600, Exclusive: true})
				if err != nil {
					t.Fatalf("create over the expired rename: %v", err)
				}
				return r.Attr.Ino
			},
		},
		{
			// The participant applied: dst/g is removed meanwhile, and the
			// replay must not bring it back; the source goes.
			point: FailDistParticipantsDone,
			later: func(t *testing.T, c *testCluster, dst uint64) uint64 {
				if _, err := c.srv(1).Unlink(ctx, &weftpb.UnlinkRequest{Creds: rootCreds(), Parent: dst, Name: "g"}); err != nil {
					t.Fatalf("unlink of the renamed file: %v", err)
				}
				return 0
			},
		},
	} {
		t.Run(tc.point, func(t *testing.T) {
			c := newTestCluster(t, 2, func(_ int, cfg *Config) {
				cfg.SplitThreshold, cfg.SplitBits = 2, 1
				cfg.lockLease = 200 * time.Millisecond
			})
			src, dst := c.dirOn(0, "a"), c.dirOn(1, "b")
			if _, err := c.srv(0).Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: src.Ino, Name: "f", Mode: 0o644, Exclusive: true}); err != nil {
				t.Fatal(err)
			}
			crashed := c.crashAt(0, tc.point)
			if _, err := c.srv(0).Rename(ctx, &weftpb.RenameRequest{Creds: rootCreds(), SrcParent: src.Ino, SrcName: "f", DstParent: dst.Ino, DstName: "g"}); err == nil {
				t.Fatal("rename acknowledged although its coordinator crashed")
			}
			<-crashed
			c.stop(0) // the coordinator is down while the locks expire
			c.eventually("the participant's locks expire", func() bool { return c.heldCount(1) == 0 })
			want := tc.later(t, c, dst.Ino)

			c.restart(0)
			c.eventually("the restarted coordinator settles its intent", func() bool { return c.keysWithTag(0, tagIntent) == 0 })
			a, err := c.lookupOn(1, dst.Ino, "g")
			switch {
			case want == 0 && errs.KindOf(err) != errs.NotExist:
				t.Errorf("dst/g after the replay: %+v, %v; want it still removed", a, err)
			case want != 0 && (err != nil || a.Ino != want):
				t.Errorf("dst/g after the replay: %+v, %v; want the later file, ino %d", a, err, want)
			}
			_, err = c.lookupOn(0, src.Ino, "f")
			if tc.srcStays && err != nil {
				t.Errorf("src/f after the abandoned rename: %v", err)
			}
			if !tc.srcStays && errs.KindOf(err) != errs.NotExist {
				t.Errorf("src/f after the replayed rename: %v, want NotExist", err)
			}
		})
	}
}

// TestCrashDuringReplay: the coordinator crashes again while it replays,
// after the participant applied and released its locks; a later operation
// changes the keys; the second replay must not undo it.
func TestCrashDuringReplay(t *testing.T) {
	c := newTestCluster(t, 2, func(_ int, cfg *Config) { cfg.SplitThreshold, cfg.SplitBits = 2, 1 })
	src, dst := c.dirOn(0, "a"), c.dirOn(1, "b")
	if _, err := c.srv(0).Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: src.Ino, Name: "f", Mode: 0o644, Exclusive: true}); err != nil {
		t.Fatal(err)
	}
	crashed := c.crashAt(0, FailDistIntentWritten)
	if _, err := c.srv(0).Rename(ctx, &weftpb.RenameRequest{Creds: rootCreds(), SrcParent: src.Ino, SrcName: "f", DstParent: dst.Ino, DstName: "g"}); err == nil {
		t.Fatal("rename acknowledged although its coordinator crashed")
	}
	<-crashed
	c.stop(0)
	crashed = c.crashAt(0, FailReplayParticipantsDone)
	c.start(0, nil) // with the failpoint: its replay stops after the participant
	<-crashed
	c.eventually("the participant applied and released", func() bool { return c.heldCount(1) == 0 })
	if _, err := c.srv(1).Unlink(ctx, &weftpb.UnlinkRequest{Creds: rootCreds(), Parent: dst.Ino, Name: "g"}); err != nil {
		t.Fatalf("unlink of the renamed file: %v", err)
	}
	c.restart(0)
	c.eventually("the coordinator settles its intent", func() bool { return c.keysWithTag(0, tagIntent) == 0 })
	if a, err := c.lookupOn(1, dst.Ino, "g"); errs.KindOf(err) != errs.NotExist {
		t.Errorf("dst/g after the second replay: %+v, %v; want it still removed", a, err)
	}
	if _, err := c.lookupOn(0, src.Ino, "f"); errs.KindOf(err) != errs.NotExist {
		t.Errorf("src/f after the replayed rename: %v, want NotExist", err)
	}
}

// TestParticipantCrashBeforeApply: a participant crashes after granting a
// cross-server rename its locks and before the writes arrive; the
// coordinator commits its own part and leaves the participant's writes to
// its replay. The restarted participant must take the replay before any
// later operation changes the same records, or the replay, computed under
// the lost locks, overwrites it (TestGigaCrash found a directory whose
// entry count had lost one that way).
func TestParticipantCrashBeforeApply(t *testing.T) {
	c := newTestCluster(t, 2, func(_ int, cfg *Config) { cfg.SplitThreshold, cfg.SplitBits = 2, 1 })
	src, dst := c.dirOn(0, "a"), c.dirOn(1, "b")
	if _, err := c.srv(0).Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: src.Ino, Name: "f", Mode: 0o644, Exclusive: true}); err != nil {
		t.Fatal(err)
	}
	// At the coordinator's intent, the participant loses power.
	crashed := make(chan struct{})
	var once sync.Once
	c.mu.Lock()
	c.hooks[0] = func(point string) error {
		if point == FailDistIntentWritten {
			once.Do(func() {
				c.mu.Lock()
				c.fss[1] = c.fss[1].CrashClone(vfs.CrashCloneCfg{})
				c.mu.Unlock()
				c.stop(1)
				close(crashed)
			})
		}
		return nil
	}
	c.mu.Unlock()
	if _, err := c.srv(0).Rename(ctx, &weftpb.RenameRequest{Creds: rootCreds(), SrcParent: src.Ino, SrcName: "f", DstParent: dst.Ino, DstName: "g"}); err != nil {
		t.Fatalf("rename with its participant's writes deferred: %v", err)
	}
	<-crashed
	c.start(1, nil)
	// At once, before the coordinator's next replay tick.
	if _, err := c.srv(1).Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: dst.Ino, Name: "x", Mode: 0o644, Exclusive: true}); err != nil {
		t.Fatal(err)
	}
	c.eventually("the coordinator settles its intent", func() bool { return c.keysWithTag(0, tagIntent) == 0 })
	names := c.entryNames(1, core.Ino(dst.Ino))
	d := &weftpb.InodeRecord{}
	if found, err := getRecord(c.srv(1).db, inodeKey(core.Ino(dst.Ino)), d); err != nil || !found {
		t.Fatalf("dst record: %v %v", found, err)
	}
	if len(names) != 2 || d.Entries != 2 {
		t.Errorf("dst holds %q and records %d entries; want [g x] and 2", names, d.Entries)
	}
}
