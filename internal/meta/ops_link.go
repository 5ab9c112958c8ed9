package meta

import (
	"context"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// maxLinks bounds a file's link count (Linux: EMLINK; ext4 allows 65000).
const maxLinks = 65000

// Link adds a name for a non-directory. A file's second link moves its
// attributes out of its entry into a standalone inode record that every entry
// then points to (DESIGN: namespace).
func (s *Server) Link(ctx context.Context, req *weftpb.LinkRequest) (*weftpb.LinkReply, error) {
	const op = "link"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	if err := validName(op, req.NewName); err != nil {
		return nil, err
	}
	newParent := core.Ino(req.NewParent)
	reply := &weftpb.LinkReply{}
	err = s.update(ctx, op, append(refLock(req.Node), newParent), func(t *txn) error {
		t.route(newParent, req.NewName)
		n, err := t.resolve(req.Node)
		if err != nil {
			return err
		}
		if n.isDir() {
			return errs.New(errs.NotPermitted, op, "hard link to a directory")
		}
		if n.attr.Nlink >= maxLinks {
			return errs.New(errs.Range, op, "too many links")
		}
		d, err := s.checkNewName(t, c, newParent, req.NewName)
		if err != nil {
			return err
		}
		if n.embedded() {
			if err := t.unembed(n); err != nil {
				return err
			}
		} else if err := t.needOwner(n.ino); err != nil {
			return err
		}
		r := n.attr
		r.Nlink++
		r.Links = append(r.Links, &weftpb.LinkRef{Parent: uint64(newParent), Name: []byte(req.NewName)})
		r.CtimeNs = t.now
		t.putInode(n.ino, r)
		t.putEntry(newParent, d, req.NewName, &weftpb.EntryRecord{Ino: uint64(n.ino), Mode: r.Mode})
		d.Entries++
		t.grew(newParent, d)
		t.touchDir(newParent, d)
		reply.Attr = n.wireAttr()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return reply, nil
}

// unembed moves the attributes embedded in n's entry to a standalone record
// (written by the caller through putInode) and leaves a pointer entry.
func (t *txn) unembed(n *node) error {
	if err := t.needOwner(n.ino); err != nil {
		return err
	}
	if err := t.moveXattrs(t.partServer(n.parent, n.parentRec), t.s.ownerOf(n.ino), n.ino); err != nil {
		return err
	}
	r := n.attr
	r.Links = []*weftpb.LinkRef{{Parent: uint64(n.parent), Name: []byte(n.name)}}
	n.entry.Attr = nil
	t.putEntry(n.parent, n.parentRec, n.name, n.entry)
	n.entry = nil
	t.putInode(n.ino, r)
	return nil
}
