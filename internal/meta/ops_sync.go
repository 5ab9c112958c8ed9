package meta

import (
	"context"

	"github.com/weftfs/weft/proto/weftpb"
)

// SyncMeta makes every change acknowledged so far durable: in async mode
// it syncs the WAL (sharing the fsync with concurrent commits); in sync
// mode every acknowledged change already is.
func (s *Server) SyncMeta(ctx context.Context, _ *weftpb.SyncMetaRequest) (*weftpb.Empty, error) {
	const op = "sync meta"
	if err := s.enter(op); err != nil {
		return nil, err
	}
	defer s.closeMu.RUnlock()
	if s.sync {
		return &weftpb.Empty{}, nil
	}
	if f := s.failed.Load(); f != nil {
		return nil, s.refusal(op, f)
	}
	return &weftpb.Empty{}, s.syncWAL(op)
}
