package meta

import (
	"context"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/proto/weftpb"
)

// Locate says where this server holds the entry of a one-link file, from
// the index (docs/format.md, tag N): a client addresses an open file by the
// name it was opened under, and when another client renames it that name no
// longer reaches it. The index is written in the batch that moves the entry,
// so what it says was true at some moment; the client retries by the name
// it gets, and the server checks that name again. Nothing is revealed but
// the name of a file the caller's client has open (it holds its inode
// number from an open the server allowed).
func (s *Server) Locate(ctx context.Context, req *weftpb.LocateRequest) (*weftpb.LocateReply, error) {
	const op = "locate"
	if err := s.enter(op); err != nil {
		return nil, err
	}
	defer s.closeMu.RUnlock()
	if req.Ino == 0 {
		return nil, errs.New(errs.Invalid, op, "no inode")
	}
	ino := core.Ino(req.Ino)
	v, found, err := getValue(s.db, layout.IndexAttrKey(layout.IndexEntryAttr, ino))
	if err != nil || !found {
		return &weftpb.LocateReply{}, err
	}
	a, ok := layout.DecodeIndexAttr(layout.IndexEntryAttr, v)
	if !ok {
		return nil, errs.New(errs.Corrupt, op, "bad index attributes of inode %d", ino)
	}
	return &weftpb.LocateReply{Found: true, Node: &weftpb.NodeRef{Ino: req.Ino, Parent: uint64(a.Dir), Name: a.Name}}, nil
}
