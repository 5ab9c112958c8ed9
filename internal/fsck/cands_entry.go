package fsck

import (
	"bytes"
	"context"
	"fmt"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/proto/weftpb"
)

// entryCand is a suspicious directory entry: misplaced (KindMisplaced),
// pointing to a missing record (KindDangling), or naming a directory whose
// parent pointer names another directory (KindLinks).
type entryCand struct {
	what Kind
	srv  int
	key  []byte
	dir  core.Ino
	name string
	ino  core.Ino
}

func (c *entryCand) order() int {
	switch c.what {
	case KindMisplaced:
		return orderMisplaced
	case KindDangling:
		return orderDangling
	}
	return orderParent
}

func (c *entryCand) locks(n int) *lockSpec {
	if c.what == KindMisplaced {
		// Where the entry belongs may be any server's partition.
		return &lockSpec{all: []core.Ino{c.dir}}
	}
	s := &lockSpec{}
	s.add(c.srv, c.dir)
	if own, ok := owner(c.ino, n); ok {
		s.add(own, c.ino)
	}
	// A parent pointer changes only under the directory-move lock: cycle
	// checks read parent pointers without stripe locks.
	s.renameMu = c.what == KindLinks
	return s
}

func (c *entryCand) check(ctx context.Context, rc *rechecker) (verdict, error) {
	switch c.what {
	case KindMisplaced:
		return c.checkPlace(ctx, rc)
	case KindDangling:
		return c.checkTarget(ctx, rc)
	}
	return c.checkParent(ctx, rc)
}

// checkPlace checks that the entry is where its name's hash places it, and
// plans to move it there (or, if a copy is there, to delete this one).
func (c *entryCand) checkPlace(ctx context.Context, rc *rechecker) (verdict, error) {
	if v, ok := rc.waiting(c.dir); ok {
		return v, nil
	}
	e, val, found, err := rc.entry(ctx, c.srv, c.key)
	if err != nil || !found {
		return verdict{}, err
	}
	l, err := rc.layout(ctx, c.dir)
	if err != nil {
		return verdict{}, err
	}
	if l.bad != "" {
		return verdict{finding: &Finding{Kind: KindPartition, Server: -1, Dir: c.dir, Detail: l.bad,
			Repair: "fsck does not rebuild a directory's partitions"}}, nil
	}
	_, partition, hash, _, _ := layout.EntryKeyParts(c.key)
	h := core.NameHash(c.name)
	right := l.place(h)
	rightKey := layout.EntryKey(c.dir, right.partition, c.name)
	if right.srv == c.srv && bytes.Equal(rightKey, c.key) {
		return verdict{}, nil
	}
	where := fmt.Sprintf("entry %q of directory %d", c.name, c.dir)
	here := fmt.Sprintf("partition %d on meta %d", partition, c.srv)
	there := fmt.Sprintf("partition %d on meta %d", right.partition, right.srv)
	subdir := 0
	if core.IsDir(e.Mode) {
		subdir = 1
	}
	re, _, rfound, err := rc.entry(ctx, right.srv, rightKey)
	if err != nil {
		return verdict{}, err
	}
	pl := &plan{}
	embedded := e.Attr != nil
	if rfound {
		f := &Finding{Kind: KindDuplicate, Server: c.srv, Dir: c.dir, Name: c.name, Ino: core.Ino(e.Ino),
			Detail: fmt.Sprintf("%s is both in %s, where its hash places it, and in %s", where, there, here)}
		if re.Ino != e.Ino || (re.Attr != nil) != embedded {
			f.Detail += fmt.Sprintf(" (naming inode %d there and inode %d here)", re.Ino, e.Ino)
			f.Repair = "the copies differ; fsck does not choose between them"
			return verdict{finding: f}, nil
		}
		pl.what = "delete the copy in " + here
		if embedded && right.srv != c.srv {
			if err := rc.planXattrMove(ctx, pl, c.srv, right.srv, core.Ino(e.Ino)); err != nil {
				return verdict{}, err
			}
		}
		del := []*weftpb.KeyOp{{Key: c.key, Delete: true}}
		op, err := rc.countOp(ctx, c.srv, c.dir, partition, -1, -subdir)
		if err != nil {
			return verdict{}, err
		}
		pl.add(c.srv, append(del, nonNil(op)...)...)
		return verdict{finding: f, plan: pl}, nil
	}
	f := &Finding{Kind: KindMisplaced, Server: c.srv, Dir: c.dir, Name: c.name, Ino: core.Ino(e.Ino)}
	if hash != h {
		f.Detail = fmt.Sprintf("%s in %s is stored under hash %#x; its name's hash is %#x, which %s holds", where, here, hash, h, there)
	} else {
		f.Detail = fmt.Sprintf("%s is in %s; its hash places it in %s", where, here, there)
	}
	pl.what = "move it to " + there
	// The copy first, then the delete: a crash between them leaves a
	// duplicate, which the next run removes.
	if right.srv == c.srv {
		// One server holds one partition of a directory: this is its
		// record, counted once whatever the move.
		var ops []*weftpb.KeyOp
		ops = append(ops, &weftpb.KeyOp{Key: rightKey, Value: val}, &weftpb.KeyOp{Key: c.key, Delete: true})
		if partition != right.partition {
			op, err := rc.countOp(ctx, c.srv, c.dir, right.partition, 1, subdir)
			if err != nil {
				return verdict{}, err
			}
			ops = append(ops, nonNil(op)...)
		}
		pl.add(c.srv, ops...)
		return verdict{finding: f, plan: pl}, nil
	}
	add, err := rc.countOp(ctx, right.srv, c.dir, right.partition, 1, subdir)
	if err != nil {
		return verdict{}, err
	}
	pl.add(right.srv, append([]*weftpb.KeyOp{{Key: rightKey, Value: val}}, nonNil(add)...)...)
	if embedded {
		// The extended attributes of a file whose attributes are in its
		// entry live on the entry's server.
		if err := rc.planXattrMove(ctx, pl, c.srv, right.srv, core.Ino(e.Ino)); err != nil {
			return verdict{}, err
		}
	}
	sub, err := rc.countOp(ctx, c.srv, c.dir, partition, -1, -subdir)
	if err != nil {
		return verdict{}, err
	}
	pl.add(c.srv, append([]*weftpb.KeyOp{{Key: c.key, Delete: true}}, nonNil(sub)...)...)
	return verdict{finding: f, plan: pl}, nil
}

// planXattrMove adds to pl the copy of ino's extended attributes from
// server from to server to (those to lacks) and their delete on from.
func (rc *rechecker) planXattrMove(ctx context.Context, pl *plan, from, to int, ino core.Ino) error {
	p := layout.XattrPrefix(ino)
	var copies []*weftpb.KeyOp
	err := scanRange(ctx, rc.p.c.Meta[from], p, layout.PrefixEnd(p), 0, func(k, v []byte) error {
		_, found, err := rc.get(ctx, to, k)
		if err == nil && !found {
			copies = append(copies, &weftpb.KeyOp{Key: k, Value: v})
		}
		return err
	})
	if err != nil {
		return err
	}
	pl.add(to, copies...)
	pl.add(from, &weftpb.KeyOp{DeleteXattrsOf: uint64(ino)})
	return nil
}

func nonNil(op *weftpb.KeyOp) []*weftpb.KeyOp {
	if op == nil {
		return nil
	}
	return []*weftpb.KeyOp{op}
}

// checkTarget checks that an entry without attributes points to a
// standalone record on the inode's owner, and plans to delete it if not.
func (c *entryCand) checkTarget(ctx context.Context, rc *rechecker) (verdict, error) {
	if v, ok := rc.waiting(c.dir, c.ino); ok {
		return v, nil
	}
	e, _, found, err := rc.entry(ctx, c.srv, c.key)
	if err != nil || !found || e.Attr != nil || core.Ino(e.Ino) != c.ino {
		return verdict{}, err
	}
	own, ok := owner(c.ino, rc.p.n)
	if ok {
		r, found, err := rc.inode(ctx, own, c.ino)
		if err != nil || found && !r.Stub {
			return verdict{}, err
		}
	}
	_, partition, _, _, _ := layout.EntryKeyParts(c.key)
	f := &Finding{Kind: KindDangling, Server: c.srv, Dir: c.dir, Name: c.name, Ino: c.ino}
	if ok {
		f.Detail = fmt.Sprintf("entry %q of directory %d (partition %d) points to inode %d, which has no record on its owner meta %d", c.name, c.dir, partition, c.ino, own)
	} else {
		f.Detail = fmt.Sprintf("entry %q of directory %d (partition %d) points to inode %d, whose owner meta %d is not in the cluster", c.name, c.dir, partition, c.ino, c.ino.Server())
	}
	subdir := 0
	if core.IsDir(e.Mode) {
		subdir = 1
	}
	op, err := rc.countOp(ctx, c.srv, c.dir, partition, -1, -subdir)
	if err != nil {
		return verdict{}, err
	}
	pl := &plan{what: "delete the entry"}
	pl.add(c.srv, append([]*weftpb.KeyOp{{Key: c.key, Delete: true}}, nonNil(op)...)...)
	return verdict{finding: f, plan: pl}, nil
}

// checkParent checks that the directory an entry names has the entry's
// directory as its parent (the only entry that names it: the scan found one).
func (c *entryCand) checkParent(ctx context.Context, rc *rechecker) (verdict, error) {
	if v, ok := rc.waiting(c.dir, c.ino); ok {
		return v, nil
	}
	e, _, found, err := rc.entry(ctx, c.srv, c.key)
	if err != nil || !found || e.Attr != nil || core.Ino(e.Ino) != c.ino {
		return verdict{}, err
	}
	own, ok := owner(c.ino, rc.p.n)
	if !ok {
		return verdict{}, nil
	}
	r, found, err := rc.inode(ctx, own, c.ino)
	if err != nil || !found || r.Stub || !core.IsDir(r.Mode) || core.Ino(r.Parent) == c.dir {
		return verdict{}, err
	}
	f := &Finding{Kind: KindLinks, Server: own, Dir: c.dir, Name: c.name, Ino: c.ino,
		Detail: fmt.Sprintf("directory %d is entry %q of directory %d, but its parent pointer names directory %d", c.ino, c.name, c.dir, r.Parent)}
	r.Parent = uint64(c.dir)
	pl := &plan{what: fmt.Sprintf("set its parent pointer to %d", c.dir)}
	pl.add(own, &weftpb.KeyOp{Key: layout.InodeKey(c.ino), Value: marshal(r)})
	return verdict{finding: f, plan: pl}, nil
}
