package meta

import (
	"bytes"
	"context"
	"slices"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Unlink removes a name of a non-directory. The reply says freed when the
// last link of a chunked file went; its chunks are recorded for the
// reclaimer in the same batch (reclaim.go).
func (s *Server) Unlink(ctx context.Context, req *weftpb.UnlinkRequest) (*weftpb.UnlinkReply, error) {
	const op = "unlink"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	if err := validName(op, req.Name); err != nil {
		return nil, err
	}
	parent := core.Ino(req.Parent)
	reply := &weftpb.UnlinkReply{}
	err = s.update(ctx, op, []core.Ino{parent}, func(t *txn) error {
		d, n, err := t.removable(c, parent, req.Name)
		if err != nil {
			return err
		}
		if n.isDir() {
			return &errs.Error{Kind: errs.IsDir, Op: op, Path: req.Name}
		}
		if err := checkSticky(op, c, d, n.attr); err != nil {
			return err
		}
		t.deleteEntry(parent, d, req.Name)
		freed, err := t.dropLink(n)
		if err != nil {
			return err
		}
		t.reclaimFreed(n, freed, req.Open)
		d.Entries--
		t.touchDir(parent, d)
		reply.Attr, reply.Freed = n.wireAttr(), freed
		return nil
	})
	if err != nil {
		return nil, err
	}
	if reply.Freed {
		s.reclaim.poke()
	}
	return reply, nil
}

// Rmdir removes an empty directory.
func (s *Server) Rmdir(ctx context.Context, req *weftpb.RmdirRequest) (*weftpb.Empty, error) {
	const op = "rmdir"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	if err := validName(op, req.Name); err != nil {
		return nil, err
	}
	parent := core.Ino(req.Parent)
	err = s.update(ctx, op, []core.Ino{parent}, func(t *txn) error {
		d, n, err := t.removable(c, parent, req.Name)
		if err != nil {
			return err
		}
		switch {
		case !n.isDir():
			return &errs.Error{Kind: errs.NotDir, Op: op, Path: req.Name}
		case n.ino == core.RootIno:
			return errs.E(errs.Busy, op)
		}
		if empty, err := t.dirEmpty(n); err != nil {
			return err
		} else if !empty {
			return &errs.Error{Kind: errs.NotEmpty, Op: op, Path: req.Name}
		}
		if err := checkSticky(op, c, d, n.attr); err != nil {
			return err
		}
		t.deleteEntry(parent, d, req.Name)
		t.removeDir(n)
		d.Entries--
		d.Nlink--
		t.touchDir(parent, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &weftpb.Empty{}, nil
}

// removable finds name in parent for removal: the caller needs write and
// search permission on the directory.
func (t *txn) removable(c core.Creds, parent core.Ino, name string) (*weftpb.InodeRecord, *node, error) {
	t.route(parent, name)
	d, err := t.dirFor(parent, name)
	if err != nil {
		return nil, nil, err
	}
	if err := checkAccess(t.op, c, d, mayWrite|mayExec); err != nil {
		return nil, nil, err
	}
	n, found, err := t.child(parent, d, name)
	if err != nil {
		return nil, nil, err
	}
	if !found {
		return nil, nil, &errs.Error{Kind: errs.NotExist, Op: t.op, Path: name}
	}
	return d, n, nil
}

// dirEmpty reports whether directory n has no entries in any partition. A
// directory whose partition 0 split may have partitions on every other
// server: their stubs are read (and locked) too.
func (t *txn) dirEmpty(n *node) (bool, error) {
	if n.attr.Entries > 0 {
		return false, nil
	}
	if n.attr.Radix == 0 || t.s.n == 1 {
		return true, nil
	}
	for q := uint32(1); q < uint32(t.s.n); q++ {
		d, err := t.part(core.PartitionServer(n.ino, q, t.s.n), n.ino)
		if errs.Is(err, errs.Stale) {
			continue
		}
		if err != nil {
			return false, err
		}
		if d.Entries > 0 {
			return false, nil
		}
	}
	return true, nil
}

// removeDir deletes an empty directory n whose entry the caller removes,
// with its partition stubs (dirEmpty read them).
func (t *txn) removeDir(n *node) {
	if n.attr.Radix > 0 {
		for l, r := range t.parts {
			if l.ino == n.ino && r != nil {
				t.deletePart(l.srv, l.ino)
			}
		}
	}
	t.deleteInode(n.ino)
	t.uncount(n.ino, true)
	n.attr.Nlink = 0
}

// dropLink accounts for the removal of n's entry (n.parent, n.name), which
// the caller deletes or overwrites. The last link deletes the inode (and its
// xattrs); freed reports a chunked file whose chunks must go (the caller
// records them: reclaimFreed). A
// hard-linked file that is left with one link moves its attributes back into
// that entry.
func (t *txn) dropLink(n *node) (freed bool, err error) {
	r := n.attr
	if n.embedded() {
		t.deleteXattrsAt(t.partServer(n.parent, n.parentRec), n.ino)
		t.uncount(n.ino, false)
		r.Nlink = 0
		return core.IsRegular(r.Mode) && !r.Inline, nil
	}
	if err := t.needOwner(n.ino); err != nil {
		return false, err
	}
	r.Links = slices.DeleteFunc(r.Links, func(l *weftpb.LinkRef) bool {
		return core.Ino(l.Parent) == n.parent && bytes.Equal(l.Name, []byte(n.name))
	})
	r.Nlink--
	r.CtimeNs = t.now
	if r.Nlink > 1 {
		t.putInode(n.ino, r)
		return false, nil
	}
	if r.Nlink == 1 && len(r.Links) == 1 {
		return false, t.embed(n.ino, r)
	}
	// No link left (or a record that lost track of its links).
	t.deleteInode(n.ino)
	t.uncount(n.ino, false)
	r.Nlink = 0
	return core.IsRegular(r.Mode) && !r.Inline, nil
}

// embed moves the attributes of a file left with one link from its
// standalone record into that link's entry. When the entry lives on another
// meta server than the record, the record stays (with one link): extended
// attributes follow the attributes, and moving them is not worth a
// cross-server write.
func (t *txn) embed(ino core.Ino, r *weftpb.InodeRecord) error {
	l := r.Links[0]
	name := string(l.Name)
	d, err := t.dirFor(core.Ino(l.Parent), name)
	if err != nil {
		return err
	}
	if t.partServer(core.Ino(l.Parent), d) != t.s.ownerOf(ino) {
		t.putInode(ino, r)
		return nil
	}
	e, found, err := t.entry(core.Ino(l.Parent), d, name)
	if err != nil {
		return err
	}
	if !found || core.Ino(e.Ino) != ino {
		return errs.New(errs.Corrupt, t.op, "inode %d lists link %d/%q that does not point to it", ino, l.Parent, name)
	}
	r.Links = nil
	e.Attr, e.Mode = r, r.Mode
	t.putEntry(core.Ino(l.Parent), d, name, e)
	// Drop the standalone record but keep the xattrs: they follow the ino.
	t.inodes[ino] = nil
	srv := t.s.ownerOf(ino)
	delete(t.dirty, loc{srv, ino})
	if srv != t.s.cfg.ID {
		t.remoteOp(srv, &weftpb.KeyOp{Key: inodeKey(ino), Delete: true})
		return nil
	}
	t.b.Delete(inodeKey(ino), nil)
	return nil
}
