package meta

import (
	"sync"
	"testing"

	"github.com/weftfs/weft/proto/weftpb"
)

// Concurrent creates in one directory in sync mode: every acknowledged create
// is there after a restart, and the directory's counts add up.
func TestConcurrentCreatesSurviveReopen(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootCreds(), root, "d", 0o777)
	const workers, each = 16, 40
	var wg sync.WaitGroup
	inos := make([][]uint64, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r, err := e.Create(ctx, &weftpb.CreateRequest{Creds: user(uint32(1000+w), 100), Parent: d.Ino,
					Name: "w" + itoa(w) + "-" + itoa(i), Mode: 0o644, Exclusive: true})
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				inos[w] = append(inos[w], r.Attr.Ino)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	e.reopen()
	seen := map[uint64]bool{}
	for w := range workers {
		for i := range each {
			a := e.mustLookup(d.Ino, "w"+itoa(w)+"-"+itoa(i))
			if a.Ino != inos[w][i] || seen[a.Ino] {
				t.Fatalf("w%d-%d: ino %d (created as %d), dup %v", w, i, a.Ino, inos[w][i], seen[a.Ino])
			}
			seen[a.Ino] = true
		}
	}
	if n := len(e.names(d.Ino)); n != workers*each {
		t.Fatalf("readdir lists %d, want %d", n, workers*each)
	}
	st := must[*weftpb.StatFSReply](t)(e.StatFS(ctx, &weftpb.StatFSRequest{}))
	if st.Files != workers*each+2 {
		t.Fatalf("files %d, want %d", st.Files, workers*each+2)
	}
	// Remove them all concurrently: the directory is then empty and removable.
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := e.unlink(rootCreds(), d.Ino, "w"+itoa(w)+"-"+itoa(i)); err != nil {
					t.Errorf("unlink: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := e.rmdir(rootCreds(), root, "d"); err != nil {
		t.Fatalf("rmdir after removing everything: %v", err)
	}
}

// Concurrent hard-link churn on one file from two directories keeps nlink
// and the link list consistent (this exercises the relock path).
func TestConcurrentLinkUnlink(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Durability = DurabilityAsync })
	a := e.mkdir(rootCreds(), root, "a", 0o777)
	b := e.mkdir(rootCreds(), root, "b", 0o777)
	f := e.create(rootCreds(), a.Ino, "f", 0o644)
	var wg sync.WaitGroup
	for w, dir := range []uint64{a.Ino, b.Ino, b.Ino, a.Ino} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				name := "l" + itoa(w) + "-" + itoa(i)
				if _, err := e.link(rootCreds(), inoRefOrEntry(e, a.Ino, f.Ino), dir, name); err != nil {
					t.Errorf("link: %v", err)
					return
				}
				if _, err := e.unlink(rootCreds(), dir, name); err != nil {
					t.Errorf("unlink: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := e.mustLookup(a.Ino, "f")
	if got.Nlink != 1 || e.hasInodeRecord(f.Ino) || e.entryRecord(a.Ino, "f").Attr == nil {
		t.Fatalf("after churn: nlink %d, standalone %v", got.Nlink, e.hasInodeRecord(f.Ino))
	}
}

// inoRefOrEntry names the file by its entry: that works whether its
// attributes are embedded or standalone at the moment.
func inoRefOrEntry(_ *env, parent, ino uint64) *weftpb.NodeRef { return fileRef(parent, "f", ino) }
