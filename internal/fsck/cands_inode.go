package fsck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// orphanCand is a standalone record no entry pointed to during the scan.
type orphanCand struct {
	ino  core.Ino
	srv  int
	info *inodeInfo
}

func (c *orphanCand) order() int { return orderOrphan }

// parents are the directories whose entries may name the inode.
func (c *orphanCand) parents() []core.Ino {
	if c.info.dir {
		return []core.Ino{c.info.parent}
	}
	var ps []core.Ino
	for _, l := range c.info.links {
		ps = append(ps, l.parent)
	}
	return ps
}

// locks: the record, a directory's entries and stubs (its own stripe on
// every server), and the parents' entries wherever they are.
func (c *orphanCand) locks(int) *lockSpec {
	return &lockSpec{all: append([]core.Ino{c.ino}, c.parents()...)}
}

func (c *orphanCand) check(ctx context.Context, rc *rechecker) (verdict, error) {
	if v, ok := rc.waiting(append([]core.Ino{c.ino}, c.parents()...)...); ok {
		return v, nil
	}
	r, found, err := rc.inode(ctx, c.srv, c.ino)
	if err != nil || !found || r.Stub {
		return verdict{}, err
	}
	if c.info.dir {
		return c.checkDir(ctx, rc, r)
	}
	return c.checkFile(ctx, rc, r)
}

func (c *orphanCand) checkDir(ctx context.Context, rc *rechecker, r *weftpb.InodeRecord) (verdict, error) {
	if core.Ino(r.Parent) != c.info.parent {
		return verdict{}, nil // moved since the scan: named
	}
	named, err := rc.names(ctx, c.info.parent, c.ino)
	if err != nil || named {
		return verdict{}, err
	}
	f := &Finding{Kind: KindOrphan, Server: c.srv, Ino: c.ino,
		Detail: fmt.Sprintf("directory %d (parent %d) is named by no entry", c.ino, r.Parent)}
	var stubs []int
	for srv, s := range rc.p.c.Meta {
		p := layout.DirPrefix(c.ino)
		has, err := anyKey(ctx, s, p, layout.PrefixEnd(p))
		if err != nil {
			return verdict{}, err
		}
		if has {
			f.Repair = fmt.Sprintf("it still has entries (on meta %d); fsck does not reclaim a directory tree", srv)
			return verdict{finding: f}, nil
		}
		if srv == c.srv {
			continue
		}
		if st, found, err := rc.inode(ctx, srv, c.ino); err != nil {
			return verdict{}, err
		} else if found && st.Stub {
			stubs = append(stubs, srv)
		}
	}
	pl := &plan{what: "reclaim the empty directory: its record, extended attributes and partition stubs"}
	for _, srv := range stubs {
		pl.add(srv, &weftpb.KeyOp{Key: layout.InodeKey(c.ino), Delete: true})
	}
	pl.add(c.srv, &weftpb.KeyOp{Key: layout.InodeKey(c.ino), Delete: true, DeleteXattrsOf: uint64(c.ino), InodeDelta: -1, DirDelta: -1})
	return verdict{finding: f, plan: pl}, nil
}

func (c *orphanCand) checkFile(ctx context.Context, rc *rechecker, r *weftpb.InodeRecord) (verdict, error) {
	locked := c.parents()
	for _, l := range r.Links {
		if !slices.Contains(locked, core.Ino(l.Parent)) {
			return verdict{}, nil // linked since the scan
		}
		named, err := rc.named(ctx, core.Ino(l.Parent), string(l.Name), c.ino)
		if err != nil || named {
			return verdict{}, err
		}
	}
	f := &Finding{Kind: KindOrphan, Server: c.srv, Ino: c.ino,
		Detail: fmt.Sprintf("file %d (nlink %d, %d names listed) is named by no entry", c.ino, r.Nlink, len(r.Links))}
	pl := &plan{what: "reclaim its record and extended attributes"}
	pl.add(c.srv, &weftpb.KeyOp{Key: layout.InodeKey(c.ino), Delete: true, DeleteXattrsOf: uint64(c.ino), InodeDelta: -1})
	if core.IsRegular(r.Mode) && !r.Inline {
		pl.what += ", and its chunks"
		addrs, timeout, dial, ino, capability := rc.p.c.StoreAddrs, rc.p.c.Timeout, rc.p.c.Dial, c.ino, rc.p.c.capability(c.ino)
		pl.after = func(ctx context.Context) []string { return deleteChunks(ctx, dial, addrs, timeout, ino, capability) }
	}
	return verdict{finding: f, plan: pl}, nil
}

// deleteChunks removes every chunk of ino from every store server. Inode
// numbers are never reused, so chunks left behind are garbage, not data.
func deleteChunks(ctx context.Context, dial rpc.DialOptions, addrs []string, timeout time.Duration, ino core.Ino, capability []byte) []string {
	var notes []string
	for i, addr := range addrs {
		peer := rpc.NewPeer(addr, dial)
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := peer.Call(cctx, weftpb.MethodDeleteChunks, &weftpb.DeleteChunksRequest{Ino: uint64(ino), Capability: capability}, &weftpb.DeleteChunksReply{})
		cancel()
		peer.Close()
		if err != nil {
			notes = append(notes, fmt.Sprintf("chunks of reclaimed inode %d may remain on store %d (%s): %v", ino, i, addr, err))
		}
	}
	return notes
}

// names reports whether an entry of dir, in any partition, points to ino.
// It reads every entry of dir.
func (rc *rechecker) names(ctx context.Context, dir, ino core.Ino) (bool, error) {
	p := layout.DirPrefix(dir)
	found := false
	for _, s := range rc.p.c.Meta {
		err := scanRange(ctx, s, p, layout.PrefixEnd(p), 0, func(_, v []byte) error {
			if e, err := parseEntry(v); err == nil && e.ino == ino && !e.embedded {
				found = true
				return errStop
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			return false, err
		}
		if found {
			return true, nil
		}
	}
	return false, nil
}

// errStop ends a scan early.
var errStop = errors.New("fsck: stop scanning")

// named reports whether dir's entry name, where the directory's partitions
// place it, points to ino without attributes.
func (rc *rechecker) named(ctx context.Context, dir core.Ino, name string, ino core.Ino) (bool, error) {
	l, err := rc.layout(ctx, dir)
	if err != nil || l.bad != "" {
		return false, err
	}
	right := l.place(core.NameHash(name))
	e, _, found, err := rc.entry(ctx, right.srv, layout.EntryKey(dir, right.partition, name))
	if err != nil || !found {
		return false, err
	}
	return core.Ino(e.Ino) == ino && e.Attr == nil, nil
}

// linksCand is a hard-linked file whose link count, link list and the
// entries that point to it did not agree in the scan.
type linksCand struct {
	ino  core.Ino
	srv  int
	info *inodeInfo
}

func (c *linksCand) order() int { return orderLinks }

func (c *linksCand) locks(int) *lockSpec {
	s := &lockSpec{all: []core.Ino{c.ino}}
	for _, l := range c.info.links {
		s.all = append(s.all, l.parent)
	}
	return s
}

func (c *linksCand) check(ctx context.Context, rc *rechecker) (verdict, error) {
	locked := c.locks(rc.p.n).all
	if v, ok := rc.waiting(locked...); ok {
		return v, nil
	}
	r, found, err := rc.inode(ctx, c.srv, c.ino)
	if err != nil || !found || r.Stub || core.IsDir(r.Mode) {
		return verdict{}, err
	}
	var exist []*weftpb.LinkRef
	for _, l := range r.Links {
		if !slices.Contains(locked, core.Ino(l.Parent)) {
			return verdict{}, nil // linked since the scan
		}
		named, err := rc.named(ctx, core.Ino(l.Parent), string(l.Name), c.ino)
		if err != nil {
			return verdict{}, err
		}
		if named {
			exist = append(exist, l)
		}
	}
	if len(exist) == int(r.Nlink) && len(exist) == len(r.Links) {
		return verdict{}, nil
	}
	f := &Finding{Kind: KindLinks, Server: c.srv, Ino: c.ino,
		Detail: fmt.Sprintf("file %d records nlink %d and lists %d names, of which %d exist; %d entries pointed to it when scanned",
			c.ino, r.Nlink, len(r.Links), len(exist), c.info.refs)}
	if len(exist) == 0 || len(exist) != c.info.refs {
		f.Repair = "entries that its list of names does not hold point to it"
		if len(exist) == 0 && c.info.refs == 0 {
			return verdict{}, nil // an orphan: reported as one
		}
		return verdict{finding: f}, nil
	}
	r.Links, r.Nlink = exist, uint32(len(exist))
	pl := &plan{what: fmt.Sprintf("set nlink to %d and list only the names that exist", len(exist))}
	pl.add(c.srv, &weftpb.KeyOp{Key: layout.InodeKey(c.ino), Value: marshal(r)})
	return verdict{finding: f, plan: pl}, nil
}

// inodeCand is an inode named by entries in a way that cannot be: its
// attributes in two entries, or in an entry and a standalone record, a
// directory with two names, the root with a name.
type inodeCand struct {
	ino    core.Ino
	places []place
}

type place struct {
	srv  int
	key  []byte
	dir  core.Ino
	name string
}

func (c *inodeCand) order() int { return orderInode }

func (c *inodeCand) locks(n int) *lockSpec {
	s := &lockSpec{}
	for _, p := range c.places {
		s.add(p.srv, p.dir)
	}
	if own, ok := owner(c.ino, n); ok {
		s.add(own, c.ino)
	}
	return s
}

func (c *inodeCand) check(ctx context.Context, rc *rechecker) (verdict, error) {
	inos := []core.Ino{c.ino}
	for _, p := range c.places {
		inos = append(inos, p.dir)
	}
	if v, ok := rc.waiting(inos...); ok {
		return v, nil
	}
	// One name stored in two places is a duplicate, reported as one:
	// names are counted by directory and name.
	var named []string
	seen := map[string]bool{}
	embedded := 0
	for _, p := range c.places {
		e, _, found, err := rc.entry(ctx, p.srv, p.key)
		if err != nil {
			return verdict{}, err
		}
		id := fmt.Sprintf("%d/%s", p.dir, p.name)
		if !found || core.Ino(e.Ino) != c.ino || seen[id] {
			continue
		}
		seen[id] = true
		if e.Attr != nil {
			embedded++
		}
		named = append(named, fmt.Sprintf("%q in directory %d (meta %d)", p.name, p.dir, p.srv))
	}
	var rec *weftpb.InodeRecord
	if own, ok := owner(c.ino, rc.p.n); ok {
		r, found, err := rc.inode(ctx, own, c.ino)
		if err != nil {
			return verdict{}, err
		}
		if found && !r.Stub {
			rec = r
		}
	}
	f := &Finding{Kind: KindInode, Server: -1, Ino: c.ino, Repair: "fsck cannot tell which is right"}
	list := strings.Join(named, ", ")
	switch {
	case c.ino == core.RootIno && len(named) > 0:
		f.Detail = "the root directory is named by entries " + list
	case rec != nil && core.IsDir(rec.Mode) && len(named) > 1:
		f.Detail = fmt.Sprintf("directory %d has %d names: %s", c.ino, len(named), list)
	case embedded > 1:
		f.Detail = fmt.Sprintf("inode %d has its attributes in %d entries: %s", c.ino, embedded, list)
	case embedded > 0 && rec != nil:
		f.Detail = fmt.Sprintf("inode %d has its attributes both in a standalone record and in entries %s", c.ino, list)
	default:
		return verdict{}, nil
	}
	return verdict{finding: f}, nil
}

// strayRecordCand is a standalone inode record on a server that does not
// own the inode.
type strayRecordCand struct {
	srv int
	ino core.Ino
}

func (c *strayRecordCand) order() int { return orderRecord }

func (c *strayRecordCand) locks(int) *lockSpec {
	s := &lockSpec{}
	s.add(c.srv, c.ino)
	return s
}

func (c *strayRecordCand) check(ctx context.Context, rc *rechecker) (verdict, error) {
	if v, ok := rc.waiting(c.ino); ok {
		return v, nil
	}
	r, found, err := rc.inode(ctx, c.srv, c.ino)
	if err != nil || !found || r.Stub {
		return verdict{}, err
	}
	return verdict{finding: &Finding{Kind: KindInode, Server: c.srv, Ino: c.ino,
		Detail: fmt.Sprintf("meta %d holds a standalone record of inode %d, which belongs on meta %d", c.srv, c.ino, c.ino.Server()),
		Repair: "fsck does not move records between owners"}}, nil
}

// xattrCand is extended attributes, on a stopped cluster, of an inode that
// keeps none on that server.
type xattrCand struct {
	srv int
	ino core.Ino
}

func (c *xattrCand) order() int { return orderXattr }

func (c *xattrCand) locks(int) *lockSpec {
	s := &lockSpec{}
	s.add(c.srv, c.ino)
	return s
}

func (c *xattrCand) check(ctx context.Context, rc *rechecker) (verdict, error) {
	if v, ok := rc.waiting(c.ino); ok {
		return v, nil
	}
	p := layout.XattrPrefix(c.ino)
	has, err := anyKey(ctx, rc.p.c.Meta[c.srv], p, layout.PrefixEnd(p))
	if err != nil || !has {
		return verdict{}, err
	}
	f := &Finding{Kind: KindXattr, Server: c.srv, Ino: c.ino,
		Detail: fmt.Sprintf("extended attributes of inode %d, which has no record and no entry with its attributes on meta %d", c.ino, c.srv)}
	pl := &plan{what: "delete them"}
	pl.add(c.srv, &weftpb.KeyOp{DeleteXattrsOf: uint64(c.ino)})
	return verdict{finding: f, plan: pl}, nil
}
