package client

import (
	"context"
	"path"
	"strings"
	"sync"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/search"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// FindResult is one file weft find reports.
type FindResult struct {
	Path string    // the starting path, then "/" and the names below it
	Ref  Ref       // the file's entry (for the starting point, its own ref)
	Attr core.Attr // lstat's attributes
}

// findPage is how many hits a Find page asks for.
const findPage = 4096

// Find calls fn for every file under root (root included) that q matches,
// as find -P root would report them (symlinks are not followed), in no
// particular order. The meta servers are asked in parallel: first for the
// entries that have no attributes of their own (directories, hard-linked
// files), from which the client builds the paths of the directories under
// root that the caller may list; then for the matches each server finds
// in its index, which stream to fn as they arrive. fn is never called
// concurrently; an error from it stops Find and is returned.
//
// Memory: the client holds every directory entry and hard link of the
// cluster that the caller may list (not only those under root), and the
// names of the matches it reported (to report an entry that a concurrent
// split returns from two servers once).
func (c *Client) Find(ctx context.Context, root string, q *search.Query, fn func(FindResult) error) error {
	const op = "find"
	start, err := c.Lstat(ctx, root)
	if err != nil || q.Empty() {
		return err
	}
	f := &finder{c: c, q: q, fn: fn, root: root, rootIno: start.Ino, seen: map[findKey]bool{}}
	base := path.Base(root)
	if ok, err := f.matchStart(ctx, base, start); err != nil || !ok {
		if err != nil {
			return err
		}
	} else if err := fn(FindResult{Path: root, Ref: Ref{Ino: start.Ino}, Attr: start}); err != nil {
		return err
	}
	if !start.IsDir() {
		return nil
	}
	tree, err := c.findPointers(ctx)
	if err != nil {
		return errs.Wrap(errs.KindOf(err), op, root, err)
	}
	f.tree = tree
	f.paths = tree.paths(start.Ino, strings.TrimSuffix(root, "/"))
	if root == "/" {
		f.paths[start.Ino] = ""
	}
	wq := q.ToProto()
	return c.eachMeta(ctx, func(ctx context.Context, srv int) error {
		return c.findPages(ctx, srv, pb.FindRequest_MATCHES, wq, func(h *pb.FindHit) error { return f.hit(ctx, h) })
	})
}

// eachMeta runs fn for every meta server in parallel and returns the first
// error; the first error cancels the others.
func (c *Client) eachMeta(ctx context.Context, fn func(ctx context.Context, srv int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(c.metas))
	for srv := range c.metas {
		wg.Go(func() {
			if err := fn(ctx, srv); err != nil {
				errc <- err
				cancel()
			}
		})
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// findKey names one entry.
type findKey struct {
	dir  core.Ino
	name string
}

// findTree is what the pointers say: every directory's parent and name,
// and the entries of every hard-linked file.
type findTree struct {
	children map[core.Ino][]findKey // directory -> its subdirectories' (ino, name)
	links    map[core.Ino][]findKey // hard-linked file -> its entries
}

// paths returns the path of every directory under top (the caller may list
// its way down to), top's being topPath.
func (t *findTree) paths(top core.Ino, topPath string) map[core.Ino]string {
	paths := map[core.Ino]string{top: topPath}
	queue := []core.Ino{top}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		for _, ch := range t.children[d] {
			if _, ok := paths[ch.dir]; ok {
				continue
			}
			paths[ch.dir] = paths[d] + "/" + ch.name
			queue = append(queue, ch.dir)
		}
	}
	return paths
}

// findPointers asks every meta server for its pointer entries.
func (c *Client) findPointers(ctx context.Context) (*findTree, error) {
	t := &findTree{children: map[core.Ino][]findKey{}, links: map[core.Ino][]findKey{}}
	seen := map[findKey]bool{}
	var mu sync.Mutex
	err := c.eachMeta(ctx, func(ctx context.Context, srv int) error {
		return c.findPages(ctx, srv, pb.FindRequest_POINTERS, nil, func(h *pb.FindHit) error {
			mu.Lock()
			defer mu.Unlock()
			k := findKey{core.Ino(h.Dir), string(h.Name)}
			if seen[k] {
				return nil
			}
			seen[k] = true
			if core.IsDir(h.EntryMode) {
				t.children[k.dir] = append(t.children[k.dir], findKey{core.Ino(h.Ino), k.name})
			} else {
				t.links[core.Ino(h.Ino)] = append(t.links[core.Ino(h.Ino)], k)
			}
			return nil
		})
	})
	return t, err
}

// findPages runs one phase on meta server srv, page after page.
func (c *Client) findPages(ctx context.Context, srv int, phase pb.FindRequest_Phase, q *pb.FindQuery, each func(*pb.FindHit) error) error {
	var cursor []byte
	for {
		req := &pb.FindRequest{Creds: credsPB(c.creds(ctx)), Phase: phase, Query: q, Cursor: cursor, Limit: findPage}
		var r pb.FindReply
		if err := c.callIdempotent(ctx, c.metas[srv], pb.MethodFind, req, &r); err != nil {
			return err
		}
		for _, h := range r.Hits {
			if err := each(h); err != nil {
				return err
			}
		}
		if r.Eof {
			return nil
		}
		if len(r.Cursor) == 0 {
			return errs.New(errs.Protocol, "find", "meta server %d sent a page without a cursor", srv)
		}
		cursor = r.Cursor
	}
}

// finder joins the matches with the tree and reports them.
type finder struct {
	c       *Client
	q       *search.Query
	fn      func(FindResult) error
	root    string
	rootIno core.Ino
	tree    *findTree
	paths   map[core.Ino]string

	mu   sync.Mutex // serialises fn and guards seen
	seen map[findKey]bool
}

// matchStart tests the starting point, which find tests like any file
// (its name is the path's last element).
func (f *finder) matchStart(ctx context.Context, name string, a core.Attr) (bool, error) {
	if !f.q.MatchAttrs(attrsOf(a), false) || !f.q.MatchName(name) || !f.q.MatchPath(f.root) {
		return false, nil
	}
	if len(f.q.Xattrs) == 0 {
		return true, nil
	}
	names, err := f.c.ListXattrPath(ctx, f.root)
	if err != nil {
		return false, err
	}
	for _, x := range f.q.Xattrs {
		found := false
		for _, n := range names {
			found = found || n == x
		}
		if !found {
			return false, nil
		}
	}
	return true, nil
}

func attrsOf(a core.Attr) search.Attrs {
	return search.Attrs{Mode: a.Mode, Uid: a.UID, Gid: a.GID, Size: a.Size, MtimeNs: a.Mtime.UnixNano()}
}

// hit reports what one match names under the root.
func (f *finder) hit(ctx context.Context, h *pb.FindHit) error {
	a := attrFromPB(h.Attr)
	ino := core.Ino(h.Ino)
	if ino == f.rootIno {
		return nil // reported first, as find does
	}
	var entries []findKey
	if h.Dir != 0 {
		entries = []findKey{{core.Ino(h.Dir), string(h.Name)}}
	} else if a.IsDir() {
		if _, ok := f.paths[ino]; !ok {
			return nil
		}
		entries = []findKey{{core.Ino(h.Parent), path.Base(f.paths[ino])}}
	} else {
		entries = f.tree.links[ino]
	}
	if h.Recheck {
		// A split directory: its times are the latest of its partitions.
		merged, err := f.c.GetAttr(ctx, Ref{Ino: ino})
		if err != nil {
			if errs.Is(err, errs.NotExist) || errs.Is(err, errs.Stale) {
				return nil // removed meanwhile
			}
			return err
		}
		if a = merged; !f.q.MatchAttrs(attrsOf(a), false) {
			return nil
		}
	}
	for _, e := range entries {
		dirPath, ok := f.paths[e.dir]
		if !ok || !f.q.MatchName(e.name) {
			continue
		}
		p := dirPath + "/" + e.name
		if !f.q.MatchPath(p) {
			continue
		}
		if err := f.report(e, FindResult{Path: p, Ref: Ref{Ino: ino, Parent: e.dir, Name: e.name}, Attr: a}); err != nil {
			return err
		}
	}
	return nil
}

// report calls fn once per entry.
func (f *finder) report(k findKey, r FindResult) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen[k] {
		return nil
	}
	f.seen[k] = true
	return f.fn(r)
}
