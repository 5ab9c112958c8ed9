package fsck

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/proto/weftpb"
)

// tree is what newTree creates, by inode.
type tree struct {
	d, e, sub, sub2 core.Ino // directories /d, /e, /d/sub (empty), /d/sub2 (one file)
	f0              core.Ino // /d/f0, hard-linked as /d/h0, with an extended attribute
}

// newTree fills a three-server cluster (split threshold 8) with a
// directory /d split across every server, then stops the meta servers.
func newTree(t *testing.T) (*testCluster, *tree) {
	t.Helper()
	tc := newTestCluster(t, 3, 8)
	c := tc.client()
	for _, d := range []string{"/d", "/e", "/d/sub", "/d/sub2"} {
		if err := c.Mkdir(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		f, err := c.Create(ctx, fmt.Sprintf("/d/f%d", i), 0o644)
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	f, err := c.Create(ctx, "/d/sub2/x", 0o644)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Link(ctx, "/d/f0", "/d/h0"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetXattrPath(ctx, "/d/h0", "user.a", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	// The attribute lives with the inode's standalone record, on its owner,
	// whichever server holds the name it was set through.
	if v, err := c.GetXattrPath(ctx, "/d/f0", "user.a"); err != nil || string(v) != "1" {
		t.Fatalf("getxattr of a hard-linked file: %q, %v", v, err)
	}
	if err := c.SetXattrPath(ctx, "/d/f1", "user.b", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	tr := &tree{}
	for p, ino := range map[string]*core.Ino{"/d": &tr.d, "/e": &tr.e, "/d/sub": &tr.sub, "/d/sub2": &tr.sub2, "/d/f0": &tr.f0} {
		a, err := c.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		*ino = a.Ino
	}
	tc.stop()
	return tc, tr
}

func TestCleanClusterHasNoFindings(t *testing.T) {
	tc, _ := newTree(t)
	r := tc.check(false)
	if !r.Clean() || len(r.Findings) > 0 {
		t.Fatalf("stopped cluster: %s", describe(r))
	}
	if r.Running || r.Servers != 3 || r.Directories != 5 || r.Partitions < 7 || r.Entries != 46 || r.Inodes != 46 || r.Xattrs != 2 {
		t.Errorf("stopped cluster: %+v", r)
	}
	if r = tc.check(true); !r.Clean() || len(r.Findings) > 0 {
		t.Fatalf("repair of a clean cluster: %s", describe(r))
	}
	tc.start()
	if r = tc.check(false); !r.Clean() || len(r.Findings) > 0 || !r.Running || r.Entries != 46 {
		t.Fatalf("running cluster: %+v%s", r, describe(r))
	}
}

// TestDamage injects one kind of damage at a time into stopped stores and
// checks that fsck finds it, that --repair repairs it (or says why not),
// that a second run is clean, and that the file system works afterwards.
func TestDamage(t *testing.T) {
	cases := []struct {
		name   string
		inject func(t *testing.T, ss stores, tr *tree)
		want   Kind
		// unfixable: the finding stays after --repair.
		unfixable bool
		// after checks the cluster after the repair (it finds the meta
		// servers stopped, and may start them).
		after func(t *testing.T, tc *testCluster, tr *tree)
	}{{
		name: "entry on another server",
		inject: func(t *testing.T, ss stores, tr *tree) {
			srv, key, val := ss.entry(t, tr.d, "f5")
			to, p := ss.otherPartition(t, tr.d, srv)
			ss.apply(t, to, &weftpb.KeyOp{Key: layout.EntryKey(tr.d, p, "f5"), Value: val}, ss.count(t, to, tr.d, 1, 0))
			ss.apply(t, srv, &weftpb.KeyOp{Key: key, Delete: true}, ss.count(t, srv, tr.d, -1, 0))
		},
		want:  KindMisplaced,
		after: listedOnce("/d", "f5", 43),
	}, {
		name: "entry in two places",
		inject: func(t *testing.T, ss stores, tr *tree) {
			srv, _, val := ss.entry(t, tr.d, "f6")
			to, p := ss.otherPartition(t, tr.d, srv)
			ss.apply(t, to, &weftpb.KeyOp{Key: layout.EntryKey(tr.d, p, "f6"), Value: val}, ss.count(t, to, tr.d, 1, 0))
		},
		want:  KindDuplicate,
		after: listedOnce("/d", "f6", 43),
	}, {
		name: "entry under a hash that is not its name's",
		inject: func(t *testing.T, ss stores, tr *tree) {
			srv, key, val := ss.entry(t, tr.d, "f7")
			bad := append([]byte(nil), key...)
			binary.BigEndian.PutUint64(bad[13:], core.NameHash("f7")^1<<40)
			ss.apply(t, srv, &weftpb.KeyOp{Key: bad, Value: val}, &weftpb.KeyOp{Key: key, Delete: true})
		},
		want:  KindMisplaced,
		after: listedOnce("/d", "f7", 43),
	}, {
		name: "entry pointing to a missing record",
		inject: func(t *testing.T, ss stores, tr *tree) {
			srv, key, _ := ss.entry(t, tr.d, "f8")
			_, p, _, _, _ := layout.EntryKeyParts(key)
			e := &weftpb.EntryRecord{Ino: uint64(core.MakeIno(1, 1<<40)), Mode: core.ModeFile | 0o644}
			ss.apply(t, srv, &weftpb.KeyOp{Key: layout.EntryKey(tr.d, p, "f8"), Value: marshal(e)})
		},
		want: KindDangling,
		after: func(t *testing.T, tc *testCluster, tr *tree) {
			tc.start()
			if _, err := tc.client().Stat(ctx, "/d/f8"); !errs.Is(err, errs.NotExist) {
				t.Errorf("stat of the dangling name after repair: %v", err)
			}
		},
	}, {
		name: "empty directory without a name",
		inject: func(t *testing.T, ss stores, tr *tree) {
			srv, key, _ := ss.entry(t, tr.d, "sub")
			ss.apply(t, srv, &weftpb.KeyOp{Key: key, Delete: true}, ss.count(t, srv, tr.d, -1, -1))
		},
		want: KindOrphan,
		after: func(t *testing.T, tc *testCluster, tr *tree) {
			ss := tc.open()
			defer ss.close()
			if _, found := ss.get(t, tr.sub.Server(), layout.InodeKey(tr.sub)); found {
				t.Error("the orphan directory's record is still there")
			}
		},
	}, {
		name: "directory with entries without a name",
		inject: func(t *testing.T, ss stores, tr *tree) {
			srv, key, _ := ss.entry(t, tr.d, "sub2")
			ss.apply(t, srv, &weftpb.KeyOp{Key: key, Delete: true}, ss.count(t, srv, tr.d, -1, -1))
		},
		want:      KindOrphan,
		unfixable: true,
	}, {
		name: "hard-linked file without names",
		inject: func(t *testing.T, ss stores, tr *tree) {
			for _, name := range []string{"f0", "h0"} {
				srv, key, _ := ss.entry(t, tr.d, name)
				ss.apply(t, srv, &weftpb.KeyOp{Key: key, Delete: true}, ss.count(t, srv, tr.d, -1, 0))
			}
		},
		want: KindOrphan,
		after: func(t *testing.T, tc *testCluster, tr *tree) {
			ss := tc.open()
			defer ss.close()
			srv := tr.f0.Server()
			if _, found := ss.get(t, srv, layout.InodeKey(tr.f0)); found {
				t.Error("the orphan file's record is still there")
			}
			if _, found := ss.get(t, srv, append(layout.XattrPrefix(tr.f0), "user.a"...)); found {
				t.Error("the orphan file's extended attribute is still there")
			}
		},
	}, {
		name: "extended attributes of nothing",
		inject: func(t *testing.T, ss stores, tr *tree) {
			ss.apply(t, 1, &weftpb.KeyOp{Key: append(layout.XattrPrefix(core.MakeIno(2, 1<<40)), "user.z"...), Value: []byte("z")})
		},
		want: KindXattr,
	}, {
		name: "wrong entry count",
		inject: func(t *testing.T, ss stores, tr *tree) {
			ss.apply(t, tr.d.Server(), ss.count(t, tr.d.Server(), tr.d, 3, 1))
		},
		want: KindCount,
	}, {
		name: "stub of a directory that does not exist",
		inject: func(t *testing.T, ss stores, tr *tree) {
			gone := core.MakeIno(0, 1<<40)
			stub := &weftpb.InodeRecord{Mode: core.ModeDir | 0o755, Nlink: 2, Stub: true, Partition: 1, Radix: 1, Bitmap: []byte{3}}
			ss.apply(t, core.PartitionServer(gone, 1, 3), &weftpb.KeyOp{Key: layout.InodeKey(gone), Value: marshal(stub)})
		},
		want: KindPartition,
	}, {
		name: "bitmap without a partition that split from it",
		inject: func(t *testing.T, ss stores, tr *tree) {
			r := ss.partition(t, tr.d.Server(), tr.d)
			r.Bitmap = []byte{r.Bitmap[0] &^ (1 << 2)}
			ss.apply(t, tr.d.Server(), &weftpb.KeyOp{Key: layout.InodeKey(tr.d), Value: marshal(r)})
		},
		want: KindPartition,
		after: func(t *testing.T, tc *testCluster, tr *tree) {
			tc.start()
			ents, err := tc.client().ReadDir(ctx, "/d")
			if err != nil || len(ents) != 43 {
				t.Errorf("readdir after repair: %d names, %v", len(ents), err)
			}
		},
	}, {
		name: "entries of a directory that does not exist",
		inject: func(t *testing.T, ss stores, tr *tree) {
			_, _, val := ss.entry(t, tr.d, "f10")
			e, err := decodeEntry(val)
			if err != nil {
				t.Fatal(err)
			}
			e.Ino = uint64(core.MakeIno(1, 1<<40+1))
			ss.apply(t, 1, &weftpb.KeyOp{Key: layout.EntryKey(core.MakeIno(1, 1<<40), 0, "f10"), Value: marshal(e)})
		},
		want:      KindPartition,
		unfixable: true,
	}, {
		name: "standalone record on a server that does not own it",
		inject: func(t *testing.T, ss stores, tr *tree) {
			v, _ := ss.get(t, tr.f0.Server(), layout.InodeKey(tr.f0))
			ss.apply(t, tr.f0.Server()+1, &weftpb.KeyOp{Key: layout.InodeKey(tr.f0), Value: v})
		},
		want:      KindInode,
		unfixable: true,
	}, {
		name: "wrong parent pointer",
		inject: func(t *testing.T, ss stores, tr *tree) {
			r := ss.partition(t, tr.sub.Server(), tr.sub)
			r.Parent = uint64(tr.e)
			ss.apply(t, tr.sub.Server(), &weftpb.KeyOp{Key: layout.InodeKey(tr.sub), Value: marshal(r)})
		},
		want: KindLinks,
		after: func(t *testing.T, tc *testCluster, tr *tree) {
			// The parent pointer guards directory moves against cycles.
			tc.start()
			c := tc.client()
			if err := c.Rename(ctx, "/e", "/d/sub/e", 0); err != nil {
				t.Errorf("rename after repair: %v", err)
			}
		},
	}, {
		name: "one file in two directories",
		inject: func(t *testing.T, ss stores, tr *tree) {
			_, _, val := ss.entry(t, tr.d, "f9")
			srv := tr.e.Server() // /e has one partition, on its owner
			ss.apply(t, srv, &weftpb.KeyOp{Key: layout.EntryKey(tr.e, 0, "f9"), Value: val}, ss.count(t, srv, tr.e, 1, 0))
		},
		want:      KindInode,
		unfixable: true,
	}}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			tc, tr := newTree(t)
			ss := tc.open()
			tt.inject(t, ss, tr)
			ss.close()

			r := tc.check(false)
			if got := kinds(r); len(got) != 1 || got[tt.want] == 0 {
				t.Fatalf("found %v, want %s:%s", got, tt.want, describe(r))
			}
			for _, f := range r.Findings {
				if f.Repaired || f.Fixable == tt.unfixable {
					t.Errorf("check without repair: %s (fixable %v)", f, f.Fixable)
				}
			}
			r = tc.check(true)
			if got := kinds(r); len(got) != 1 || got[tt.want] == 0 {
				t.Fatalf("repair found %v, want %s:%s", got, tt.want, describe(r))
			}
			if tt.unfixable {
				if r.Unrepaired() == 0 || tc.check(false).Clean() {
					t.Fatalf("an unfixable finding was repaired:%s", describe(r))
				}
				return
			}
			if r.Unrepaired() != 0 {
				t.Fatalf("repair left findings:%s", describe(r))
			}
			if again := tc.check(false); !again.Clean() || len(again.Findings) > 0 {
				t.Fatalf("second run after repair:%s", describe(again))
			}
			if tt.after != nil {
				tt.after(t, tc, tr)
			}
			if len(tc.metas) == 0 {
				tc.start()
			}
			if r := tc.check(false); !r.Clean() {
				t.Fatalf("running cluster after repair:%s", describe(r))
			}
		})
	}
}

// listedOnce checks that dir lists name once and n names in all, and that
// name can be found.
func listedOnce(dir, name string, n int) func(t *testing.T, tc *testCluster, tr *tree) {
	return func(t *testing.T, tc *testCluster, _ *tree) {
		tc.start()
		c := tc.client()
		ents, err := c.ReadDir(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, e := range ents {
			if e.Name == name {
				seen++
			}
		}
		if seen != 1 || len(ents) != n {
			t.Errorf("%s lists %s %d times, %d names in all (want 1, %d)", dir, name, seen, len(ents), n)
		}
		if _, err := c.Stat(ctx, dir+"/"+name); err != nil {
			t.Errorf("stat %s/%s: %v", dir, name, err)
		}
		tc.stop()
	}
}
