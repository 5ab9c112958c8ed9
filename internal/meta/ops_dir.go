package meta

import (
	"context"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

const (
	defaultReadDirLimit = 1024
	maxReadDirLimit     = 8192
)

// ReadDir lists this server's partition of a directory in (name hash, name)
// order, from just after the cookie's position, and returns the server's
// bitmap of the directory's partitions; the client merges the partitions.
// Because the cookie names a position in that order rather than a count, an
// entry present for the whole listing appears exactly once however many names
// are created, removed or moved by splits meanwhile. "." and ".." are the
// client's.
func (s *Server) ReadDir(ctx context.Context, req *weftpb.ReadDirRequest) (*weftpb.ReadDirReply, error) {
	const op = "readdir"
	c, err := credsOf(ctx, op, req.GetCreds())
	if err != nil {
		return nil, err
	}
	dir := core.Ino(req.Dir)
	if len(req.Cookie) > 0 {
		if _, err := cookieSeek(dir, 0, req.Cookie); err != nil {
			return nil, err
		}
	}
	limit := int(min(req.Limit, maxReadDirLimit))
	if limit == 0 {
		limit = defaultReadDirLimit
	}
	reply := &weftpb.ReadDirReply{Cookie: req.Cookie}
	err = s.view(ctx, op, func(t *txn) error {
		d, err := t.dir(dir)
		if err != nil {
			return err
		}
		if s.n > 1 && !d.Stub && s.ownerOf(dir) != s.cfg.ID {
			return errs.New(errs.Stale, op, "no partition of directory %d on this server", dir)
		}
		if err := checkAccess(op, c, d, mayRead); err != nil {
			return err
		}
		reply.Bitmap = d.Bitmap
		start, err := cookieSeek(dir, d.Partition, req.Cookie)
		if err != nil {
			return err
		}
		if err := s.listEntries(t, start, prefixEnd(partPrefix(dir, d.Partition)), limit, req.Plus, reply); err != nil {
			return err
		}
		// A split that committed between reading d and opening the
		// iterator moved entries the listing lacks: the bitmap read
		// now names where they went.
		now := &weftpb.InodeRecord{}
		if ok, err := getRecord(s.db, inodeKey(dir), now); err == nil && ok {
			reply.Bitmap = core.BitmapOr(slices.Clone(reply.Bitmap), now.Bitmap)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return reply, nil
}

func (s *Server) listEntries(t *txn, start, end []byte, limit int, plus bool, reply *weftpb.ReadDirReply) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return errs.Wrap(errs.IO, t.op, "", err)
	}
	defer it.Close()
	valid := it.First()
	for ; valid; valid = it.Next() {
		if len(reply.Entries) == limit {
			break
		}
		_, _, name, ok := entrySuffix(it.Key())
		if !ok {
			return errs.New(errs.Corrupt, t.op, "bad entry key %q", it.Key())
		}
		e := &weftpb.EntryRecord{}
		if err := proto.Unmarshal(it.Value(), e); err != nil {
			return errs.Wrap(errs.Corrupt, t.op, name, err)
		}
		// The cookie moves past skipped entries too.
		reply.Cookie = encodeCookie(it.Key())
		de := &weftpb.DirEntryMsg{Name: name, Ino: e.Ino, Mode: e.Mode & core.ModeType}
		if plus {
			r, err := s.entryAttr(t, it.Key(), e)
			if err != nil {
				return err
			}
			if r == nil {
				continue // removed since the iterator's snapshot
			}
			de.Attr = attrOf(core.Ino(e.Ino), r)
			de.Mode = r.Mode
		}
		reply.Entries = append(reply.Entries, de)
	}
	if err := it.Error(); err != nil {
		return errs.Wrap(errs.IO, t.op, "", err)
	}
	reply.Eof = !valid
	return nil
}

// entryAttr returns the attributes of the entry e found at key by an
// iterator. The standalone record it points to may be gone by now: removed
// with the name (nil, nil), or folded back into the entry when the file lost
// its second link, so the entry is read again before giving up.
func (s *Server) entryAttr(t *txn, key []byte, e *weftpb.EntryRecord) (*weftpb.InodeRecord, error) {
	for range 2 {
		if e.Attr != nil {
			return e.Attr, nil
		}
		r, err := t.inode(core.Ino(e.Ino))
		if !errs.Is(err, errs.Stale) {
			return r, err
		}
		ino := e.Ino
		e = &weftpb.EntryRecord{}
		found, err := getRecord(s.db, key, e)
		if err != nil || !found || e.Ino != ino {
			return nil, err // gone, or the name now holds another inode
		}
	}
	return nil, nil
}
