package meta

import (
	"context"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/internal/lease"
)

// Leases. Clients cache what a lease covers (internal/lease): on this
// server, key ino covers the entries of ino's partition here (with the
// attributes they embed), ino's own record here and its extended
// attributes. Every commit is therefore preceded by a recall of the leases
// other clients hold on the keys of the records its batch writes, found
// from the batch itself, so that no operation (including a peer's writes,
// a split's moves and an intent's replay) can change a cached record
// behind its holder's back. The client whose request it is keeps its own
// leases.

func (s *Server) initLeases() {
	grace := s.cfg.LeaseGrace
	if s.created {
		grace = -1
	}
	var reg prometheus.Registerer
	if s.cfg.Registry != nil {
		reg = s.cfg.Registry
	}
	s.leases = lease.New(lease.Config{
		Log:     s.log,
		Term:    s.cfg.LeaseTerm,
		Grace:   grace,
		Metrics: lease.NewMetrics(reg),
	})
}

// changeLeases recalls the leases on what b writes, except the requester's
// (the client whose connection ctx carries), and returns the function that
// lets new leases on them be granted again, to call once b is applied.
func (s *Server) changeLeases(ctx context.Context, b *pebble.Batch) (end func(), err error) {
	if s.leases == nil || b.Empty() {
		return func() {}, nil
	}
	return s.leases.BeginChange(ctx, lease.HolderOf(ctx), leaseKeys(b))
}

// changeLeasesOf is changeLeases for a write no client asked for directly.
// Its wait is bounded by the lease term.
func (s *Server) changeLeasesOf(b *pebble.Batch) (end func(), err error) {
	return s.changeLeases(context.Background(), b)
}

// commitFor is commit (synced) for a client's request, whose own leases
// are not recalled.
func (s *Server) commitFor(ctx context.Context, op string, b *pebble.Batch) error {
	end, err := s.changeLeases(ctx, b)
	return s.applyLeased(op, b, true, end, err)
}

// leaseKeys returns the keys of the records b writes: the inode of an inode
// record, of an extended attribute, or of the directory an entry is in.
func leaseKeys(b *pebble.Batch) []lease.Key {
	var keys []lease.Key
	seen := map[lease.Key]bool{}
	r := b.Reader()
	for {
		_, k, _, ok, err := r.Next()
		if err != nil || !ok {
			break // a batch built in this process does not fail to decode
		}
		if len(k) < 9 || k[0] != layout.TagInode && k[0] != layout.TagEntry && k[0] != layout.TagXattr {
			continue
		}
		key := lease.Key(layout.KeyIno(k))
		if !seen[key] {
			seen[key] = true
			keys = append(keys, key)
		}
	}
	return keys
}
