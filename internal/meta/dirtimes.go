package meta

import (
	"sync"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/proto/weftpb"
)

// The times of a split directory. An entry change in partition i moves
// partition i's mtime and ctime, on partition i's server: making every
// create in a split directory also write the owner's record would make it a
// cross-server operation, which is what GIGA+ avoids. So stat of a split
// directory (GetAttr, Lookup) reports the latest mtime and ctime over its
// partitions, read from the servers that hold them. A server that does not
// answer is left out: its partition's changes are then missing from the
// times until it is back.

// isSplit reports whether directory record r has partitions besides 0.
func isSplit(r *weftpb.InodeRecord) bool {
	for i, b := range r.Bitmap {
		if i == 0 && b&^1 != 0 || i > 0 && b != 0 {
			return true
		}
	}
	return false
}

// partitionTimes raises a's mtime and ctime to the latest of directory
// dir's partitions on the other servers, if dir (whose owner's record is r)
// is split. It holds no lock and runs outside any txn.
func (s *Server) partitionTimes(op string, dir core.Ino, r *weftpb.InodeRecord, a *weftpb.Attr) {
	if s.n == 1 || r == nil || r.Stub || !core.IsDir(r.Mode) || !isSplit(r) {
		return
	}
	owner := s.ownerOf(dir)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for srv := range s.n {
		if srv == owner {
			continue
		}
		wg.Go(func() {
			p := &weftpb.InodeRecord{}
			var found bool
			var err error
			if srv == s.cfg.ID {
				if err = s.enter(op); err != nil {
					return
				}
				found, err = getRecord(s.db, inodeKey(dir), p)
				s.closeMu.RUnlock()
			} else {
				found, err = s.peerGet(s.giga.ctx, op, srv, weftpb.PeerGetRequest_PART, dir, "", p)
			}
			if err != nil {
				s.log.Debug("meta: partition times of a split directory", "dir", dir, "server", srv, "err", err)
				return
			}
			if !found || !p.Stub {
				return
			}
			mu.Lock()
			a.MtimeNs = max(a.MtimeNs, p.MtimeNs)
			a.CtimeNs = max(a.CtimeNs, p.CtimeNs)
			mu.Unlock()
		})
	}
	wg.Wait()
}
