package store

import (
	"context"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// A store is incomplete while it may lack chunks it should hold: it was
// formatted to replace a store of a cluster that holds data (Config.
// Replacement), or its chunks directory vanished. It then serves no reads:
// not of chunks it lacks, which would read as holes, nor of chunks it has,
// since a write that reached it while it was incomplete may have created a
// chunk holding only that write's bytes, short of what the other replicas
// hold. Every read is errs.Lost, and the client reads another replica.
// Writes, deletes and listings go on as usual, so that the store keeps up
// with new data while repair copies the old. A full repair pass ends with
// MarkComplete.

// Identity returns the id of this formatting of the store (a replaced disk
// gets a new one) and whether the store is incomplete.
func (s *Server) Identity() (id string, incomplete bool) {
	return s.backend.Identity()
}

// MarkComplete records durably that the store holds every chunk it should:
// the repair tool calls it after a full pass that copied every chunk the
// store should hold. id, unless empty, must be the Identity the pass
// started with, so that a pass over a disk replaced in the meantime cannot
// vouch for the new one.
func (s *Server) MarkComplete(ctx context.Context, id string) error {
	const op = "mark store complete"
	done, err := s.begin(ctx, op)
	if err != nil {
		return err
	}
	defer done()
	if cur, _ := s.backend.Identity(); id != "" && id != cur {
		return errs.New(errs.Stale, op, "store %d is now %s, not %s: it was formatted again since the repair pass began", s.cfg.ID, cur, id)
	}
	if err := s.backend.MarkComplete(); err != nil {
		return err
	}
	s.incomplete.Store(false)
	s.log.Info("store marked complete")
	return nil
}

// MarkStoreComplete is MarkComplete on the wire.
func (s *Server) MarkStoreComplete(ctx context.Context, req *weftpb.MarkStoreCompleteRequest) (*weftpb.MarkStoreCompleteReply, error) {
	if err := s.MarkComplete(ctx, req.GetId()); err != nil {
		return nil, err
	}
	return &weftpb.MarkStoreCompleteReply{}, nil
}

// lostIfIncomplete refuses a read of an incomplete store.
func (s *Server) lostIfIncomplete(op string, k ChunkKey) error {
	if !s.incomplete.Load() {
		return nil
	}
	return errs.New(errs.Lost, op, "chunk %v: store %d is incomplete (it replaced a store that held data and has not been repaired)", k, s.cfg.ID)
}
