package meta

import (
	"context"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Create makes a regular file, fifo, socket or device node (by the type bits
// of req.Mode; no type bits means a regular file). Without O_EXCL an existing
// file is opened instead, with req.OpenFlags, and the reply says existed.
// A new regular file is inline and empty; its attributes live in its entry.
func (s *Server) Create(ctx context.Context, req *weftpb.CreateRequest) (*weftpb.CreateReply, error) {
	const op = "create"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	if err := validName(op, req.Name); err != nil {
		return nil, err
	}
	mode := req.Mode
	switch mode & core.ModeType {
	case 0:
		mode |= core.ModeFile
	case core.ModeFile, core.ModeFIFO, core.ModeSocket:
	case core.ModeChar, core.ModeBlock:
		if c.UID != 0 {
			return nil, errs.New(errs.NotPermitted, op, "device nodes need root")
		}
	default:
		return nil, errs.New(errs.Invalid, op, "cannot create type %#o (use mkdir or symlink)", mode&core.ModeType)
	}
	parent := core.Ino(req.Parent)
	reply := &weftpb.CreateReply{}
	var truncated []core.Ino
	var revoked []*weftpb.Revocation
	var g grant
	err = s.update(ctx, op, []core.Ino{parent}, func(t *txn) error {
		truncated, revoked, g = nil, nil, grant{}
		defer func() { truncated, revoked = t.truncated, t.revoked }()
		t.route(parent, req.Name)
		d, err := t.dirFor(parent, req.Name)
		if err != nil {
			return err
		}
		if err := checkAccess(op, c, d, mayExec); err != nil {
			return err
		}
		n, found, err := t.child(parent, d, req.Name)
		if err != nil {
			return err
		}
		if found {
			if err := openExisting(t, c, n, req, s.cfg.InlineLimit, reply); err != nil {
				return err
			}
			g = grantFor(n, openRights(req.OpenFlags))
			return nil
		}
		if err := checkAccess(op, c, d, mayWrite); err != nil {
			return err
		}
		ino, err := s.allocIno()
		if err != nil {
			return err
		}
		r := newRecord(c, d, mode&(core.ModeType|core.ModeBits), t.now)
		if core.IsRegular(mode) {
			r.Inline = true
		}
		if mode&core.ModeType == core.ModeChar || mode&core.ModeType == core.ModeBlock {
			r.Rdev = req.Rdev
		}
		t.putEntry(parent, d, req.Name, &weftpb.EntryRecord{Ino: uint64(ino), Mode: r.Mode, Attr: r})
		d.Entries++
		t.grew(parent, d)
		t.touchDir(parent, d)
		t.inodeDelta++
		reply.Attr = attrOf(ino, r)
		if core.IsRegular(mode) {
			// The creator may write what it creates whatever the mode
			// (open(2) with O_CREAT and mode 0444 returns a writable fd).
			g = grant{ino: ino, rights: openRights(req.OpenFlags), ok: true}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.pushRevocations(revoked)
	s.afterTruncate(ctx, truncated, 0)
	reply.Capability = s.mint(g, c.UID)
	return reply, nil
}

// openExisting answers a create whose name exists: Exist with O_EXCL, IsDir
// for a directory, else an open with the request's flags.
func openExisting(t *txn, c core.Creds, n *node, req *weftpb.CreateRequest, inlineLimit int, reply *weftpb.CreateReply) error {
	switch {
	case req.Exclusive:
		return &errs.Error{Kind: errs.Exist, Op: t.op, Path: req.Name}
	case n.isDir():
		return &errs.Error{Kind: errs.IsDir, Op: t.op, Path: req.Name}
	}
	var or weftpb.OpenReply
	if err := openNode(t, c, n, req.OpenFlags, inlineLimit, &or); err != nil {
		return err
	}
	reply.Attr, reply.Existed, reply.InlineData = or.Attr, true, or.InlineData
	return nil
}

// Mkdir makes a directory. It inherits a setgid parent's group and setgid bit;
// the parent gains a link (the child's "..").
func (s *Server) Mkdir(ctx context.Context, req *weftpb.MkdirRequest) (*weftpb.MkdirReply, error) {
	const op = "mkdir"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	if err := validName(op, req.Name); err != nil {
		return nil, err
	}
	parent := core.Ino(req.Parent)
	reply := &weftpb.MkdirReply{}
	err = s.update(ctx, op, []core.Ino{parent}, func(t *txn) error {
		t.route(parent, req.Name)
		d, err := s.checkNewName(t, c, parent, req.Name)
		if err != nil {
			return err
		}
		ino, err := s.allocIno()
		if err != nil {
			return err
		}
		// mkdir(2) ignores setuid and setgid in its mode argument.
		r := newRecord(c, d, core.ModeDir|req.Mode&(core.ModePerm|core.ModeSticky), t.now)
		r.Nlink, r.Size = 2, dirSize
		r.Parent, r.Bitmap = uint64(parent), []byte{1}
		// The new ino is known to nobody until the batch commits: no lock.
		t.putInode(ino, r)
		t.putEntry(parent, d, req.Name, &weftpb.EntryRecord{Ino: uint64(ino), Mode: r.Mode})
		d.Entries++
		t.grew(parent, d)
		d.Nlink++
		t.touchDir(parent, d)
		t.inodeDelta++
		t.dirDelta++
		reply.Attr = attrOf(ino, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return reply, nil
}

// Symlink makes a symbolic link. The target is stored in the record.
func (s *Server) Symlink(ctx context.Context, req *weftpb.SymlinkRequest) (*weftpb.SymlinkReply, error) {
	const op = "symlink"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	if err := validName(op, req.Name); err != nil {
		return nil, err
	}
	switch {
	case req.Target == "":
		return nil, errs.New(errs.NotExist, op, "empty symlink target")
	case len(req.Target) > core.MaxSymlinkLen:
		return nil, errs.New(errs.NameTooLong, op, "symlink target longer than %d bytes", core.MaxSymlinkLen)
	}
	for i := 0; i < len(req.Target); i++ {
		if req.Target[i] == 0 {
			return nil, errs.New(errs.Invalid, op, "symlink target contains NUL")
		}
	}
	parent := core.Ino(req.Parent)
	reply := &weftpb.SymlinkReply{}
	err = s.update(ctx, op, []core.Ino{parent}, func(t *txn) error {
		t.route(parent, req.Name)
		d, err := s.checkNewName(t, c, parent, req.Name)
		if err != nil {
			return err
		}
		ino, err := s.allocIno()
		if err != nil {
			return err
		}
		r := newRecord(c, d, core.ModeLink|0o777, t.now)
		r.Size, r.Symlink = uint64(len(req.Target)), []byte(req.Target)
		t.putEntry(parent, d, req.Name, &weftpb.EntryRecord{Ino: uint64(ino), Mode: r.Mode, Attr: r})
		d.Entries++
		t.grew(parent, d)
		t.touchDir(parent, d)
		t.inodeDelta++
		reply.Attr = attrOf(ino, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return reply, nil
}

// checkNewName checks that c may add name to directory parent and that the
// name is free; it returns the directory's record.
func (s *Server) checkNewName(t *txn, c core.Creds, parent core.Ino, name string) (*weftpb.InodeRecord, error) {
	d, err := t.dirFor(parent, name)
	if err != nil {
		return nil, err
	}
	if err := checkAccess(t.op, c, d, mayExec); err != nil {
		return nil, err
	}
	_, found, err := t.entry(parent, d, name)
	if err != nil {
		return nil, err
	}
	if found {
		return nil, &errs.Error{Kind: errs.Exist, Op: t.op, Path: name}
	}
	if err := checkAccess(t.op, c, d, mayWrite); err != nil {
		return nil, err
	}
	return d, nil
}
