package cluster

import "github.com/weftfs/weft/internal/config"

// validateRedundancy checks ProcsOptions.Redundancy against the other
// options: a form config understands, as many stores as a stripe needs, and
// agreement with Replication when both are given.
func (o *ProcsOptions) validateRedundancy(bad func(format string, args ...any)) {
	n, s, err := config.ParseRedundancy(o.Redundancy)
	switch {
	case err != nil:
		bad("redundancy: %v", err)
	case s.Enabled():
		if err := s.Validate(o.Store); err != nil {
			bad("redundancy: %v", err)
		}
		if o.Replication > 1 {
			bad("redundancy: %s keeps one copy of each unit; it cannot go with replication %d", o.Redundancy, o.Replication)
		}
	case o.Replication != 0 && o.Replication != n:
		bad("redundancy: %s disagrees with replication %d", o.Redundancy, o.Replication)
	case o.Store > 0 && n > o.Store:
		bad("redundancy: %s is more than the %d store servers", o.Redundancy, o.Store)
	}
}
