package lease

import "context"

// RecallWriters recalls the write leases other sessions hold on keys (all
// but those of requester's sessions) and waits, bounded by ctx, until each
// is released or its term ends. It neither blocks grants nor counts as a
// change: a meta server calls it before it takes the locks of a commit, so
// that a write-back holder (a client with queued operations under a
// directory write lease) can flush them, which needs those locks, before
// the commit that conflicts with them runs. The commit's own BeginChange
// still recalls whatever was granted in between.
func (s *Service) RecallWriters(ctx context.Context, requester Holder, keys []Key) error {
	for {
		wait, recalls := s.tryRecallWriters(requester, keys)
		if wait == nil {
			return nil
		}
		sendRecalls(recalls)
		if err := wait.wait(ctx, "write lease recall"); err != nil {
			return err
		}
	}
}

func (s *Service) tryRecallWriters(requester Holder, keys []Key) (*waiter, []recall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireLocked(now)
	w := &waiter{changed: s.mu.changed}
	var recalls []recall
	for _, k := range keys {
		kl := s.mu.leases[k]
		if kl == nil {
			continue
		}
		s.expireKeyLocked(k, kl, now)
		// Read: only write leases stand in its way.
		recalls = s.recallLocked(k, kl, 0, requester, Read, now, w, recalls)
	}
	if !w.blocked {
		return nil, nil
	}
	w.from(now)
	return w, recalls
}

// WritersOn returns those of keys on which a session other than
// requester's holds a write lease now.
func (s *Service) WritersOn(requester Holder, keys []Key) []Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var out []Key
	for _, k := range keys {
		kl := s.mu.leases[k]
		if kl == nil {
			continue
		}
		for sid, g := range kl.grants {
			if g.mode != Write || !now.Before(g.expires) {
				continue
			}
			if ss := s.mu.sessions[sid]; requester != nil && ss != nil && ss.holder == requester {
				continue
			}
			out = append(out, k)
			break
		}
	}
	return out
}
