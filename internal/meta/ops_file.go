package meta

import (
	"bytes"
	"context"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Open flags, Linux values.
const (
	oAccMode = 0o3
	oRdOnly  = 0o0
	oWrOnly  = 0o1
	oRdWr    = 0o2
	oTrunc   = 0o1000
)

// Open checks permission to open a node with flags and applies O_TRUNC.
// Directories open read-only only. The reply carries an inline file's content.
func (s *Server) Open(ctx context.Context, req *weftpb.OpenRequest) (*weftpb.OpenReply, error) {
	const op = "open"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	reply := &weftpb.OpenReply{}
	var truncated []core.Ino
	var revoked []*weftpb.Revocation
	var g grant
	fn := func(t *txn) error {
		truncated, revoked = nil, nil
		n, err := t.resolveHere(req.Node)
		if err != nil {
			return err
		}
		if err := openNode(t, c, n, req.Flags, s.cfg.InlineLimit, reply); err != nil {
			return err
		}
		truncated, revoked = t.truncated, t.revoked
		g = grantFor(n, openRights(req.Flags))
		return nil
	}
	if req.Flags&oTrunc != 0 {
		err = s.update(ctx, op, refLock(req.Node), fn)
	} else {
		// Without O_TRUNC open changes nothing (weft keeps no atime on open).
		err = s.view(ctx, op, fn)
	}
	if err != nil {
		return nil, err
	}
	s.pushRevocations(revoked)
	s.afterTruncate(ctx, truncated, 0)
	reply.Capability = s.mint(g, c.UID)
	return reply, nil
}

// openNode checks that c may open n with flags and applies O_TRUNC (only
// reached with flags containing O_TRUNC in a writing txn).
func openNode(t *txn, c core.Creds, n *node, flags uint32, inlineLimit int, reply *weftpb.OpenReply) error {
	acc := flags & oAccMode
	trunc := flags&oTrunc != 0
	if acc == oAccMode {
		return errs.New(errs.Invalid, t.op, "bad access mode")
	}
	r := n.attr
	if core.IsDir(r.Mode) {
		if acc != oRdOnly || trunc {
			return errs.E(errs.IsDir, t.op)
		}
		reply.Attr = n.wireAttr()
		return checkAccess(t.op, c, r, mayRead)
	}
	if core.IsSymlink(r.Mode) {
		return errs.New(errs.Loop, t.op, "open of a symlink")
	}
	var mask uint32
	switch acc {
	case oRdOnly:
		mask = mayRead
	case oWrOnly:
		mask = mayWrite
	case oRdWr:
		mask = mayRead | mayWrite
	}
	if trunc {
		mask |= mayWrite
	}
	if err := checkAccess(t.op, c, r, mask); err != nil {
		return err
	}
	reply.OldSize = r.Size
	if trunc && core.IsRegular(r.Mode) {
		wasChunked := !r.Inline
		old := capStateOf(r)
		if err := truncate(t.op, r, 0, inlineLimit); err != nil {
			return err
		}
		// Size 0 drops every chunk: the chunk layout does not matter.
		t.reclaimTruncated(n.ino, wasChunked, reply.OldSize, 0, 0, 0)
		r.MtimeNs, r.CtimeNs = t.now, t.now
		dropPrivileges(c, r)
		t.revokeIfNarrowed(n, old)
		t.putNode(n)
	}
	reply.Attr = n.wireAttr()
	if r.Inline {
		reply.InlineData = r.InlineData
	}
	return nil
}

// checkTruncate tells whether truncate can set r's size: an inline file with
// content cannot grow past the inline limit here, because its bytes must reach
// the stores first (the client commits them as chunks, then truncates).
func checkTruncate(op string, r *weftpb.InodeRecord, size uint64, limit int) error {
	if r.Inline && size > uint64(limit) && len(bytes.Trim(r.InlineData, "\x00")) > 0 {
		return errs.New(errs.Invalid, op, "inline file with content grown past the inline limit: commit it as chunks first")
	}
	return nil
}

// truncate sets r's size. An inline file stays inline within the limit (its
// content cut or zero-extended); a file truncated to zero becomes inline and
// empty again (its old chunks are recorded for the reclaimer: reclaim.go).
func truncate(op string, r *weftpb.InodeRecord, size uint64, limit int) error {
	if err := checkTruncate(op, r, size, limit); err != nil {
		return err
	}
	switch {
	case size == 0:
		r.Inline, r.InlineData = true, nil
	case r.Inline && size <= uint64(limit):
		if size <= uint64(len(r.InlineData)) {
			r.InlineData = r.InlineData[:size]
		} else {
			r.InlineData = append(r.InlineData, make([]byte, int(size)-len(r.InlineData))...)
		}
	case r.Inline:
		// All zeros: a sparse chunked file holds the same content.
		r.Inline, r.InlineData = false, nil
	}
	r.Size = size
	trimExtents(r)
	return nil
}

// trimExtents drops the written ranges at and past r's size, whose bytes a
// truncate drops from the stores (core.Extents). An empty file is tracked
// again from scratch.
func trimExtents(r *weftpb.InodeRecord) {
	if r.Size == 0 {
		r.Extents, r.ExtentsUntracked = nil, false
		return
	}
	r.Extents = core.Extents(r.Extents).Trim(r.Size)
}

// addExtents records that a commit's uploads wrote ext (checked by the
// caller) in r, after r's size is set: past MaxExtents ranges the file
// becomes untracked.
func addExtents(r *weftpb.InodeRecord, ext core.Extents) {
	if r.ExtentsUntracked {
		return
	}
	e := core.Extents(r.Extents).Union(ext).Trim(r.Size)
	if e.Len() > core.MaxExtents {
		r.Extents, r.ExtentsUntracked = nil, true
		return
	}
	r.Extents = e
}

// Commit records what a client wrote to a regular file: size, mtime and, for
// an inline file, the whole content. inline=false turns a file chunked.
// Allowed to the owner, root or a caller with write permission; a non-root
// writer loses setuid/setgid as on Linux.
func (s *Server) Commit(ctx context.Context, req *weftpb.CommitRequest) (*weftpb.CommitReply, error) {
	const op = "commit"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	if req.Inline && (len(req.InlineData) > s.cfg.InlineLimit || uint64(len(req.InlineData)) != req.Size) {
		return nil, errs.New(errs.Invalid, op, "inline content of %d bytes for size %d (limit %d)",
			len(req.InlineData), req.Size, s.cfg.InlineLimit)
	}
	if !req.Inline && len(req.InlineData) != 0 {
		return nil, errs.New(errs.Invalid, op, "inline content for a chunked file")
	}
	ext := core.Extents(req.Extents)
	if err := ext.Check(); err != nil || ext.Len() > core.MaxExtentsPerCommit || req.Inline && len(ext) > 0 {
		return nil, errs.New(errs.Invalid, op, "written ranges: %d numbers (inline %v): %v", len(ext), req.Inline, err)
	}
	reply := &weftpb.CommitReply{}
	err = s.update(ctx, op, refLock(req.Node), func(t *txn) error {
		n, err := t.resolveHere(req.Node)
		if err != nil {
			return err
		}
		r := n.attr
		switch {
		case core.IsDir(r.Mode):
			return errs.E(errs.IsDir, op)
		case !core.IsRegular(r.Mode):
			return errs.New(errs.Invalid, op, "commit to a non-regular file")
		case !isOwner(c, r) && !allowed(c, r, mayWrite):
			return errs.E(errs.Permission, op)
		case req.Inline && !r.Inline:
			return errs.New(errs.Invalid, op, "a chunked file cannot become inline (truncate it to 0 first)")
		}
		if !req.Inline {
			if err := s.checkGrowth(op, n.ino, req.Size); err != nil {
				return err
			}
		}
		r.Size = req.Size
		if req.Inline {
			r.InlineData = req.InlineData
		} else {
			r.Inline, r.InlineData = false, nil
		}
		trimExtents(r)
		addExtents(r, ext)
		if req.ExtentsOverflow {
			r.Extents, r.ExtentsUntracked = nil, true
		}
		r.MtimeNs = req.MtimeNs
		if r.MtimeNs == 0 {
			r.MtimeNs = t.now
		}
		r.CtimeNs = t.now
		dropPrivileges(c, r)
		t.putNode(n)
		reply.Attr = n.wireAttr()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return reply, nil
}

// Readlink returns a symlink's target.
func (s *Server) Readlink(ctx context.Context, req *weftpb.ReadlinkRequest) (*weftpb.ReadlinkReply, error) {
	const op = "readlink"
	if _, err := credsOf(ctx, op, req.GetCreds()); err != nil {
		return nil, err
	}
	reply := &weftpb.ReadlinkReply{}
	err := s.view(ctx, op, func(t *txn) error {
		n, err := t.resolveHere(req.Node)
		if err != nil {
			return err
		}
		if !core.IsSymlink(n.attr.Mode) {
			return errs.New(errs.Invalid, op, "not a symlink")
		}
		reply.Target = string(n.attr.Symlink)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return reply, nil
}
