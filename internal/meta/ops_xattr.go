package meta

import (
	"bytes"
	"context"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Extended attributes live in their own keys ("x" ino name), so they follow
// an inode wherever its attributes are stored. Access rules follow Linux's
// xattr_permission:
//
//	user.*      regular files and directories only; read needs read permission,
//	            write needs write permission (and ownership in a sticky directory)
//	trusted.*   root only, and hidden from others' listings
//	security.*  readable by everyone, writable by root
//	system.*    not supported (no ACLs)

// Xattr flags, Linux values.
const (
	xattrCreate  = uint32(weftpb.XattrFlags_XATTR_CREATE)
	xattrReplace = uint32(weftpb.XattrFlags_XATTR_REPLACE)
)

func checkXattrAccess(op string, c core.Creds, r *weftpb.InodeRecord, name string, write bool) error {
	switch {
	case strings.HasPrefix(name, "user."):
		if !core.IsRegular(r.Mode) && !core.IsDir(r.Mode) {
			if write {
				return errs.New(errs.NotPermitted, op, "user xattrs only on files and directories")
			}
			return &errs.Error{Kind: errs.NoData, Op: op, Path: name}
		}
		if write && core.IsDir(r.Mode) && r.Mode&core.ModeSticky != 0 && !isOwner(c, r) {
			return errs.New(errs.NotPermitted, op, "user xattr of a sticky directory by a non-owner")
		}
		if write {
			return checkAccess(op, c, r, mayWrite)
		}
		return checkAccess(op, c, r, mayRead)
	case strings.HasPrefix(name, "trusted."):
		if c.UID != 0 {
			return errs.New(errs.NotPermitted, op, "trusted xattrs need root")
		}
	case strings.HasPrefix(name, "security."):
		if write && c.UID != 0 {
			return errs.New(errs.NotPermitted, op, "security xattrs are written by root")
		}
	default:
		return &errs.Error{Kind: errs.NotSupported, Op: op, Path: name, Msg: "attribute namespace not supported"}
	}
	return nil
}

// GetXattr returns one extended attribute; NoData when it is absent.
func (s *Server) GetXattr(ctx context.Context, req *weftpb.GetXattrRequest) (*weftpb.GetXattrReply, error) {
	const op = "getxattr"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	if err := core.ValidateXattrName(op, req.Name); err != nil {
		return nil, err
	}
	reply := &weftpb.GetXattrReply{}
	err = s.view(ctx, op, func(t *txn) error {
		n, err := t.resolveHere(req.Node)
		if err != nil {
			return err
		}
		if err := checkXattrAccess(op, c, n.attr, req.Name, false); err != nil {
			return err
		}
		v, found, err := getValue(s.db, xattrKey(n.ino, req.Name))
		if err != nil {
			return err
		}
		if !found {
			return &errs.Error{Kind: errs.NoData, Op: op, Path: req.Name}
		}
		reply.Value = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	return reply, nil
}

// ListXattr lists the extended attribute names the caller may see.
func (s *Server) ListXattr(ctx context.Context, req *weftpb.ListXattrRequest) (*weftpb.ListXattrReply, error) {
	const op = "listxattr"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	reply := &weftpb.ListXattrReply{}
	err = s.view(ctx, op, func(t *txn) error {
		n, err := t.resolveHere(req.Node)
		if err != nil {
			return err
		}
		p := xattrPrefix(n.ino)
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
		if err != nil {
			return errs.Wrap(errs.IO, op, "", err)
		}
		defer it.Close()
		for valid := it.First(); valid; valid = it.Next() {
			name := string(it.Key()[len(p):])
			if strings.HasPrefix(name, "trusted.") && c.UID != 0 {
				continue
			}
			reply.Names = append(reply.Names, name)
		}
		return errs.Wrap(errs.IO, op, "", it.Error())
	})
	if err != nil {
		return nil, err
	}
	return reply, nil
}

// SetXattr sets an extended attribute: XATTR_CREATE fails with Exist if it is
// present, XATTR_REPLACE with NoData if it is absent.
func (s *Server) SetXattr(ctx context.Context, req *weftpb.SetXattrRequest) (*weftpb.Empty, error) {
	const op = "setxattr"
	if len(req.GetValue()) > core.MaxXattrValue {
		return nil, errs.New(errs.Range, op, "value of %d bytes exceeds %d", len(req.Value), core.MaxXattrValue)
	}
	if req.GetFlags()&^(xattrCreate|xattrReplace) != 0 {
		return nil, errs.New(errs.Invalid, op, "unknown flags %#x", req.Flags)
	}
	return s.changeXattr(ctx, op, req.GetCreds(), req.GetNode(), req.GetName(), func(t *txn, key []byte, exists bool) error {
		if exists && req.Flags&xattrCreate != 0 {
			return &errs.Error{Kind: errs.Exist, Op: op, Path: req.Name}
		}
		if !exists && req.Flags&xattrReplace != 0 {
			return &errs.Error{Kind: errs.NoData, Op: op, Path: req.Name}
		}
		t.b.Set(key, bytes.Clone(req.Value), nil)
		return nil
	})
}

// RemoveXattr removes an extended attribute; NoData if it is absent.
func (s *Server) RemoveXattr(ctx context.Context, req *weftpb.RemoveXattrRequest) (*weftpb.Empty, error) {
	const op = "removexattr"
	return s.changeXattr(ctx, op, req.GetCreds(), req.GetNode(), req.GetName(), func(t *txn, key []byte, exists bool) error {
		if !exists {
			return &errs.Error{Kind: errs.NoData, Op: op, Path: req.Name}
		}
		t.b.Delete(key, nil)
		return nil
	})
}

// changeXattr runs a set or remove of name on ref under the node's lock, and
// moves the node's ctime.
func (s *Server) changeXattr(ctx context.Context, op string, creds *weftpb.Creds, ref *weftpb.NodeRef, name string,
	change func(t *txn, key []byte, exists bool) error) (*weftpb.Empty, error) {
	c, err := credsOf(ctx, op, creds)
	if err != nil {
		return nil, err
	}
	if err := core.ValidateXattrName(op, name); err != nil {
		return nil, err
	}
	var revoked []*weftpb.Revocation
	err = s.update(ctx, op, refLock(ref), func(t *txn) error {
		revoked = nil
		n, err := t.resolveHere(ref)
		if err != nil {
			return err
		}
		if !n.embedded() {
			if s.ownerOf(n.ino) != s.cfg.ID {
				// The xattrs of a standalone record live with it on the
				// owner, and this txn reads and writes them here. (Reading
				// the owner's record made the txn distributed, where
				// resolveHere no longer sends the client to the owner.)
				return errOwner
			}
			// Standalone records (and so their xattrs) are guarded by the
			// ino's stripe, also when the request named an entry.
			if err := t.needOwner(n.ino); err != nil {
				return err
			}
		}
		if err := checkXattrAccess(op, c, n.attr, name, true); err != nil {
			return err
		}
		key := xattrKey(n.ino, name)
		_, exists, err := getValue(s.db, key)
		if err != nil {
			return err
		}
		if err := change(t, key, exists); err != nil {
			return err
		}
		n.attr.CtimeNs = t.now
		if strings.HasPrefix(name, "system.posix_acl_") {
			t.revoke(n) // an ACL may take access away
			revoked = t.revoked
		}
		t.putNode(n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.pushRevocations(revoked)
	return &weftpb.Empty{}, nil
}
