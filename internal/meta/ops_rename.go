package meta

import (
	"bytes"
	"context"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Rename flags, Linux values.
const (
	renameNoReplace = uint32(weftpb.RenameFlags_RENAME_NOREPLACE)
	renameExchange  = uint32(weftpb.RenameFlags_RENAME_EXCHANGE)
)

// maxDepth bounds the ancestry walk, so a corrupt parent chain cannot loop.
const maxDepth = 1 << 16

// Rename moves src_parent/src_name to dst_parent/dst_name with rename(2) and
// renameat2(2) semantics: a replaced file or empty directory is removed
// (reported in the reply), RENAME_NOREPLACE refuses an existing target,
// RENAME_EXCHANGE swaps two existing names. Both parents are locked (in
// stripe order); a directory that changes parent also takes renameMu, so the
// check that it is not moved under itself cannot race with another move.
func (s *Server) Rename(ctx context.Context, req *weftpb.RenameRequest) (*weftpb.RenameReply, error) {
	const op = "rename"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	if err := validName(op, req.SrcName); err != nil {
		return nil, err
	}
	if err := validName(op, req.DstName); err != nil {
		return nil, err
	}
	if req.Flags&^(renameNoReplace|renameExchange) != 0 || req.Flags == renameNoReplace|renameExchange {
		return nil, errs.New(errs.Invalid, op, "rename flags %#x", req.Flags)
	}
	srcP, dstP := core.Ino(req.SrcParent), core.Ino(req.DstParent)
	reply := &weftpb.RenameReply{}
	err = s.update(ctx, op, []core.Ino{srcP, dstP}, func(t *txn) error {
		*reply = weftpb.RenameReply{}
		return s.rename(t, c, req, reply)
	})
	if err != nil {
		return nil, err
	}
	if reply.Freed {
		s.reclaim.poke()
	}
	return reply, nil
}

func (s *Server) rename(t *txn, c core.Creds, req *weftpb.RenameRequest, reply *weftpb.RenameReply) error {
	srcP, dstP := core.Ino(req.SrcParent), core.Ino(req.DstParent)
	t.route(srcP, req.SrcName)
	sd, err := t.dirFor(srcP, req.SrcName)
	if err != nil {
		return err
	}
	dd, err := t.dirFor(dstP, req.DstName)
	if err != nil {
		return err
	}
	if err := checkAccess(t.op, c, sd, mayWrite|mayExec); err != nil {
		return err
	}
	if err := checkAccess(t.op, c, dd, mayWrite|mayExec); err != nil {
		return err
	}
	src, found, err := t.child(srcP, sd, req.SrcName)
	if err != nil {
		return err
	}
	if !found {
		return &errs.Error{Kind: errs.NotExist, Op: t.op, Path: req.SrcName}
	}
	dst, dstFound, err := t.child(dstP, dd, req.DstName)
	if err != nil {
		return err
	}
	exchange := req.Flags&renameExchange != 0
	switch {
	case dstFound && dst.ino == src.ino:
		return nil // two names of one inode: rename does nothing
	case exchange && !dstFound:
		return &errs.Error{Kind: errs.NotExist, Op: t.op, Path: req.DstName}
	case dstFound && req.Flags&renameNoReplace != 0:
		return &errs.Error{Kind: errs.Exist, Op: t.op, Path: req.DstName}
	}
	if !dstFound {
		dst = nil
	}
	if err := s.checkRename(t, c, src, dst, dstP, exchange); err != nil {
		return err
	}
	if exchange {
		if err := t.moveEntry(src, dstP, dd, req.DstName); err != nil {
			return err
		}
		if err := t.moveEntry(dst, srcP, sd, req.SrcName); err != nil {
			return err
		}
		// Each partition record counts the subdirectories it holds: a
		// directory moving between two partitions of one directory moves
		// a link too (sd and dd are one record exactly when the same
		// partition holds both names).
		if sd != dd && src.isDir() != dst.isDir() {
			if src.isDir() {
				sd.Nlink--
				dd.Nlink++
			} else {
				dd.Nlink--
				sd.Nlink++
			}
		}
	} else {
		if dstFound {
			if dst.isDir() {
				t.removeDir(dst)
				dd.Nlink--
			} else if reply.Freed, err = t.dropLink(dst); err != nil {
				return err
			} else {
				t.reclaimFreed(dst, reply.Freed, req.Open)
			}
			reply.Replaced = dst.wireAttr()
			dd.Entries--
		}
		t.deleteEntry(srcP, sd, req.SrcName)
		sd.Entries--
		if err := t.moveEntry(src, dstP, dd, req.DstName); err != nil {
			return err
		}
		dd.Entries++
		t.grew(dstP, dd)
		if src.isDir() && sd != dd {
			sd.Nlink--
			dd.Nlink++
		}
	}
	t.touchDir(srcP, sd)
	t.touchDir(dstP, dd)
	return nil
}

// checkRename applies the type, emptiness, sticky and ancestry rules.
func (s *Server) checkRename(t *txn, c core.Creds, src, dst *node, dstP core.Ino, exchange bool) error {
	if dst != nil && !exchange {
		switch {
		case src.isDir() && !dst.isDir():
			return &errs.Error{Kind: errs.NotDir, Op: t.op, Path: dst.name}
		case !src.isDir() && dst.isDir():
			return &errs.Error{Kind: errs.IsDir, Op: t.op, Path: dst.name}
		}
		if dst.isDir() {
			if empty, err := t.dirEmpty(dst); err != nil {
				return err
			} else if !empty {
				return &errs.Error{Kind: errs.NotEmpty, Op: t.op, Path: dst.name}
			}
		}
	}
	if err := checkSticky(t.op, c, src.parentRec, src.attr); err != nil {
		return err
	}
	if dst != nil {
		if err := checkSticky(t.op, c, dst.parentRec, dst.attr); err != nil {
			return err
		}
	}
	if src.parent == dstP {
		return nil
	}
	// Directories that change parent: their ".." changes, which needs write
	// permission on them, and they must not land under themselves.
	moving := []struct {
		n  *node
		to core.Ino
	}{{src, dstP}}
	if exchange {
		moving = append(moving, struct {
			n  *node
			to core.Ino
		}{dst, src.parent})
	}
	for _, m := range moving {
		if !m.n.isDir() {
			continue
		}
		if err := t.needRenameMu(); err != nil {
			return err
		}
		if err := checkAccess(t.op, c, m.n.attr, mayWrite); err != nil {
			return err
		}
		under, err := s.isAncestor(m.n.ino, m.to)
		if err != nil {
			return err
		}
		if under {
			return errs.New(errs.Invalid, t.op, "cannot move a directory under itself")
		}
		if s.hookAncestryChecked != nil {
			s.hookAncestryChecked()
		}
	}
	return nil
}

// isAncestor reports whether directory a is d or one of d's ancestors. It
// reads parent pointers without their locks: they change only under the
// cluster's directory-move lock, which the caller holds.
func (s *Server) isAncestor(a, d core.Ino) (bool, error) {
	cur := d
	for range maxDepth {
		if cur == a {
			return true, nil
		}
		if cur == core.RootIno {
			return false, nil
		}
		r, found, err := s.readInode("rename", cur)
		if err != nil {
			return false, err
		}
		if !found {
			return false, errs.New(errs.Stale, "rename", "directory %d is gone", cur)
		}
		cur = core.Ino(r.Parent)
	}
	return false, errs.New(errs.Corrupt, "rename", "parent chain of %d deeper than %d", d, maxDepth)
}

// readInode reads ino's standalone record from its owner without locks.
func (s *Server) readInode(op string, ino core.Ino) (*weftpb.InodeRecord, bool, error) {
	srv, err := s.owner(op, ino)
	if err != nil {
		return nil, false, err
	}
	r := &weftpb.InodeRecord{}
	var found bool
	if srv == s.cfg.ID {
		found, err = getRecord(s.db, inodeKey(ino), r)
	} else {
		found, err = s.peerGet(s.giga.ctx, op, srv, weftpb.PeerGetRequest_INODE, ino, "", r)
	}
	return r, found, err
}

// moveEntry writes n's entry under a new (parent, name); the caller deletes
// or overwrites the old one. The moved node's ctime changes, a directory's
// parent pointer follows, and a hard-linked file's link list is updated.
func (t *txn) moveEntry(n *node, parent core.Ino, d *weftpb.InodeRecord, name string) error {
	r := n.attr
	r.CtimeNs = t.now
	switch {
	case n.embedded():
		n.entry.Attr = r
		// The extended attributes follow attributes that live in the entry.
		if err := t.moveXattrs(t.partServer(n.parent, n.parentRec), t.partServer(parent, d), n.ino); err != nil {
			return err
		}
	case core.IsDir(r.Mode):
		r.Parent = uint64(parent)
		t.putInode(n.ino, r)
	default:
		for _, l := range r.Links {
			if core.Ino(l.Parent) == n.parent && bytes.Equal(l.Name, []byte(n.name)) {
				l.Parent, l.Name = uint64(parent), []byte(name)
				break
			}
		}
		t.putInode(n.ino, r)
	}
	n.entry.Mode = r.Mode
	t.putEntry(parent, d, name, n.entry)
	return nil
}
