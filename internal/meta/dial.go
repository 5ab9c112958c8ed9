package meta

import "github.com/weftfs/weft/internal/rpc"

// dialOptions is the template of a connection this server dials: its
// cluster identity from Config.Dial, its logger.
func (s *Server) dialOptions() rpc.DialOptions {
	opts := s.cfg.Dial
	opts.Logger = s.log
	return opts
}
