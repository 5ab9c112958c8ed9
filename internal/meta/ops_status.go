package meta

import (
	"context"

	"github.com/weftfs/weft/proto/weftpb"
)

// Status summarises what this server holds, for weft status.
func (s *Server) Status(_ context.Context, req *weftpb.StatusRequest) (*weftpb.StatusReply, error) {
	if err := s.enter("status"); err != nil {
		return nil, err
	}
	defer s.closeMu.RUnlock()
	r := &weftpb.StatusReply{
		ServerId:   uint32(s.cfg.ID),
		Servers:    1,
		Inodes:     s.inodes.Load(),
		Dirs:       s.dirs.Load(),
		Durability: s.cfg.Durability,
	}
	return r, nil
}
