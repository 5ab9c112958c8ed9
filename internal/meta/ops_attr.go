package meta

import (
	"context"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Lookup resolves a name in a directory. The caller needs search permission on
// the directory; "." and ".." are the client's business and Invalid here.
func (s *Server) Lookup(ctx context.Context, req *weftpb.LookupRequest) (*weftpb.LookupReply, error) {
	const op = "lookup"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	if err := validName(op, req.Name); err != nil {
		return nil, err
	}
	reply := &weftpb.LookupReply{}
	var child *node
	var g grant
	err = s.view(ctx, op, func(t *txn) error {
		t.route(core.Ino(req.Parent), req.Name)
		d, err := t.dirFor(core.Ino(req.Parent), req.Name)
		if err != nil {
			return err
		}
		if err := checkAccess(op, c, d, mayExec); err != nil {
			return err
		}
		n, found, err := t.child(core.Ino(req.Parent), d, req.Name)
		if err != nil {
			return err
		}
		if !found {
			return &errs.Error{Kind: errs.NotExist, Op: op, Path: req.Name}
		}
		reply.Attr = n.wireAttr()
		child = n
		g = s.lookupGrant(c, n)
		return nil
	})
	if err == nil {
		s.partitionTimes(op, child.ino, child.attr, reply.Attr)
		reply.Capability = s.mint(g, c.UID)
	}
	return reply, err
}

// GetAttr returns a node's attributes. Like stat(2) it needs no permission on
// the node itself (the client searched the path to reach it).
func (s *Server) GetAttr(ctx context.Context, req *weftpb.GetAttrRequest) (*weftpb.GetAttrReply, error) {
	const op = "getattr"
	if _, err := credsOf(ctx, op, req.GetCreds()); err != nil {
		return nil, err
	}
	reply := &weftpb.GetAttrReply{}
	var got *node
	err := s.view(ctx, op, func(t *txn) error {
		n, err := t.resolveHere(req.Node)
		if err != nil {
			return err
		}
		reply.Attr = n.wireAttr()
		got = n
		return nil
	})
	if err == nil {
		s.partitionTimes(op, got.ino, got.attr, reply.Attr)
	}
	return reply, err
}

// Access checks the caller's permission (R=4, W=2, X=1) on a node; mask 0
// checks only that it exists.
func (s *Server) Access(ctx context.Context, req *weftpb.AccessRequest) (*weftpb.Empty, error) {
	const op = "access"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	if req.Mask > mayRead|mayWrite|mayExec {
		return nil, errs.New(errs.Invalid, op, "mask %#o", req.Mask)
	}
	err = s.view(ctx, op, func(t *txn) error {
		n, err := t.resolveHere(req.Node)
		if err != nil {
			return err
		}
		return checkAccess(op, c, n.attr, req.Mask)
	})
	if err != nil {
		return nil, err
	}
	return &weftpb.Empty{}, nil
}

// StatFS reports inode usage and the store's size.
func (s *Server) StatFS(ctx context.Context, _ *weftpb.StatFSRequest) (*weftpb.StatFSReply, error) {
	const op = "statfs"
	reply := &weftpb.StatFSReply{NameMax: core.MaxNameLen}
	err := s.view(ctx, op, func(t *txn) error {
		// The servers' shares add up to the cluster's count; one may
		// be negative (counters.go), and uint64 addition wraps, so the
		// client's sum is right all the same.
		reply.Files = uint64(s.inodeShare())
		reply.FilesFree = maxSeq - s.alloc.reserved()
		reply.BytesUsed = s.db.Metrics().DiskSpaceUsage()
		return nil
	})
	return reply, err
}

const setattrKnown = uint32(weftpb.SetAttrBits_SETATTR_MODE | weftpb.SetAttrBits_SETATTR_UID |
	weftpb.SetAttrBits_SETATTR_GID | weftpb.SetAttrBits_SETATTR_SIZE | weftpb.SetAttrBits_SETATTR_ATIME |
	weftpb.SetAttrBits_SETATTR_MTIME | weftpb.SetAttrBits_SETATTR_ATIME_NOW | weftpb.SetAttrBits_SETATTR_MTIME_NOW)

func has(valid uint32, bit weftpb.SetAttrBits) bool { return valid&uint32(bit) != 0 }

// SetAttr changes the attributes named by req.Valid, with Linux's rules for
// chmod, chown, truncate and utimensat. Every check passes before anything
// changes; ctime moves with every change.
func (s *Server) SetAttr(ctx context.Context, req *weftpb.SetAttrRequest) (*weftpb.SetAttrReply, error) {
	const op = "setattr"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	if req.Valid&^setattrKnown != 0 {
		return nil, errs.New(errs.Invalid, op, "unknown setattr bits %#x", req.Valid&^setattrKnown)
	}
	reply := &weftpb.SetAttrReply{}
	var spread *weftpb.PeerSetPermRequest
	var truncated []core.Ino
	var revoked []*weftpb.Revocation
	err = s.update(ctx, op, refLock(req.Node), func(t *txn) error {
		spread, truncated, revoked = nil, nil, nil
		n, err := t.resolveHere(req.Node)
		if err != nil {
			return err
		}
		if has(req.Valid, weftpb.SetAttrBits_SETATTR_SIZE) && req.Size > n.attr.Size {
			if err := s.checkGrowth(op, n.ino, req.Size); err != nil {
				return err
			}
		}
		if err := s.checkSetAttr(op, c, n.attr, req); err != nil {
			return err
		}
		if req.Valid == 0 {
			reply.Attr = n.wireAttr()
			return nil
		}
		reply.OldSize = n.attr.Size
		wasChunked := !n.attr.Inline && core.IsRegular(n.attr.Mode)
		old := capStateOf(n.attr)
		if err := s.applySetAttr(t, c, n.attr, req); err != nil {
			return err
		}
		if has(req.Valid, weftpb.SetAttrBits_SETATTR_SIZE) {
			t.reclaimTruncated(n.ino, wasChunked, reply.OldSize, req.Size, req.ChunkSize, req.Replication)
		}
		t.revokeIfNarrowed(n, old)
		truncated, revoked = t.truncated, t.revoked
		t.putNode(n)
		reply.Attr = n.wireAttr()
		if n.isDir() && n.attr.Radix > 0 && req.Valid&uint32(weftpb.SetAttrBits_SETATTR_MODE|weftpb.SetAttrBits_SETATTR_UID|weftpb.SetAttrBits_SETATTR_GID) != 0 {
			spread = &weftpb.PeerSetPermRequest{Dir: uint64(n.ino), Mode: n.attr.Mode, Uid: n.attr.Uid, Gid: n.attr.Gid}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.pushRevocations(revoked)
	s.afterTruncate(ctx, truncated, req.Size)
	if spread != nil {
		s.spreadPerm(spread)
	}
	return reply, nil
}

// spreadPerm copies a split directory's new mode and owner to the stubs of
// its other partitions, which check permissions for their entries. Until a
// server has the copy it checks with the old one, as a client with cached
// attributes would.
func (s *Server) spreadPerm(req *weftpb.PeerSetPermRequest) {
	for srv := range s.n {
		if srv == s.cfg.ID {
			continue
		}
		if err := s.peerCall(s.giga.ctx, "setattr", srv, weftpb.MethodPeerSetPerm, req, &weftpb.Empty{}); err != nil {
			s.log.Warn("meta: could not copy directory permissions to a partition", "dir", req.Dir, "server", srv, "err", err)
		}
	}
}

func (s *Server) checkSetAttr(op string, c core.Creds, r *weftpb.InodeRecord, req *weftpb.SetAttrRequest) error {
	v := req.Valid
	owner := isOwner(c, r)
	if has(v, weftpb.SetAttrBits_SETATTR_MODE) && !owner {
		return errs.New(errs.NotPermitted, op, "chmod by a non-owner")
	}
	// chown: only root gives a file away; the owner may "change" the uid to
	// itself and the gid to a group it belongs to.
	if has(v, weftpb.SetAttrBits_SETATTR_UID) && c.UID != 0 && (c.UID != r.Uid || req.Uid != r.Uid) {
		return errs.New(errs.NotPermitted, op, "chown to another user")
	}
	if has(v, weftpb.SetAttrBits_SETATTR_GID) && c.UID != 0 &&
		(c.UID != r.Uid || (req.Gid != r.Gid && !c.InGroup(req.Gid))) {
		return errs.New(errs.NotPermitted, op, "chgrp to a group the caller is not in")
	}
	if has(v, weftpb.SetAttrBits_SETATTR_SIZE) {
		switch {
		case core.IsDir(r.Mode):
			return errs.E(errs.IsDir, op)
		case !core.IsRegular(r.Mode):
			return errs.New(errs.Invalid, op, "truncate of a non-regular file")
		case !req.ByHandle && !allowed(c, r, mayWrite):
			return errs.E(errs.Permission, op)
		}
		if err := checkTruncate(op, r, req.Size, s.cfg.InlineLimit); err != nil {
			return err
		}
	}
	explicit := has(v, weftpb.SetAttrBits_SETATTR_ATIME) || has(v, weftpb.SetAttrBits_SETATTR_MTIME)
	if explicit && !owner {
		return errs.New(errs.NotPermitted, op, "setting explicit times by a non-owner")
	}
	now := has(v, weftpb.SetAttrBits_SETATTR_ATIME_NOW) || has(v, weftpb.SetAttrBits_SETATTR_MTIME_NOW)
	if now && !owner && !allowed(c, r, mayWrite) {
		return errs.E(errs.Permission, op)
	}
	return nil
}

func (s *Server) applySetAttr(t *txn, c core.Creds, r *weftpb.InodeRecord, req *weftpb.SetAttrRequest) error {
	v := req.Valid
	chown := has(v, weftpb.SetAttrBits_SETATTR_UID) || has(v, weftpb.SetAttrBits_SETATTR_GID)
	if has(v, weftpb.SetAttrBits_SETATTR_UID) {
		r.Uid = req.Uid
	}
	if has(v, weftpb.SetAttrBits_SETATTR_GID) {
		r.Gid = req.Gid
	}
	if chown && !core.IsDir(r.Mode) {
		// Linux clears setuid on any chown of a non-directory (even by root),
		// and setgid when group-exec makes it meaningful.
		r.Mode &^= core.ModeSetuid
		if r.Mode&0o010 != 0 {
			r.Mode &^= core.ModeSetgid
		}
	}
	if has(v, weftpb.SetAttrBits_SETATTR_MODE) {
		r.Mode = r.Mode&core.ModeType | req.Mode&core.ModeBits
		if c.UID != 0 && !c.InGroup(r.Gid) {
			r.Mode &^= core.ModeSetgid
		}
	}
	if has(v, weftpb.SetAttrBits_SETATTR_SIZE) {
		if err := truncate(t.op, r, req.Size, s.cfg.InlineLimit); err != nil {
			return err
		}
		r.MtimeNs = t.now
		dropPrivileges(c, r)
	}
	switch {
	case has(v, weftpb.SetAttrBits_SETATTR_ATIME_NOW):
		r.AtimeNs = t.now
	case has(v, weftpb.SetAttrBits_SETATTR_ATIME):
		r.AtimeNs = req.AtimeNs
	}
	switch {
	case has(v, weftpb.SetAttrBits_SETATTR_MTIME_NOW):
		r.MtimeNs = t.now
	case has(v, weftpb.SetAttrBits_SETATTR_MTIME):
		r.MtimeNs = req.MtimeNs
	}
	r.CtimeNs = t.now
	return nil
}
