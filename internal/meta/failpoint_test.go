package meta

import (
	"fmt"
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestCrashDuringCrossServerRename crashes the coordinator of a rename
// between directories of two servers at each step of its commit, restarts
// it from its disk, and checks that the rename is either whole or absent:
// once the intent is written, the restart finishes it.
func TestCrashDuringCrossServerRename(t *testing.T) {
	for _, point := range []string{FailDistIntentWritten, FailDistParticipantsDone} {
		t.Run(point, func(t *testing.T) {
			c := newTestCluster(t, 2, func(_ int, cfg *Config) { cfg.SplitThreshold = 2; cfg.SplitBits = 1 })
			src, dst := c.dirOn(0, "a"), c.dirOn(1, "b")
			if _, err := c.srv(0).Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: src.Ino, Name: "f", Mode: 0o644, Exclusive: true}); err != nil {
				t.Fatal(err)
			}
			crashed := c.crashAt(0, point)
			_, err := c.srv(0).Rename(ctx, &weftpb.RenameRequest{Creds: rootCreds(), SrcParent: src.Ino, SrcName: "f", DstParent: dst.Ino, DstName: "g"})
			select {
			case <-crashed:
			default:
				t.Fatalf("rename did not reach %s: %v", point, err)
			}
			if err == nil {
				t.Fatal("rename acknowledged although its coordinator crashed")
			}
			c.restart(0)
			c.eventually("the restarted coordinator finishes the rename", func() bool { return c.keysWithTag(0, tagIntent) == 0 })
			if _, err := c.lookupOn(0, src.Ino, "f"); errs.KindOf(err) != errs.NotExist {
				t.Errorf("source after the replay: %v, want NotExist", err)
			}
			a, err := c.lookupOn(1, dst.Ino, "g")
			if err != nil || !core.IsRegular(a.Mode) {
				t.Errorf("target after the replay: %+v, %v", a, err)
			}
		})
	}
}

// TestCrashDuringSplit crashes a server at each step of splitting the root
// directory, restarts it, and checks that once the restarted server has
// finished the split every name is in exactly one partition.
func TestCrashDuringSplit(t *testing.T) {
	for _, point := range []string{FailSplitIntentWritten, FailSplitInstalled} {
		t.Run(point, func(t *testing.T) {
			c := newTestCluster(t, 2, func(_ int, cfg *Config) { cfg.SplitThreshold = 20; cfg.SplitBits = 1 })
			crashed := c.crashAt(0, point)
			// names were acknowledged before the crash; doubt is the one
			// create in flight when it came (the split runs beside it).
			var names []string
			var doubt string
			for i := 0; ; i++ {
				name := fmt.Sprintf("n%d", i)
				err := c.on(func(s *Server) error {
					_, err := s.Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: root, Name: name, Mode: 0o644, Exclusive: true})
					return err
				})
				if err != nil {
					t.Fatalf("create %s: %v", name, err)
				}
				select {
				case <-crashed:
					doubt = name
				default:
					names = append(names, name)
					if i < 1000 {
						continue
					}
					t.Fatalf("no split reached %s after %d creates", point, i)
				}
				break
			}
			c.restart(0)
			c.eventually("the restarted server finishes the split", func() bool { return c.keysWithTag(0, tagSplit) == 0 })
			c.eventually("root is split", func() bool {
				d := &weftpb.InodeRecord{}
				found, err := getRecord(c.srv(0).db, inodeKey(core.RootIno), d)
				return err == nil && found && d.Radix > 0
			})
			seen := map[string]int{}
			for id := range 2 {
				for _, name := range c.entryNames(id, core.RootIno) {
					seen[name]++
				}
			}
			for _, name := range names {
				if seen[name] != 1 {
					t.Errorf("%s is in %d partitions", name, seen[name])
				}
				if err := c.on(func(s *Server) error {
					_, err := s.Lookup(ctx, &weftpb.LookupRequest{Creds: rootCreds(), Parent: root, Name: name})
					return err
				}); err != nil {
					t.Errorf("lookup %s after the split: %v", name, err)
				}
			}
			if seen[doubt] > 1 {
				t.Errorf("%s, created during the crash, is in %d partitions", doubt, seen[doubt])
			}
			if len(seen) > len(names)+1 {
				t.Errorf("%d names in the partitions, %d created", len(seen), len(names)+1)
			}
		})
	}
}
