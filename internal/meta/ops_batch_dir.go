package meta

import (
	"context"
	"slices"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/proto/weftpb"
)

// Directories under write-back (ops_batch.go). A client that holds a
// directory's write lease makes and removes subdirectories there itself:
// a BatchMkdir carries a number the client reserved (AllocInos, from the
// server its name's partition is on, so that the new directory's record is
// written here, in the batch's txn; if a split moved the name meanwhile the
// txn writes it on its owner, as a distributed txn). The client goes on
// queueing changes inside the new directory at once, under a write lease
// on it that this server grants the batch's session before the batch
// commits: nobody else can know the number before, and once the entry is
// visible the lease is held, so another client's read of the new
// directory recalls it and gets the client's queued changes first.
//
// A BatchRmdir removes an empty directory as Rmdir does: the client checked
// that it is empty under the directory's own write lease and sent the
// directory's queue first; the txn checks again.

// mkdirLeaseWait bounds the grant of new directories' write leases: nobody
// holds them, so only the grace period after a restart makes it wait, and
// then the batch goes on without them (the client sends what it queued in
// the new directories at once and asks for their leases again).
const mkdirLeaseWait = 50 * time.Millisecond

// grantNewDirs grants the session the write leases on the directories the
// batch makes that this server owns. It returns the grant (zero if none)
// and the keys granted.
func (s *Server) grantNewDirs(ctx context.Context, session uint64, ops []batchOp) (lease.Grant, []lease.Key) {
	// Only to a session that holds its leases here over this connection
	// (the parent's write lease): an edge forwards its clients' batches
	// and grants their leases itself, and a lease here would be unknown
	// to it.
	holder := lease.HolderOf(ctx)
	if s.leases == nil || session == 0 || !s.leases.AcquiredOver(session, holder) {
		return lease.Grant{}, nil
	}
	var keys []lease.Key
	for _, o := range ops {
		if m := o.op.Mkdir; m != nil && s.ownerOf(core.Ino(m.Ino)) == s.cfg.ID {
			keys = append(keys, lease.Key(m.Ino))
		}
	}
	if len(keys) == 0 {
		return lease.Grant{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, mkdirLeaseWait)
	defer cancel()
	g, err := s.leases.Acquire(ctx, session, holder, lease.Write, keys)
	if err != nil {
		return lease.Grant{}, nil
	}
	return g, keys
}

func (t *txn) batchMkdir(c core.Creds, dir core.Ino, req *weftpb.BatchMkdir) error {
	t.route(dir, req.Name)
	d, err := t.s.checkNewName(t, c, dir, req.Name)
	if err != nil {
		return err
	}
	ino := core.Ino(req.Ino)
	// A number in use is never overwritten (a client that reused one).
	// Its stripe is locked from the start when this server owns it
	// (batchLocks): one relock per mkdir would make a batch of many give
	// up.
	if _, err := t.inode(ino); err == nil {
		return errs.New(errs.Invalid, t.op, "inode %d is in use", ino)
	} else if !errs.Is(err, errs.Stale) {
		return err
	}
	// mkdir(2) ignores setuid and setgid in its mode argument (Mkdir).
	r := newRecord(c, d, core.ModeDir|req.Mode&(core.ModePerm|core.ModeSticky), req.TimeNs)
	r.Nlink, r.Size = 2, dirSize
	r.Parent, r.Bitmap = uint64(dir), []byte{1}
	t.putInode(ino, r)
	t.putEntry(dir, d, req.Name, &weftpb.EntryRecord{Ino: req.Ino, Mode: r.Mode})
	d.Entries++
	t.grew(dir, d)
	d.Nlink++
	t.touchDirAt(dir, d, req.TimeNs)
	t.count(ino, true)
	return nil
}

func (t *txn) batchRmdir(c core.Creds, dir core.Ino, req *weftpb.BatchRmdir) error {
	d, n, err := t.removable(c, dir, req.Name)
	if err != nil {
		return err
	}
	if err := t.sameIno(n, req.Name, req.Ino); err != nil {
		return err
	}
	switch {
	case !n.isDir():
		return &errs.Error{Kind: errs.NotDir, Op: t.op, Path: req.Name}
	case n.ino == core.RootIno:
		return errs.E(errs.Busy, t.op)
	}
	if empty, err := t.dirEmpty(n); err != nil {
		return err
	} else if !empty {
		return &errs.Error{Kind: errs.NotEmpty, Op: t.op, Path: req.Name}
	}
	if err := checkSticky(t.op, c, d, n.attr); err != nil {
		return err
	}
	t.deleteEntry(dir, d, req.Name)
	t.removeDir(n)
	d.Entries--
	d.Nlink--
	t.touchDirAt(dir, d, req.TimeNs)
	return nil
}

// count accounts for a new inode ino (a directory if dir) on the server
// that allocated it (uncount's other half).
func (t *txn) count(ino core.Ino, dir bool) {
	owner := t.s.ownerOf(ino)
	if owner == t.s.cfg.ID {
		t.inodeDelta++
		if dir {
			t.dirDelta++
		}
		return
	}
	if t.ownerDeltas == nil {
		t.ownerDeltas = map[int]ownerDelta{}
	}
	d := t.ownerDeltas[owner]
	d.inodes++
	if dir {
		d.dirs++
	}
	t.ownerDeltas[owner] = d
}

// checkDirChange checks a change of the batch's directory's own
// attributes: no name, and bits of those allowed.
func checkDirChange(name string, valid, allowed uint32) error {
	switch {
	case name != "":
		return errs.New(errs.Invalid, "apply batch", "a change of the directory itself names %q", name)
	case valid == 0 || valid&^allowed != 0:
		return errs.New(errs.Invalid, "apply batch", "directory change bits %#x cannot be written back", valid)
	}
	return nil
}

// batchDirAttr applies a change of directory dir's own attributes (ino
// must be dir), with SetAttr's checks, at the client's time ns. It is
// applied in order with the batch's entry changes, which touch the same
// record's times.
func (t *txn) batchDirAttr(c core.Creds, dir core.Ino, ino uint64, sa *weftpb.SetAttrRequest, ns int64) error {
	if core.Ino(ino) != dir {
		return errs.New(errs.Invalid, t.op, "a change of directory %d in a batch of directory %d", ino, dir)
	}
	r, err := t.inode(dir)
	if err != nil {
		return err
	}
	if !core.IsDir(r.Mode) {
		return errs.New(errs.NotDir, t.op, "inode %d is not a directory", dir)
	}
	if err := t.setAttrAt(c, r, sa, ns); err != nil {
		return err
	}
	t.putInode(dir, r)
	return nil
}

// batchLocks are the inodes whose stripes a batch in dir locks from the
// start: the directory's, those of the directories its mkdirs and
// rmdirs make and remove here, and those its renames and folded creates
// put names in. Found one at a time (a relock each), a
// batch of many of them would give up ("could not settle the locks").
func (s *Server) batchLocks(dir core.Ino, ops []batchOp) []core.Ino {
	lock := []core.Ino{dir}
	for _, o := range ops {
		var ino core.Ino
		switch {
		case o.op.Mkdir != nil:
			ino = core.Ino(o.op.Mkdir.Ino)
		case o.op.Rmdir != nil:
			ino = core.Ino(o.op.Rmdir.Ino)
		case o.op.Rename != nil && otherDir(dir, o.op.Rename.DstDir) != 0:
			ino = core.Ino(o.op.Rename.DstDir)
		case o.op.Create != nil && otherDir(dir, o.op.Create.Dir) != 0:
			ino = core.Ino(o.op.Create.Dir)
		default:
			continue
		}
		if s.ownerOf(ino) == s.cfg.ID && !slices.Contains(lock, ino) {
			lock = append(lock, ino)
		}
	}
	return lock
}
