package fusefs

import (
	"context"
	"sort"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// dirHandle is an open directory. weft lists a directory in pages, each
// continued from an opaque cookie; the kernel wants a number per entry to
// continue after (d_off, telldir). Entries are numbered in listing order
// ("." is 0, ".." 1, names from 2) and d_off is the next number. The handle
// remembers the cookie that starts each page it fetched, so a seek refetches
// one page and skips into it, however large the directory.
type dirHandle struct {
	node *Node

	mu struct {
		sync.Mutex
		pos       uint64          // number of the next entry to return
		page      []core.DirEntry // names numbered from pageStart
		pageStart uint64          // number of page[0] among the names
		next      []byte          // cookie continuing after page
		eof       bool            // page is the last one
		marks     []pageMark      // cookie of every page fetched, by start
		last      *core.DirEntry  // the entry returned last, for Lookup
		lease     client.Lease    // the directory's, taken before page was read
	}
}

// pageMark says which cookie lists names from number start on.
type pageMark struct {
	start  uint64
	cookie []byte
}

const firstName = 2 // "." and ".." come first

var (
	_ fs.NodeOpendirHandler = (*Node)(nil)
	_ fs.FileReaddirenter   = (*dirHandle)(nil)
	_ fs.FileSeekdirer      = (*dirHandle)(nil)
	_ fs.FileLookuper       = (*dirHandle)(nil)
	_ fs.FileFsyncdirer     = (*dirHandle)(nil)
)

// OpendirHandle opens a directory for listing. It fetches the first page at
// once, so that a caller without read permission fails in opendir.
func (n *Node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	d := &dirHandle{node: n}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.fetchLocked(ctx); err != nil {
		return nil, 0, n.fsys.fail("opendir", err)
	}
	return d, 0, 0
}

// fetchLocked reads the page after the current one.
func (d *dirHandle) fetchLocked(ctx context.Context) error {
	start := d.mu.pageStart + uint64(len(d.mu.page))
	if k := len(d.mu.marks); k == 0 || d.mu.marks[k-1].start < start {
		d.mu.marks = append(d.mu.marks, pageMark{start: start, cookie: d.mu.next})
	}
	cctx, cancel := d.node.fsys.callCtx(ctx)
	defer cancel()
	c := d.node.fsys.c
	lease := c.ReadLease(cctx, c.DirLeases(d.node.ino())...)
	page, next, eof, err := c.ReadDirPage(cctx, d.node.ino(), d.mu.next, 0, true)
	if err != nil {
		return err
	}
	d.mu.lease = lease
	if !eof && len(page) == 0 && string(next) == string(d.mu.next) {
		return errs.New(errs.Protocol, "readdir", "server made no progress")
	}
	d.mu.page, d.mu.pageStart, d.mu.next, d.mu.eof = page, start, next, eof
	return nil
}

// Readdirent returns the next entry, or nil at the end.
func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	pos := d.mu.pos
	out := &fuse.DirEntry{Mode: syscall.S_IFDIR, Off: pos + 1}
	switch pos {
	case 0:
		out.Name, out.Ino = ".", uint64(d.node.ino())
	case 1:
		out.Name, out.Ino = "..", uint64(d.node.ino())
		if _, p := d.node.Parent(); p != nil {
			out.Ino = p.StableAttr().Ino
		}
	default:
		i := pos - firstName
		d.seekLocked(i)
		for i >= d.mu.pageStart+uint64(len(d.mu.page)) {
			if d.mu.eof {
				d.mu.last = nil
				return nil, 0
			}
			if err := d.fetchLocked(ctx); err != nil {
				return nil, d.node.fsys.fail("readdir", err)
			}
		}
		e := d.mu.page[i-d.mu.pageStart]
		d.mu.last = &e
		out.Name, out.Ino, out.Mode = e.Name, uint64(e.Ino), e.Mode&core.ModeType
	}
	d.mu.pos++
	return out, 0
}

// Seekdir continues the listing after the entry whose d_off was off.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.pos, d.mu.last = off, nil
	return 0
}

// seekLocked prepares to return name number i: it stays on the page at hand
// if that holds i (or ends the listing before i), and otherwise goes back
// to the last page that starts at or before i, to be fetched again.
func (d *dirHandle) seekLocked(i uint64) {
	start, end := d.mu.pageStart, d.mu.pageStart+uint64(len(d.mu.page))
	if i >= start && (i < end || d.mu.eof) {
		return
	}
	// Marks are in ascending order of start, the first at 0.
	k := sort.Search(len(d.mu.marks), func(k int) bool { return d.mu.marks[k].start > i }) - 1
	m := d.mu.marks[max(k, 0)]
	if i < start || m.start > start {
		d.mu.page, d.mu.pageStart, d.mu.next, d.mu.eof = nil, m.start, m.cookie, false
	}
}

// Lookup answers READDIRPLUS's lookup of the entry just listed from the
// attributes the listing carried, without another round trip.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	d.mu.Lock()
	e, lease := d.mu.last, d.mu.lease
	d.mu.Unlock()
	if e == nil || e.Name != name || e.Attr == nil {
		return d.node.Lookup(ctx, name, out)
	}
	a := *e.Attr
	child := d.node.newChild(ctx, name, a)
	d.node.fillEntryLeased(out, child, a, lease, client.Lease{})
	return child, 0
}

// Fsyncdir makes the directory's changes durable: it sends its
// written-back changes (a writeback mount) and waits for them, and with
// async durability the meta servers then sync their WALs; with sync
// durability every acknowledged change already is.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	cctx, cancel := d.node.fsys.callCtx(ctx)
	defer cancel()
	c := d.node.fsys.c
	err := c.SyncDir(cctx, d.node.ino())
	if err == nil {
		err = c.SyncNamespace(cctx)
	}
	return d.node.fsys.fail("fsyncdir", err)
}
