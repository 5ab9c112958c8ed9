package fsck

import (
	"context"
	"fmt"
	"slices"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/proto/weftpb"
)

// The scan reads every server's keys by tag, in an order of its own: the
// unfinished work (intents, splits) and the inode records first, for every
// server, because judging an entry needs its directory's partitions and
// its target's record wherever they are; then the entries; then the
// extended attributes. Memory: a few words per directory partition and per
// standalone record, 8 bytes per entry, and the suspicions.

// scanRecords reads server srv's intents, splits and inode records.
func (p *pass) scanRecords(ctx context.Context, srv int) error {
	for _, tag := range []byte{layout.TagIntent, layout.TagSplit} {
		start, end := layout.TagRange(tag)
		err := scanRange(ctx, p.c.Meta[srv], start, end, 0, func(k, v []byte) error {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.pending = append(p.pending, pendingRec{srv: srv, key: k, val: v})
			return nil
		})
		if err != nil {
			return err
		}
	}
	start, end := layout.TagRange(layout.TagInode)
	return scanRange(ctx, p.c.Meta[srv], start, end, 0, func(k, v []byte) error {
		if len(k) != 9 {
			p.bad(srv, fmt.Sprintf("inode key %x has %d bytes, not 9", k, len(k)))
			return nil
		}
		ino := layout.KeyIno(k)
		r, err := decodeInode(v)
		if err != nil {
			p.bad(srv, fmt.Sprintf("record of inode %d: %v", ino, err))
			return nil
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.addRecordLocked(srv, ino, r)
		return nil
	})
}

func (p *pass) bad(srv int, detail string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.badFinds = append(p.badFinds, Finding{Kind: KindBadRecord, Server: srv, Detail: detail,
		Repair: "fsck does not guess what a record it cannot read held"})
}

// addRecordLocked files inode record r of ino, read on server srv: a
// directory partition (the owner's record or a stub), and a standalone
// record. A standalone record on a server that does not own it is neither.
func (p *pass) addRecordLocked(srv int, ino core.Ino, r *weftpb.InodeRecord) {
	isDir := core.IsDir(r.Mode)
	if own, ok := owner(ino, p.n); !r.Stub && (!ok || own != srv) {
		p.cands = append(p.cands, &strayRecordCand{srv: srv, ino: ino})
		return
	}
	if r.Stub || isDir {
		l := p.layouts[ino]
		if l == nil {
			l = &dirLayout{dir: ino}
			p.layouts[ino] = l
		}
		p.rep.Partitions++
		l.parts = append(l.parts, newPart(srv, r))
		if !r.Stub {
			l.owner = true
			p.rep.Directories++
		}
	}
	if r.Stub {
		return
	}
	p.rep.Inodes++
	info := &inodeInfo{srv: srv, dir: isDir, nlink: r.Nlink, parent: core.Ino(r.Parent)}
	for _, l := range r.Links {
		info.links = append(info.links, linkRef{parent: core.Ino(l.Parent), name: string(l.Name)})
	}
	p.inodes[ino] = info
}

// checkLayouts judges every directory's partitions. On a running cluster
// the records of different servers were read at different times (a split
// may have run in between), so a layout that looks wrong is read again
// under the directory's locks, and the entry scan uses what it finds then.
func (p *pass) checkLayouts(ctx context.Context) error {
	var bad []*partitionCand
	for dir, l := range p.layouts {
		if l.judge(p.n); l.bad != "" {
			bad = append(bad, &partitionCand{dir: dir, refresh: true})
		}
	}
	slices.SortFunc(bad, func(a, b *partitionCand) int { return cmpIno(a.dir, b.dir) })
	cands := make([]candidate, len(bad))
	for i, c := range bad {
		cands[i] = c
	}
	deferred, err := p.checkAll(ctx, cands)
	for _, d := range deferred {
		// A split in progress: the partitions overlap until it is done.
		// The entry scan leaves the directory's placement alone; its
		// partitions are checked again after the scan.
		p.cands = append(p.cands, d.c)
	}
	return err
}

// entryScan is what scanning one server's entries produced.
type entryScan struct {
	srv      int
	refs     []uint64 // inodes that entries without attributes point to
	embedded []uint64
	stray    map[core.Ino]uint64 // entries of directories without records
}

// scanEntries reads server srv's directory entries.
func (p *pass) scanEntries(ctx context.Context, srv int) error {
	es := &entryScan{srv: srv, stray: map[core.Ino]uint64{}}
	var entries uint64
	start, end := layout.TagRange(layout.TagEntry)
	var cur *dirLayout
	var curDir core.Ino
	err := scanRange(ctx, p.c.Meta[srv], start, end, 0, func(k, v []byte) error {
		dir, partition, hash, name, ok := layout.EntryKeyParts(k)
		if !ok {
			p.bad(srv, fmt.Sprintf("entry key %x is too short", k))
			return nil
		}
		e, err := parseEntry(v)
		if err != nil {
			p.bad(srv, fmt.Sprintf("entry %q of directory %d: %v", name, dir, err))
			return nil
		}
		entries++
		if dir != curDir || cur == nil {
			curDir, cur = dir, p.layouts[dir] // read-only while entries are scanned
		}
		p.judgeEntry(es, cur, k, dir, partition, hash, name, e)
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(es.embedded)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rep.Entries += entries
	p.rep.Inodes += uint64(len(es.embedded))
	p.embedded[srv] = es.embedded
	for _, ino := range es.refs {
		if info := p.inodes[core.Ino(ino)]; info != nil {
			info.refs++
		}
	}
	for dir, n := range es.stray {
		p.cands = append(p.cands, &partitionCand{dir: dir, strayOn: srv, strayCount: n})
	}
	return nil
}

// judgeEntry checks one entry against its directory's partitions and its
// target's record, as the records scan saw them; anything odd becomes a
// suspicion. The scan's only writes are its own entryScan and the counts
// of srv's partition records.
func (p *pass) judgeEntry(es *entryScan, l *dirLayout, k []byte, dir core.Ino, partition uint32, hash uint64, name string, e entryInfo) {
	srv := es.srv
	if l == nil {
		es.stray[dir]++
	} else {
		if pr := l.on(srv); pr != nil && pr.partition == partition {
			pr.counted++
			if core.IsDir(e.mode) {
				pr.subdirs++
			}
		}
		if l.bad == "" {
			h := core.NameHash(name)
			if right := l.place(h); hash != h || right.srv != srv || right.partition != partition {
				p.suspect(&entryCand{what: KindMisplaced, srv: srv, key: k, dir: dir, name: name})
			}
		}
	}
	if e.embedded {
		es.embedded = append(es.embedded, uint64(e.ino))
		if p.inodes[e.ino] != nil {
			p.mu.Lock()
			p.dupInos[e.ino] = true
			p.mu.Unlock()
		}
		return
	}
	es.refs = append(es.refs, uint64(e.ino))
	info := p.inodes[e.ino]
	switch {
	case info == nil:
		p.suspect(&entryCand{what: KindDangling, srv: srv, key: k, dir: dir, name: name, ino: e.ino})
	case info.dir && info.parent != dir && e.ino != core.RootIno:
		p.mu.Lock()
		p.parentCands = append(p.parentCands, &entryCand{what: KindLinks, srv: srv, key: k, dir: dir, name: name, ino: e.ino})
		p.mu.Unlock()
	}
}

// afterEntries judges what needs every server's entries: reference counts,
// partition counts, inodes named twice.
func (p *pass) afterEntries() {
	for ino, info := range p.inodes {
		switch {
		case ino == core.RootIno:
			if info.refs > 0 {
				p.dupInos[ino] = true
			}
		case info.refs == 0:
			p.cands = append(p.cands, &orphanCand{ino: ino, srv: info.srv, info: info})
		case info.dir && info.refs > 1:
			p.dupInos[ino] = true
		case !info.dir && (uint32(info.refs) != info.nlink || len(info.links) != int(info.nlink)):
			p.cands = append(p.cands, &linksCand{ino: ino, srv: info.srv, info: info})
		}
	}
	for _, c := range p.parentCands {
		if info := p.inodes[c.ino]; info != nil && info.refs == 1 {
			p.cands = append(p.cands, c)
		}
	}
	for dir, l := range p.layouts {
		for _, pr := range l.parts {
			if pr.counted != pr.entries || pr.nlink != 2+pr.subdirs {
				p.cands = append(p.cands, &countCand{dir: dir, srv: pr.srv})
			}
		}
	}
	// An inode whose attributes are in an entry has exactly one name: two
	// servers' lists (or one's) holding it twice is damage.
	all := make([]uint64, 0)
	for _, e := range p.embedded {
		all = append(all, e...)
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			p.dupInos[core.Ino(all[i])] = true
		}
	}
	if len(p.cands) > maxCandidates {
		p.dropped += len(p.cands) - maxCandidates
		p.cands = p.cands[:maxCandidates]
	}
}

// locate finds, on server srv, the entries that name the inodes in dupInos.
func (p *pass) locate(ctx context.Context, srv int) error {
	start, end := layout.TagRange(layout.TagEntry)
	found := map[core.Ino][]place{}
	err := scanRange(ctx, p.c.Meta[srv], start, end, 0, func(k, v []byte) error {
		e, err := parseEntry(v)
		if err != nil || !p.dupInos[e.ino] {
			return nil
		}
		dir, _, _, name, ok := layout.EntryKeyParts(k)
		if ok {
			found[e.ino] = append(found[e.ino], place{srv: srv, key: k, dir: dir, name: name})
		}
		return nil
	})
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for ino, places := range found {
		var c *inodeCand
		for _, pc := range p.cands {
			if ic, ok := pc.(*inodeCand); ok && ic.ino == ino {
				c = ic
			}
		}
		if c == nil {
			c = &inodeCand{ino: ino}
			p.cands = append(p.cands, c)
		}
		c.places = append(c.places, places...)
	}
	return nil
}

// scanXattrs counts server srv's extended attributes and, on a stopped
// cluster, finds those of inodes that keep none there: neither a standalone
// record owned by srv nor an entry on srv with the attributes. (On a
// running cluster a rename may carry a file and its attributes between
// servers while they are read, and the lock that guards an embedded file's
// attributes is its directory's, which the attribute key does not name.)
func (p *pass) scanXattrs(ctx context.Context, srv int) error {
	start, end := layout.TagRange(layout.TagXattr)
	var n uint64
	var last core.Ino
	var stray []core.Ino
	err := scanRange(ctx, p.c.Meta[srv], start, end, 0, func(k, _ []byte) error {
		if len(k) <= 9 {
			p.bad(srv, fmt.Sprintf("extended attribute key %x has no name", k))
			return nil
		}
		n++
		ino := layout.KeyIno(k)
		if ino == last || p.c.Running {
			return nil
		}
		last = ino
		if info := p.inodes[ino]; info != nil && info.srv == srv {
			return nil
		}
		if _, ok := slices.BinarySearch(p.embedded[srv], uint64(ino)); ok {
			return nil
		}
		stray = append(stray, ino)
		return nil
	})
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rep.Xattrs += n
	for _, ino := range stray {
		p.cands = append(p.cands, &xattrCand{srv: srv, ino: ino})
	}
	return nil
}
