package fsck

import (
	"context"
	"fmt"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/proto/weftpb"
)

// countCand is a partition record whose counts did not match its entries
// in the scan.
type countCand struct {
	dir core.Ino
	srv int
}

func (c *countCand) order() int { return orderCount }

// locks: the directory everywhere, so that no split moves entries of it
// while they are counted.
func (c *countCand) locks(int) *lockSpec { return &lockSpec{all: []core.Ino{c.dir}} }

func (c *countCand) check(ctx context.Context, rc *rechecker) (verdict, error) {
	if v, ok := rc.waiting(c.dir); ok {
		return v, nil
	}
	r, found, err := rc.inode(ctx, c.srv, c.dir)
	if err != nil || !found || !core.IsDir(r.Mode) {
		return verdict{}, err
	}
	var entries uint64
	var subdirs uint32
	p := layout.PartPrefix(c.dir, r.Partition)
	err = scanRange(ctx, rc.p.c.Meta[c.srv], p, layout.PrefixEnd(p), 0, func(_, v []byte) error {
		entries++
		if e, err := parseEntry(v); err == nil && core.IsDir(e.mode) {
			subdirs++
		}
		return nil
	})
	if err != nil {
		return verdict{}, err
	}
	if entries == r.Entries && r.Nlink == 2+subdirs {
		return verdict{}, nil
	}
	f := &Finding{Kind: KindCount, Server: c.srv, Dir: c.dir,
		Detail: fmt.Sprintf("partition %d of directory %d records %d entries and nlink %d; it holds %d entries, %d of them directories (nlink %d)",
			r.Partition, c.dir, r.Entries, r.Nlink, entries, subdirs, 2+subdirs)}
	r.Entries, r.Nlink = entries, 2+subdirs
	pl := &plan{what: "set the counts to what the partition holds"}
	pl.add(c.srv, &weftpb.KeyOp{Key: layout.InodeKey(c.dir), Value: marshal(r)})
	return verdict{finding: f, plan: pl}, nil
}

// partitionCand is a directory whose partition records looked wrong in the
// scan, or whose entries were found on strayOn without any record of the
// directory.
type partitionCand struct {
	dir core.Ino
	// refresh: keep the layout read under the locks for the entry scan
	// (the check runs before it).
	refresh    bool
	strayOn    int
	strayCount uint64
}

func (c *partitionCand) order() int { return orderPartition }

func (c *partitionCand) locks(int) *lockSpec { return &lockSpec{all: []core.Ino{c.dir}} }

func (c *partitionCand) check(ctx context.Context, rc *rechecker) (verdict, error) {
	if v, ok := rc.waiting(c.dir); ok {
		return v, nil
	}
	l, err := rc.layout(ctx, c.dir)
	if err != nil {
		return verdict{}, err
	}
	if c.refresh {
		fresh := *l
		fresh.parts = nil
		for _, p := range l.parts {
			cp := *p
			fresh.parts = append(fresh.parts, &cp)
		}
		rc.p.layouts[c.dir] = &fresh
	}
	if len(l.parts) == 0 {
		if c.strayCount == 0 {
			return verdict{}, nil
		}
		p := layout.DirPrefix(c.dir)
		has, err := anyKey(ctx, rc.p.c.Meta[c.strayOn], p, layout.PrefixEnd(p))
		if err != nil || !has {
			return verdict{}, err
		}
		return verdict{finding: &Finding{Kind: KindPartition, Server: c.strayOn, Dir: c.dir,
			Detail: fmt.Sprintf("directory %d does not exist, but meta %d holds %d entries of it", c.dir, c.strayOn, c.strayCount),
			Repair: "nothing names them; fsck does not delete what they hold"}}, nil
	}
	if l.bad == "" {
		return verdict{}, nil
	}
	f := &Finding{Kind: KindPartition, Server: -1, Dir: c.dir, Detail: l.bad,
		Repair: "fsck does not rebuild a directory's partitions"}
	if l.structure(rc.p.n) == "" {
		// The partitions are right but some bitmaps do not name the
		// partitions that split from them.
		add := map[int][]uint32{}
		for _, b := range l.missingBits() {
			add[b.parent.srv] = append(add[b.parent.srv], b.child)
		}
		pl := &plan{what: "add the missing partitions to the bitmaps"}
		for srv, children := range add {
			r, found, err := rc.inode(ctx, srv, c.dir)
			if err != nil || !found {
				return verdict{}, err
			}
			for _, q := range children {
				r.Bitmap = core.BitmapSet(r.Bitmap, q)
			}
			pl.add(srv, &weftpb.KeyOp{Key: layout.InodeKey(c.dir), Value: marshal(r)})
		}
		return verdict{finding: f, plan: pl}, nil
	}
	if l.owner {
		return verdict{finding: f}, nil
	}
	// Stubs of a directory that is gone: removable if nothing is in them.
	pl := &plan{what: "delete the empty partition stubs"}
	for _, pr := range l.parts {
		p := layout.DirPrefix(c.dir)
		has, err := anyKey(ctx, rc.p.c.Meta[pr.srv], p, layout.PrefixEnd(p))
		if err != nil {
			return verdict{}, err
		}
		if has {
			f.Repair = fmt.Sprintf("meta %d holds entries of it; fsck does not delete what they hold", pr.srv)
			return verdict{finding: f}, nil
		}
		pl.add(pr.srv, &weftpb.KeyOp{Key: layout.InodeKey(c.dir), Delete: true})
	}
	f.Repair = ""
	return verdict{finding: f, plan: pl}, nil
}
