package meta

import (
	"context"

	dto "github.com/prometheus/client_model/go"

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

// walSyncs is how many times pebble fsynced the WAL, from its fsync latency
// histogram.
func (s *Server) walSyncs() float64 {
	h := s.db.Metrics().LogWriter.FsyncLatency
	if h == nil {
		return 0
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil || m.Histogram == nil {
		return 0
	}
	return float64(m.Histogram.GetSampleCount())
}
