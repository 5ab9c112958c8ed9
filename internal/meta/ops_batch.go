package meta

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/proto/weftpb"
)

// Metadata write-back. A client holding a directory's write lease completes
// creates, unlinks, renames, setattrs (mode, times, owner), the commits
// of inline files' content, mkdirs and rmdirs (ops_batch_dir.go) there
// itself and sends them here in
// batches (ApplyBatch). A batch is one txn and so one Pebble batch: each op
// is checked again as if it came alone, against the state the ops before it
// left, and one op that fails fails the batch, which changes nothing. The
// client never puts two ops on one name in a batch (a txn's reads do not
// see its own pending entry writes), and the server refuses a batch that
// does. New files carry inode numbers the client reserved with AllocInos,
// so that a create completes in the client.

// maxBatchOps bounds one batch.
const maxBatchOps = 4096

// AllocInos reserves a range of this server's inode numbers for a client.
func (s *Server) AllocInos(_ context.Context, req *weftpb.AllocInosRequest) (*weftpb.AllocInosReply, error) {
	const op = "alloc inos"
	if req.Count == 0 || req.Count > inoBlock {
		return nil, errs.New(errs.Invalid, op, "count %d is not in 1..%d", req.Count, inoBlock)
	}
	first, err := s.allocRange(uint64(req.Count))
	if err != nil {
		return nil, err
	}
	return &weftpb.AllocInosReply{First: uint64(first), Count: req.Count}, nil
}

// allocRange hands out count consecutive inode numbers, reserving them
// durably first (as allocIno does, one block ahead).
func (s *Server) allocRange(count uint64) (core.Ino, error) {
	a := &s.alloc
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.next+count > a.mu.limit {
		limit := a.mu.next + count + inoBlock
		if limit > maxSeq {
			return 0, errs.New(errs.NoSpace, "meta alloc", "inode numbers of server %d exhausted", s.cfg.ID)
		}
		if err := s.setSync("meta alloc", keyInoHWM, binary.BigEndian.AppendUint64(nil, limit)); err != nil {
			return 0, err
		}
		a.mu.limit = limit
	}
	seq := a.mu.next
	a.mu.next += count
	return core.MakeIno(s.cfg.ID, seq), nil
}

// handedOut reports whether ino is a number some server handed out: one
// of this server's below its allocator's position, or any other server's
// (a client may take numbers from any server, and files keep their number
// when they move).
func (s *Server) handedOut(ino core.Ino) bool {
	if ino.Server() != s.cfg.ID {
		return uint64(ino)&maxSeq >= firstSeq
	}
	a := &s.alloc
	a.mu.Lock()
	defer a.mu.Unlock()
	seq := uint64(ino) & maxSeq
	return seq >= firstSeq && seq < a.mu.next
}

// ApplyBatch applies a client's write-back batch atomically.
func (s *Server) ApplyBatch(ctx context.Context, req *weftpb.ApplyBatchRequest) (*weftpb.ApplyBatchReply, error) {
	const op = "apply batch"
	if len(req.Ops) == 0 || len(req.Ops) > maxBatchOps {
		return nil, errs.New(errs.Invalid, op, "%d operations, not 1..%d", len(req.Ops), maxBatchOps)
	}
	dir := core.Ino(req.Dir)
	ops, err := s.checkBatch(ctx, dir, req.Ops)
	if err != nil {
		s.wbRefused.Add(1)
		return nil, err
	}
	grant, leased := s.grantNewDirs(ctx, req.Session, ops)
	var freed bool
	var revoked []*weftpb.Revocation
	err = s.update(ctx, op, s.batchLocks(dir, ops), func(t *txn) error {
		freed = false
		for i, o := range ops {
			f, err := o.apply(t, dir)
			if err != nil {
				return batchError(i, err)
			}
			freed = freed || f
		}
		revoked = t.revoked
		return nil
	})
	if err != nil {
		if len(leased) > 0 {
			s.leases.Release(req.Session, leased, nil)
		}
		if errs.KindOf(err) != errs.WrongServer {
			s.wbRefused.Add(1)
		}
		return nil, err
	}
	// A chmod or chown that narrowed access to a file another client has
	// open takes its capability away, as SetAttr does.
	s.pushRevocations(revoked)
	s.wbBatches.Add(1)
	s.wbOps.Add(uint64(len(ops)))
	if freed {
		s.reclaim.poke()
	}
	reply := &weftpb.ApplyBatchReply{Applied: uint32(len(ops))}
	if len(leased) > 0 {
		reply.LeaseSeq, reply.LeaseTermMs = grant.Seq, uint32(grant.Term/time.Millisecond)
		for _, k := range leased {
			reply.Leased = append(reply.Leased, uint64(k))
		}
	}
	return reply, nil
}

// batchError says which op of a batch failed, keeping its kind (and a
// redirect's bitmap: the client routes the batch again).
func batchError(i int, err error) error {
	if errs.Is(err, errs.WrongServer) {
		return err
	}
	e, ok := err.(*errs.Error)
	if !ok {
		return err
	}
	c := *e
	c.Op = "apply batch: op " + itoa(i) + ": " + e.Op
	return &c
}

// batchOp is one checked op of a batch.
type batchOp struct {
	c  core.Creds
	op *weftpb.BatchOp
}

// checkBatch validates what can be checked without the state: names,
// credentials, one op per name, inode numbers.
func (s *Server) checkBatch(ctx context.Context, dir core.Ino, in []*weftpb.BatchOp) ([]batchOp, error) {
	const op = "apply batch"
	// Names are keyed by directory: a rename or a folded create names one
	// in another directory of this server (batchKey).
	names := make(map[string]bool, len(in))
	use2 := func(dir uint64, name string) error {
		if err := validName(op, name); err != nil {
			return err
		}
		k := batchKey(dir, name)
		if names[k] {
			return errs.New(errs.Invalid, op, "two operations on %q in one batch", name)
		}
		names[k] = true
		return nil
	}
	use := func(name string) error { return use2(0, name) }
	out := make([]batchOp, len(in))
	for i, o := range in {
		c, err := credsOf(ctx, op, o.GetCreds())
		if err != nil {
			return nil, err
		}
		out[i] = batchOp{c: c, op: o}
		switch {
		case o.Create != nil:
			err = use2(otherDir(dir, o.Create.Dir), o.Create.Name)
			if err == nil && !s.handedOut(core.Ino(o.Create.Ino)) {
				err = errs.New(errs.Invalid, op, "inode %d was never handed out", o.Create.Ino)
			}
			if err == nil {
				err = s.checkThen(ctx, o.Create)
			}
		case o.Unlink != nil:
			err = use(o.Unlink.Name)
		case o.Setattr != nil:
			err = use(o.Setattr.Name)
			if err == nil {
				err = checkBatchChange(o)
			}
		case o.Write != nil:
			err = use(o.Write.Name)
			if err == nil {
				err = s.checkBatchWrite(o.Write)
			}
		case o.Owner != nil:
			err = use(o.Owner.Name)
			if err == nil {
				err = checkBatchChange(o)
			}
		case o.Rename != nil:
			if err = use(o.Rename.Src); err == nil {
				err = use2(otherDir(dir, o.Rename.DstDir), o.Rename.Dst)
			}
		case o.Mkdir != nil:
			err = use(o.Mkdir.Name)
			if err == nil && !s.handedOut(core.Ino(o.Mkdir.Ino)) {
				err = errs.New(errs.Invalid, op, "inode %d was never handed out", o.Mkdir.Ino)
			}
		case o.Rmdir != nil:
			err = use(o.Rmdir.Name)
		case o.DirSetattr != nil:
			err = checkDirChange(o.DirSetattr.Name, o.DirSetattr.Valid, batchSetAttrBits)
		case o.DirOwner != nil:
			err = checkDirChange(o.DirOwner.Name, o.DirOwner.Valid, batchOwnerBits)
		default:
			err = errs.New(errs.Invalid, op, "operation %d is empty", i)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// otherDir is a directory an op names besides the batch's dir: 0 for none
// (also when the op names dir itself).
func otherDir(dir core.Ino, other uint64) uint64 {
	if core.Ino(other) == dir {
		return 0
	}
	return other
}

// batchKey keys a name of a batch: names in the batch's directory by
// themselves, names in another directory (other != 0) with its number
// (a name never holds a '/').
func batchKey(other uint64, name string) string {
	if other == 0 {
		return name
	}
	return itoa(int(other)) + "/" + name
}

// batchSetAttrBits are the setattr changes a batch may carry: mode and
// times (size changes go through SetAttr, owner changes are BatchOwner).
const batchSetAttrBits = uint32(weftpb.SetAttrBits_SETATTR_MODE | weftpb.SetAttrBits_SETATTR_ATIME |
	weftpb.SetAttrBits_SETATTR_MTIME | weftpb.SetAttrBits_SETATTR_ATIME_NOW | weftpb.SetAttrBits_SETATTR_MTIME_NOW)

// batchOwnerBits are the changes a BatchOwner may carry.
const batchOwnerBits = uint32(weftpb.SetAttrBits_SETATTR_UID | weftpb.SetAttrBits_SETATTR_GID)

// checkBatchChange checks the bits of a setattr or owner op.
func checkBatchChange(o *weftpb.BatchOp) error {
	const op = "apply batch"
	switch {
	case o.Setattr != nil && o.Setattr.Valid&^batchSetAttrBits != 0:
		return errs.New(errs.Invalid, op, "setattr bits %#x cannot be written back", o.Setattr.Valid)
	case o.Owner != nil && (o.Owner.Valid == 0 || o.Owner.Valid&^batchOwnerBits != 0):
		return errs.New(errs.Invalid, op, "owner bits %#x are not uid and/or gid", o.Owner.Valid)
	}
	return nil
}

// checkBatchWrite checks a written-back commit's content against the
// inline limit (as Commit does).
func (s *Server) checkBatchWrite(w *weftpb.BatchWrite) error {
	if len(w.Data) > s.cfg.InlineLimit {
		return errs.New(errs.Invalid, "apply batch", "inline content of %d bytes (limit %d)", len(w.Data), s.cfg.InlineLimit)
	}
	return nil
}

// checkThen checks the changes folded into a create: writes, owner
// changes and setattrs of the new file itself, each with valid creds.
func (s *Server) checkThen(ctx context.Context, create *weftpb.BatchCreate) error {
	const op = "apply batch"
	if len(create.Then) > 0 && !core.IsRegular(create.Mode) {
		return errs.New(errs.Invalid, op, "changes folded into a create of type %#o", create.Mode&core.ModeType)
	}
	for _, o := range create.Then {
		if _, err := credsOf(ctx, op, o.GetCreds()); err != nil {
			return err
		}
		var name string
		var ino uint64
		var err error
		switch {
		case o.Write != nil:
			name, ino, err = o.Write.Name, o.Write.Ino, s.checkBatchWrite(o.Write)
		case o.Owner != nil:
			name, ino, err = o.Owner.Name, o.Owner.Ino, checkBatchChange(o)
		case o.Setattr != nil:
			name, ino, err = o.Setattr.Name, o.Setattr.Ino, checkBatchChange(o)
		default:
			err = errs.New(errs.Invalid, op, "only writes, owner changes and setattrs fold into a create")
		}
		if err != nil {
			return err
		}
		if name != create.Name || ino != create.Ino {
			return errs.New(errs.Invalid, op, "a change of %q (inode %d) folded into the create of %q (inode %d)",
				name, ino, create.Name, create.Ino)
		}
	}
	return nil
}

// apply applies one op in txn t; freed reports chunks to reclaim.
func (o batchOp) apply(t *txn, dir core.Ino) (freed bool, err error) {
	switch {
	case o.op.Create != nil:
		return false, t.batchCreate(o.c, dir, o.op.Create)
	case o.op.Unlink != nil:
		return t.batchUnlink(o.c, dir, o.op.Unlink)
	case o.op.Setattr != nil:
		return false, t.batchSetAttr(o.c, dir, o.op.Setattr)
	case o.op.Write != nil:
		return false, t.batchWrite(o.c, dir, o.op.Write)
	case o.op.Owner != nil:
		return false, t.batchOwner(o.c, dir, o.op.Owner)
	case o.op.Mkdir != nil:
		return false, t.batchMkdir(o.c, dir, o.op.Mkdir)
	case o.op.Rmdir != nil:
		return false, t.batchRmdir(o.c, dir, o.op.Rmdir)
	case o.op.DirSetattr != nil:
		a := o.op.DirSetattr
		return false, t.batchDirAttr(o.c, dir, a.Ino, setAttrOf(a), a.TimeNs)
	case o.op.DirOwner != nil:
		a := o.op.DirOwner
		return false, t.batchDirAttr(o.c, dir, a.Ino, ownerOf(a), a.TimeNs)
	default:
		return false, t.batchRename(o.c, dir, o.op.Rename)
	}
}

func (t *txn) batchCreate(c core.Creds, dir core.Ino, req *weftpb.BatchCreate) error {
	mode := req.Mode
	switch mode & core.ModeType {
	case core.ModeFile, core.ModeFIFO, core.ModeSocket:
	default:
		return errs.New(errs.Invalid, t.op, "cannot write back a create of type %#o", mode&core.ModeType)
	}
	in := dir
	if other := otherDir(dir, req.Dir); other != 0 {
		// A create and a rename into another directory, folded: made
		// there; the batch's directory is touched as by the rename.
		in = core.Ino(other)
		t.route(0, "") // a redirect's bitmap would be taken for dir's
	} else {
		t.route(dir, req.Name)
	}
	d, err := t.s.checkNewName(t, c, in, req.Name)
	if err != nil {
		return err
	}
	r := newRecord(c, d, mode&(core.ModeType|core.ModeBits), req.TimeNs)
	r.Inline = core.IsRegular(mode)
	for _, then := range req.Then {
		if err := t.applyThen(then, r); err != nil {
			return err
		}
	}
	at := req.TimeNs
	if in != dir && req.MovedNs != 0 {
		r.CtimeNs, at = req.MovedNs, req.MovedNs
	}
	t.putEntry(in, d, req.Name, &weftpb.EntryRecord{Ino: req.Ino, Mode: r.Mode, Attr: r})
	d.Entries++
	t.grew(in, d)
	t.touchDirAt(in, d, at)
	if in != dir {
		sd, err := t.dir(dir)
		if err != nil {
			return err
		}
		if err := checkAccess(t.op, c, sd, mayWrite|mayExec); err != nil {
			return err
		}
		t.touchDirAt(dir, sd, at)
	}
	t.count(core.Ino(req.Ino), false)
	return nil
}

func (t *txn) batchUnlink(c core.Creds, dir core.Ino, req *weftpb.BatchUnlink) (bool, error) {
	d, n, err := t.removable(c, dir, req.Name)
	if err != nil {
		return false, err
	}
	if err := t.sameIno(n, req.Name, req.Ino); err != nil {
		return false, err
	}
	if n.isDir() {
		return false, &errs.Error{Kind: errs.IsDir, Op: t.op, Path: req.Name}
	}
	if err := checkSticky(t.op, c, d, n.attr); err != nil {
		return false, err
	}
	t.deleteEntry(dir, d, req.Name)
	freed, err := t.dropLink(n)
	if err != nil {
		return false, err
	}
	t.reclaimFreed(n, freed, req.Open)
	d.Entries--
	t.touchDirAt(dir, d, req.TimeNs)
	return freed, nil
}

// batchNode returns the one-link file name holds in dir, which must still
// be ino: the node a written-back change of a file applies to.
func (t *txn) batchNode(c core.Creds, dir core.Ino, name string, ino uint64) (*node, error) {
	t.route(dir, name)
	d, err := t.dirFor(dir, name)
	if err != nil {
		return nil, err
	}
	if err := checkAccess(t.op, c, d, mayExec); err != nil {
		return nil, err
	}
	n, found, err := t.child(dir, d, name)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, &errs.Error{Kind: errs.NotExist, Op: t.op, Path: name}
	}
	if err := t.sameIno(n, name, ino); err != nil {
		return nil, err
	}
	if !n.embedded() {
		return nil, errs.New(errs.Invalid, t.op, "%q has its own inode record: its changes are not written back", name)
	}
	return n, nil
}

func (t *txn) batchSetAttr(c core.Creds, dir core.Ino, req *weftpb.BatchSetAttr) error {
	n, err := t.batchNode(c, dir, req.Name, req.Ino)
	if err != nil {
		return err
	}
	old := capStateOf(n.attr)
	if err := t.setAttrAt(c, n.attr, setAttrOf(req), req.TimeNs); err != nil {
		return err
	}
	t.revokeIfNarrowed(n, old)
	t.putNode(n)
	return nil
}

func (t *txn) batchOwner(c core.Creds, dir core.Ino, req *weftpb.BatchOwner) error {
	n, err := t.batchNode(c, dir, req.Name, req.Ino)
	if err != nil {
		return err
	}
	old := capStateOf(n.attr)
	if err := t.setAttrAt(c, n.attr, ownerOf(req), req.TimeNs); err != nil {
		return err
	}
	t.revokeIfNarrowed(n, old)
	t.putNode(n)
	return nil
}

func (t *txn) batchWrite(c core.Creds, dir core.Ino, req *weftpb.BatchWrite) error {
	n, err := t.batchNode(c, dir, req.Name, req.Ino)
	if err != nil {
		return err
	}
	if err := t.writeInline(c, n.attr, req); err != nil {
		return err
	}
	t.putNode(n)
	return nil
}

// applyThen applies a change folded into a create to the new record r.
// A new file has no capability out yet: nothing to revoke.
func (t *txn) applyThen(o *weftpb.BatchOp, r *weftpb.InodeRecord) error {
	c, err := credsOf(t.ctx, t.op, o.GetCreds())
	if err != nil {
		return err
	}
	switch {
	case o.Write != nil:
		return t.writeInline(c, r, o.Write)
	case o.Owner != nil:
		return t.setAttrAt(c, r, ownerOf(o.Owner), o.Owner.TimeNs)
	default:
		return t.setAttrAt(c, r, setAttrOf(o.Setattr), o.Setattr.TimeNs)
	}
}

func setAttrOf(req *weftpb.BatchSetAttr) *weftpb.SetAttrRequest {
	return &weftpb.SetAttrRequest{Valid: req.Valid, Mode: req.Mode, AtimeNs: req.AtimeNs, MtimeNs: req.MtimeNs}
}

func ownerOf(req *weftpb.BatchOwner) *weftpb.SetAttrRequest {
	return &weftpb.SetAttrRequest{Valid: req.Valid, Uid: req.Uid, Gid: req.Gid}
}

// setAttrAt checks and applies sa to r as SetAttr does, at the client's
// time ns (as it answered its caller).
func (t *txn) setAttrAt(c core.Creds, r *weftpb.InodeRecord, sa *weftpb.SetAttrRequest, ns int64) error {
	if err := t.s.checkSetAttr(t.op, c, r, sa); err != nil {
		return err
	}
	now := t.now
	t.now = ns
	err := t.s.applySetAttr(t, c, r, sa)
	t.now = now
	return err
}

// writeInline applies a written-back commit of an inline file's content to
// r, with Commit's checks and effects.
func (t *txn) writeInline(c core.Creds, r *weftpb.InodeRecord, req *weftpb.BatchWrite) error {
	switch {
	case !core.IsRegular(r.Mode):
		return errs.New(errs.Invalid, t.op, "commit to a non-regular file")
	case !isOwner(c, r) && !allowed(c, r, mayWrite):
		return errs.E(errs.Permission, t.op)
	case !r.Inline:
		return errs.New(errs.Invalid, t.op, "a chunked file's content is not written back")
	}
	r.Size = uint64(len(req.Data))
	r.InlineData = req.Data
	trimExtents(r)
	r.MtimeNs = req.MtimeNs
	if r.MtimeNs == 0 {
		r.MtimeNs = req.TimeNs
	}
	r.CtimeNs = req.TimeNs
	dropPrivileges(c, r)
	return nil
}

func (t *txn) batchRename(c core.Creds, dir core.Ino, req *weftpb.BatchRename) error {
	d, n, err := t.removable(c, dir, req.Src)
	if err != nil {
		return err
	}
	if err := t.sameIno(n, req.Src, req.Ino); err != nil {
		return err
	}
	if n.isDir() || !n.embedded() {
		return errs.New(errs.Invalid, t.op, "%q is a directory or hard-linked: its rename is not written back", req.Src)
	}
	if err := checkSticky(t.op, c, d, n.attr); err != nil {
		return err
	}
	to := dir
	if other := otherDir(dir, req.DstDir); other != 0 {
		// Into another directory: its partition is found (on another
		// server, a distributed txn); a redirect's bitmap would be
		// taken for dir's.
		to = core.Ino(other)
		t.route(0, "")
	} else {
		t.route(dir, req.Dst)
	}
	dd, err := t.s.checkNewName(t, c, to, req.Dst)
	if err != nil {
		return err
	}
	if to != dir {
		if err := checkAccess(t.op, c, dd, mayWrite|mayExec); err != nil {
			return err
		}
	}
	t.deleteEntry(dir, d, req.Src)
	n.attr.CtimeNs = req.TimeNs
	n.entry.Attr = n.attr
	t.putEntry(to, dd, req.Dst, n.entry)
	if dd != d {
		d.Entries--
		dd.Entries++
		t.grew(to, dd)
		t.touchDirAt(to, dd, req.TimeNs)
	}
	t.touchDirAt(dir, d, req.TimeNs)
	return nil
}

// sameIno checks that name still holds the inode the client saw there.
func (t *txn) sameIno(n *node, name string, ino uint64) error {
	if uint64(n.ino) != ino {
		return errs.New(errs.Stale, t.op, "%q holds inode %d, not %d", name, n.ino, ino)
	}
	return nil
}

// touchDirAt is touchDir at the client's time of the change (never
// backwards).
func (t *txn) touchDirAt(dir core.Ino, d *weftpb.InodeRecord, ns int64) {
	ns = max(ns, d.MtimeNs)
	d.MtimeNs, d.CtimeNs = ns, ns
	t.putInode(dir, d)
}

// recallWriters lets a write-back holder of the directories an update locks
// flush its queued operations before the update takes their locks (the
// flush needs them). Called with no locks held.
func (s *Server) recallWriters(ctx context.Context, dirs []core.Ino) error {
	if s.leases == nil || len(dirs) == 0 {
		return nil
	}
	keys := make([]lease.Key, len(dirs))
	for i, d := range dirs {
		keys[i] = lease.Key(d)
	}
	return s.leases.RecallWriters(ctx, lease.HolderOf(ctx), keys)
}

// maxWriterWaits bounds how often one update waits for write-back holders
// (a holder that takes its lease again at once cannot hold it up longer).
const maxWriterWaits = 4

// writersError makes update run an operation again once the write-back
// holders of keys flushed: the operation read records a holder may still
// have changes queued for (an rmdir's check that a directory is empty),
// and its recall at commit would wait, holding the locks the flush needs.
type writersError struct{ keys []lease.Key }

func (e *writersError) Error() string { return "meta: write-back holders to recall first" }

// checkWriters fails with a writersError if another client holds a write
// lease on what t's batch writes.
func (s *Server) checkWriters(t *txn) error {
	if s.leases == nil || t.writersChecked || t.b.Empty() {
		return nil
	}
	if keys := s.leases.WritersOn(lease.HolderOf(t.ctx), leaseKeys(t.b)); len(keys) > 0 {
		return &writersError{keys: keys}
	}
	return nil
}

// awaitWriters recalls the write leases a writersError names, with no
// lock held, and waits until their holders flushed and released them.
func (s *Server) awaitWriters(ctx context.Context, err error) (bool, error) {
	we, ok := err.(*writersError)
	if !ok {
		return false, nil
	}
	return true, s.leases.RecallWriters(ctx, lease.HolderOf(ctx), we.keys)
}
