package meta

import (
	"fmt"
	"testing"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/proto/weftpb"
)

// TestSplitDirTimes is issue 12's item 9c: in a directory split across
// servers, a create, link, unlink or rename of a name in a partition that
// is not the owner's must move the directory's mtime and ctime as stat
// shows them.
func TestSplitDirTimes(t *testing.T) {
	const n = 4
	c := newTestCluster(t, n, func(_ int, cfg *Config) { cfg.SplitThreshold, cfg.SplitBits = 4, 2 })
	d := c.dirOn(0, "d")
	dir := core.Ino(d.Ino)
	call := func(fn func(s *Server) error) {
		t.Helper()
		if err := c.on(fn); err != nil {
			t.Fatal(err)
		}
	}
	create := func(name string) {
		t.Helper()
		call(func(s *Server) error {
			_, err := s.Create(ctx, &weftpb.CreateRequest{Creds: rootCreds(), Parent: d.Ino, Name: name, Mode: 0o644, Exclusive: true})
			return err
		})
	}
	for i := range 40 {
		create(fmt.Sprintf("seed%d", i))
	}
	c.eventually("the directory spans the servers", func() bool {
		for id := 1; id < n; id++ {
			if len(c.entryNames(id, dir)) == 0 {
				return false
			}
		}
		return true
	})
	// remote picks a fresh name whose entry would land off the owner.
	k := 0
	remote := func() string {
		for ; ; k++ {
			name := fmt.Sprintf("r%d", k)
			if c.nameServer(dir, name) != 0 {
				k++
				return name
			}
		}
	}
	stat := func() *weftpb.Attr {
		t.Helper()
		r, err := c.srv(0).GetAttr(ctx, &weftpb.GetAttrRequest{Creds: rootCreds(), Node: inoRef(d.Ino)})
		if err != nil {
			t.Fatal(err)
		}
		return r.Attr
	}
	victim := remote()
	create(victim)
	steps := []struct {
		what string
		do   func()
	}{
		{"create", func() { create(remote()) }},
		{"mkdir", func() {
			name := remote()
			call(func(s *Server) error {
				_, err := s.Mkdir(ctx, &weftpb.MkdirRequest{Creds: rootCreds(), Parent: d.Ino, Name: name, Mode: 0o755})
				return err
			})
		}},
		{"rename", func() {
			from, to := victim, remote()
			victim = to
			call(func(s *Server) error {
				_, err := s.Rename(ctx, &weftpb.RenameRequest{Creds: rootCreds(), SrcParent: d.Ino, SrcName: from, DstParent: d.Ino, DstName: to})
				return err
			})
		}},
		{"link", func() {
			a, err := c.lookupOn(c.nameServer(dir, victim), d.Ino, victim)
			if err != nil {
				t.Fatal(err)
			}
			name := remote()
			call(func(s *Server) error {
				_, err := s.Link(ctx, &weftpb.LinkRequest{Creds: rootCreds(), Node: fileRef(d.Ino, victim, a.Ino), NewParent: d.Ino, NewName: name})
				return err
			})
		}},
		{"unlink", func() {
			call(func(s *Server) error {
				_, err := s.Unlink(ctx, &weftpb.UnlinkRequest{Creds: rootCreds(), Parent: d.Ino, Name: victim})
				return err
			})
		}},
	}
	for _, st := range steps {
		before := stat()
		c.clock.Advance()
		st.do()
		after := stat()
		if after.MtimeNs <= before.MtimeNs || after.CtimeNs <= before.CtimeNs {
			t.Errorf("%s in another partition: mtime %d -> %d, ctime %d -> %d", st.what, before.MtimeNs, after.MtimeNs, before.CtimeNs, after.CtimeNs)
		}
	}
}

// nameServer is the server whose partition of dir holds name now.
func (c *testCluster) nameServer(dir core.Ino, name string) int {
	for id := range c.srvs {
		d := &weftpb.InodeRecord{}
		found, err := getRecord(c.srv(id).db, inodeKey(dir), d)
		if err == nil && found && core.IsDir(d.Mode) && holds(d, core.NameHash(name)) {
			return id
		}
	}
	c.t.Fatalf("no partition of %d holds %q", dir, name)
	return -1
}
