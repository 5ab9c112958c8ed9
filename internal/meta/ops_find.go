package meta

import (
	"bytes"
	"context"
	"errors"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/internal/search"
	"github.com/weftfs/weft/proto/weftpb"
)

// Bounds of one Find reply: hits, bytes, and index keys looked at (so a
// query that matches little still answers, with a cursor, in bounded time).
const (
	findDefaultLimit = 1024
	findMaxLimit     = 4096
	findMaxBytes     = 4 << 20
	findMaxExamined  = 256 << 10
	findMaxDirCache  = 4096
)

// Stages of the MATCHES phase; a cursor is the stage and the last key.
const (
	stageByName   = 'n' // the by-name keys of a literal -name
	stageByStart  = 's' // the by-name keys that start with a pattern's literal start
	stageByEnd    = 'e' // the by-reversed-name keys that end with a pattern's literal end
	stageByXattr  = 'x' // the keys of the first -xattr name
	stageEntry    = 'a' // every attribute held in an entry
	stageRecord   = 'A' // every standalone record
	stageFinished = 'z'
)

// Find returns one page of the entries and records this server holds that
// weft find needs (FindRequest). It reads the index without locks, like
// readdir: a page sees operations that commit meanwhile, and an entry a
// split is moving may be returned by both servers (the client keeps one).
// Entries are returned only from directories the caller may read and
// search, judged on this server's record of the directory's partition.
func (s *Server) Find(ctx context.Context, req *weftpb.FindRequest) (*weftpb.FindReply, error) {
	const op = "find"
	if s.cfg.NoSearchIndex {
		return nil, errs.New(errs.NotSupported, op, "meta server %d runs without the search index", s.cfg.ID)
	}
	c, err := credsOf(ctx, op, req.Creds)
	if err != nil {
		return nil, err
	}
	q, err := search.FromProto(op, req.Query)
	if err != nil {
		return nil, err
	}
	limit := int(req.Limit)
	switch {
	case limit == 0:
		limit = findDefaultLimit
	case limit > findMaxLimit:
		limit = findMaxLimit
	}
	if err := s.enter(op); err != nil {
		return nil, err
	}
	defer s.closeMu.RUnlock()
	f := &finder{s: s, ctx: ctx, c: c, q: q, limit: limit, dirs: map[core.Ino]bool{}, reply: &weftpb.FindReply{}}
	switch req.Phase {
	case weftpb.FindRequest_POINTERS:
		err = f.pointers(req.Cursor)
	case weftpb.FindRequest_MATCHES:
		err = f.matches(req.Cursor)
	default:
		err = errs.New(errs.Invalid, op, "unknown phase %d", req.Phase)
	}
	if err != nil {
		return nil, err
	}
	return f.reply, nil
}

// finder is one Find call's state.
type finder struct {
	s        *Server
	ctx      context.Context
	c        core.Creds
	q        *search.Query
	limit    int
	size     int
	examined int
	dirs     map[core.Ino]bool // may the caller list this directory here
	name     []byte            // a reversed name put right
	reply    *weftpb.FindReply
}

// full reports whether the page is done: the caller then resumes after
// the last key looked at.
func (f *finder) full() bool {
	return len(f.reply.Hits) >= f.limit || f.size >= findMaxBytes || f.examined >= findMaxExamined || f.ctx.Err() != nil
}

func (f *finder) add(h *weftpb.FindHit) {
	f.reply.Hits = append(f.reply.Hits, h)
	f.size += 64 + len(h.Name)
}

// pointers lists the pointer entries of the directories the caller may
// list.
func (f *finder) pointers(cursor []byte) error {
	p := layout.IndexPrefix(layout.IndexPointer)
	return f.scan(p, cursor, func(k, v []byte) error {
		dir, name, ok := layout.IndexPointerParts(k)
		ino, mode, ok2 := layout.IndexRefParts(v)
		if !ok || !ok2 {
			return errs.New(errs.Corrupt, "find", "bad index key %q", k)
		}
		if ok, err := f.mayList(dir); err != nil || !ok {
			return err
		}
		f.add(&weftpb.FindHit{Dir: uint64(dir), Name: []byte(name), Ino: uint64(ino), EntryMode: mode})
		return nil
	}, func(last []byte) { f.reply.Cursor = last })
}

// matches runs the stages of the MATCHES phase from the cursor's: one
// driven by the most selective index the query allows, then the records.
func (f *finder) matches(cursor []byte) error {
	var stages []byte
	var first func() (prefix []byte, each func(k, v []byte) error)
	switch g, kind, part := nameDriven(f.q.Names); {
	case kind != 0:
		stages = []byte{kind, stageRecord}
		first = func() ([]byte, func(k, v []byte) error) {
			var prefix []byte
			switch kind {
			case stageByName:
				prefix = layout.IndexNamePrefix(part)
			case stageByStart:
				prefix = layout.IndexNameStartPrefix(part)
			default:
				prefix = layout.IndexNameEndPrefix(part)
			}
			return prefix, func(k, v []byte) error {
				name, ok := layout.IndexNameKeyName(k)
				ino, _, ok2 := layout.IndexRefParts(v)
				if !ok || !ok2 {
					return errs.New(errs.Corrupt, "find", "bad index key %q", k)
				}
				if kind == stageByEnd {
					f.name = reverseInto(f.name[:0], name)
					name = f.name
				}
				// Only the names that match cost a read of their
				// attributes.
				if kind != stageByName && !g.MatchBytes(name) {
					return nil
				}
				return f.entryAttr(ino)
			}
		}
	case len(f.q.Xattrs) > 0:
		stages = []byte{stageByXattr}
		first = func() ([]byte, func(k, v []byte) error) {
			p := layout.IndexXattrPrefix(f.q.Xattrs[0])
			return p, func(k, v []byte) error {
				if len(k) != len(p)+8 {
					return errs.New(errs.Corrupt, "find", "bad index key %q", k)
				}
				ino := layout.KeyIno(k[len(p)-1:])
				if err := f.entryAttr(ino); err != nil {
					return err
				}
				return f.recordAttr(ino)
			}
		}
	default:
		stages = []byte{stageEntry, stageRecord}
	}
	stage, after := stages[0], []byte(nil)
	if len(cursor) > 0 {
		stage, after = cursor[0], cursor[1:]
		if stage == stageFinished && len(after) == 0 {
			f.reply.Eof = true
			return nil
		}
		if !slices.Contains(stages, stage) {
			return errs.New(errs.Invalid, "find", "bad cursor")
		}
	}
	for i := slices.Index(stages, stage); i < len(stages); i++ {
		var prefix []byte
		var each func(k, v []byte) error
		switch stages[i] {
		case stageEntry:
			prefix, each = layout.IndexPrefix(layout.IndexEntryAttr), func(k, v []byte) error {
				return f.entryHit(layout.KeyIno(k[1:]), v)
			}
		case stageRecord:
			prefix, each = layout.IndexPrefix(layout.IndexRecordAttr), func(k, v []byte) error {
				return f.recordHit(layout.KeyIno(k[1:]), v)
			}
		default:
			prefix, each = first()
		}
		st := stages[i]
		err := f.scan(prefix, after, each, func(last []byte) { f.reply.Cursor = append([]byte{st}, last...) })
		if err != nil || !f.reply.Eof {
			return err
		}
		after = nil
	}
	f.reply.Cursor = []byte{stageFinished}
	return nil
}

// nameDriven picks the -name test whose index keys narrow the scan most,
// and how: a literal name (stageByName, its by-name keys), else the
// longest literal start (stageByStart) or end (stageByEnd) of a pattern;
// kind 0 if no test has one (a scan of every entry's attributes is then
// as cheap as one of every name).
func nameDriven(names []search.Glob) (g search.Glob, kind byte, part string) {
	for _, n := range names {
		if n.Literal() {
			return n, stageByName, n.Pattern
		}
	}
	for _, n := range names {
		if s := n.LiteralStart(); len(s) > len(part) {
			g, kind, part = n, stageByStart, s
		}
		if e := n.LiteralEnd(); len(e) > len(part) {
			g, kind, part = n, stageByEnd, e
		}
	}
	return g, kind, part
}

func reverseInto(dst, b []byte) []byte {
	for i := len(b) - 1; i >= 0; i-- {
		dst = append(dst, b[i])
	}
	return dst
}

// scan calls each for every key with prefix after the key after, until
// the page is full; then it sets the cursor with the last key looked at,
// and at the end of the keys it sets Eof.
func (f *finder) scan(prefix, after []byte, each func(k, v []byte) error, setCursor func(last []byte)) error {
	lower := prefix
	if len(after) > 0 {
		if !bytes.HasPrefix(after, prefix) {
			return errs.New(errs.Invalid, "find", "bad cursor")
		}
		lower = append(slices.Clone(after), 0)
	}
	it, err := f.s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: layout.PrefixEnd(prefix)})
	if err != nil {
		return errs.Wrap(errs.IO, "find", "", err)
	}
	f.reply.Eof = false
	var last []byte
	full := false
	for it.First(); it.Valid(); it.Next() {
		if full = f.full(); full {
			break
		}
		f.examined++
		last = append(last[:0], it.Key()...)
		if err = each(it.Key(), it.Value()); err != nil {
			break
		}
	}
	if err := errors.Join(err, it.Error(), it.Close()); err != nil {
		return errs.Wrap(errs.KindOf(err), "find", "", err)
	}
	if err := f.ctx.Err(); err != nil {
		return ctxError("find", err)
	}
	if full {
		setCursor(last)
		return nil
	}
	f.reply.Eof = true
	return nil
}

// entryAttr tests ino's attributes held in an entry here, if there are.
func (f *finder) entryAttr(ino core.Ino) error {
	v, found, err := getValue(f.s.db, layout.IndexAttrKey(layout.IndexEntryAttr, ino))
	if err != nil || !found {
		return err
	}
	return f.entryHit(ino, v)
}

// recordAttr tests ino's standalone record here, if there is one.
func (f *finder) recordAttr(ino core.Ino) error {
	v, found, err := getValue(f.s.db, layout.IndexAttrKey(layout.IndexRecordAttr, ino))
	if err != nil || !found {
		return err
	}
	return f.recordHit(ino, v)
}

// entryHit tests attributes held in an entry.
func (f *finder) entryHit(ino core.Ino, v []byte) error {
	a, ok := layout.DecodeIndexAttr(layout.IndexEntryAttr, v)
	if !ok {
		return errs.New(errs.Corrupt, "find", "bad index attributes of inode %d", ino)
	}
	if !f.q.MatchAttrs(searchAttrs(a), false) || !f.q.MatchName(a.Name) {
		return nil
	}
	if ok, err := f.hasXattrs(ino); err != nil || !ok {
		return err
	}
	if ok, err := f.mayList(a.Dir); err != nil || !ok {
		return err
	}
	f.add(&weftpb.FindHit{Dir: uint64(a.Dir), Name: []byte(a.Name), Ino: uint64(ino), Attr: wireIndexAttr(ino, a)})
	return nil
}

// recordHit tests a standalone record's attributes. Its names are in
// entries elsewhere: the client tests them, and the permissions of their
// directories, when it joins the record with the pointers.
func (f *finder) recordHit(ino core.Ino, v []byte) error {
	a, ok := layout.DecodeIndexAttr(layout.IndexRecordAttr, v)
	if !ok {
		return errs.New(errs.Corrupt, "find", "bad index attributes of inode %d", ino)
	}
	if !f.q.MatchAttrs(searchAttrs(a), a.Split) {
		return nil
	}
	if ok, err := f.hasXattrs(ino); err != nil || !ok {
		return err
	}
	f.add(&weftpb.FindHit{Ino: uint64(ino), Attr: wireIndexAttr(ino, a), Parent: uint64(a.Parent), Recheck: a.Split && f.q.HasTimes()})
	return nil
}

// hasXattrs reports whether ino has every extended attribute the query
// names (its attributes' server holds them).
func (f *finder) hasXattrs(ino core.Ino) (bool, error) {
	for _, x := range f.q.Xattrs {
		_, found, err := getValue(f.s.db, layout.IndexXattrKey(x, ino))
		if err != nil || !found {
			return false, err
		}
	}
	return true, nil
}

// mayList reports whether the caller may read and search directory dir,
// by this server's record of its partition (the owner's record or a stub,
// which carries the directory's mode and owner).
func (f *finder) mayList(dir core.Ino) (bool, error) {
	if ok, seen := f.dirs[dir]; seen {
		return ok, nil
	}
	r := &weftpb.InodeRecord{}
	found, err := getRecord(f.s.db, inodeKey(dir), r)
	if err != nil {
		return false, err
	}
	ok := found && allowed(f.c, r, mayRead|mayExec)
	if len(f.dirs) >= findMaxDirCache {
		clear(f.dirs)
	}
	f.dirs[dir] = ok
	return ok, nil
}

func searchAttrs(a layout.IndexAttr) search.Attrs {
	return search.Attrs{Mode: a.Mode, Uid: a.Uid, Gid: a.Gid, Size: a.Size, MtimeNs: a.MtimeNs}
}

func wireIndexAttr(ino core.Ino, a layout.IndexAttr) *weftpb.Attr {
	return &weftpb.Attr{Ino: uint64(ino), Mode: a.Mode, Nlink: a.Nlink, Uid: a.Uid, Gid: a.Gid,
		Size: a.Size, MtimeNs: a.MtimeNs, CtimeNs: a.CtimeNs}
}
