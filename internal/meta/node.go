package meta

import (
	"slices"
	"strconv"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// dirSize is the size a directory reports, as on ext4.
const dirSize = 4096

// node is a resolved file or directory: its attributes and where they live.
// Attributes of a one-link non-directory are embedded in its entry (parent,
// name); those of directories and hard-linked files in a standalone record.
type node struct {
	ino  core.Ino
	attr *weftpb.InodeRecord

	// The entry that was followed to reach the node, if any. entry.Attr is
	// attr when the attributes are embedded.
	parent    core.Ino
	parentRec *weftpb.InodeRecord
	name      string
	entry     *weftpb.EntryRecord
}

func (n *node) embedded() bool { return n.entry != nil && n.entry.Attr != nil }
func (n *node) isDir() bool    { return core.IsDir(n.attr.Mode) }

// child resolves name in directory dir (record d). found is false when the
// name does not exist.
func (t *txn) child(dir core.Ino, d *weftpb.InodeRecord, name string) (n *node, found bool, err error) {
	e, found, err := t.entry(dir, d, name)
	if err != nil || !found {
		return nil, false, err
	}
	n, err = t.nodeFromEntry(dir, d, name, e)
	return n, err == nil, err
}

func (t *txn) nodeFromEntry(dir core.Ino, d *weftpb.InodeRecord, name string, e *weftpb.EntryRecord) (*node, error) {
	n := &node{ino: core.Ino(e.Ino), parent: dir, parentRec: d, name: name, entry: e}
	if e.Attr != nil {
		n.attr = e.Attr
		return n, nil
	}
	r, err := t.inode(n.ino)
	if err != nil {
		return nil, err
	}
	n.attr = r
	return n, nil
}

// resolve finds the node a NodeRef names. A one-link file is found by parent
// and name, and the entry must still hold ref.ino (else Stale); a directory
// or a hard-linked file is found by ino, through the entry when one is named.
func (t *txn) resolve(ref *weftpb.NodeRef) (*node, error) {
	if ref == nil {
		return nil, errs.New(errs.Invalid, t.op, "no node")
	}
	ino := core.Ino(ref.Ino)
	if ref.Parent != 0 || ref.Name != "" {
		if err := validName(t.op, ref.Name); err != nil {
			return nil, err
		}
		d, err := t.dirFor(core.Ino(ref.Parent), ref.Name)
		if err != nil {
			return nil, err
		}
		e, found, err := t.entry(core.Ino(ref.Parent), d, ref.Name)
		if err != nil {
			return nil, err
		}
		if found {
			if ino != 0 && core.Ino(e.Ino) != ino {
				return nil, &errs.Error{Kind: errs.Stale, Op: t.op, Path: ref.Name,
					Msg: "the name now holds inode " + strconv.FormatUint(e.Ino, 10)}
			}
			return t.nodeFromEntry(core.Ino(ref.Parent), d, ref.Name, e)
		}
		if ino == 0 {
			return nil, &errs.Error{Kind: errs.NotExist, Op: t.op, Path: ref.Name}
		}
		// The name is gone; a directory or hard-linked file may still be
		// reachable by ino. A one-link file is not: NotExist.
		n, err := t.nodeByIno(ino)
		if errs.Is(err, errs.Stale) {
			return nil, &errs.Error{Kind: errs.NotExist, Op: t.op, Path: ref.Name}
		}
		return n, err
	}
	if ino == 0 {
		return nil, errs.New(errs.Invalid, t.op, "node names neither an inode nor an entry")
	}
	return t.nodeByIno(ino)
}

// resolveHere resolves the node of a single-node operation, which the client
// routed by the ref's entry: a node whose attributes live with an owner on
// another meta server is answered WrongServer ("owner"), and the client asks
// the owner by ino.
func (t *txn) resolveHere(ref *weftpb.NodeRef) (*node, error) {
	if ref != nil && ref.Parent != 0 {
		t.route(core.Ino(ref.Parent), ref.Name)
	}
	n, err := t.resolve(ref)
	if err != nil {
		return nil, err
	}
	if t.dist == nil && !n.embedded() && t.s.ownerOf(n.ino) != t.s.cfg.ID {
		return nil, errOwner
	}
	return n, nil
}

func (t *txn) nodeByIno(ino core.Ino) (*node, error) {
	r, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	return &node{ino: ino, attr: r}, nil
}

// putNode stores n's attributes where they live.
func (t *txn) putNode(n *node) {
	if n.embedded() {
		n.entry.Attr = n.attr
		n.entry.Mode = n.attr.Mode
		t.putEntry(n.parent, n.parentRec, n.name, n.entry)
		return
	}
	t.putInode(n.ino, n.attr)
}

// refLock is the inode whose stripe guards the node a NodeRef names, as far
// as the request tells: the parent for an entry, else the ino.
func refLock(ref *weftpb.NodeRef) []core.Ino {
	if ref == nil {
		return nil
	}
	if ref.Parent != 0 {
		return []core.Ino{core.Ino(ref.Parent)}
	}
	return []core.Ino{core.Ino(ref.Ino)}
}

// attrOf converts a record to the wire attributes of ino.
// A directory split across servers reports one link, as btrfs does: its
// subdirectories are counted by partition, and 1 tells find(1) and fts not to
// infer the number of subdirectories from the link count.
func attrOf(ino core.Ino, r *weftpb.InodeRecord) *weftpb.Attr {
	a := &weftpb.Attr{
		Ino: uint64(ino), Mode: r.Mode, Nlink: r.Nlink, Uid: r.Uid, Gid: r.Gid, Rdev: r.Rdev,
		Size: r.Size, AtimeNs: r.AtimeNs, MtimeNs: r.MtimeNs, CtimeNs: r.CtimeNs, Inline: r.Inline,
		Extents: slices.Clone(r.Extents), ExtentsUntracked: r.ExtentsUntracked,
	}
	if core.IsDir(r.Mode) && r.Radix > 0 {
		a.Nlink = 1
	}
	return a
}

func (n *node) wireAttr() *weftpb.Attr { return attrOf(n.ino, n.attr) }

func itoa(i int) string { return strconv.Itoa(i) }
