package config

import (
	"strconv"
	"strings"

	"github.com/weftfs/weft/internal/erasure"
	"github.com/weftfs/weft/internal/errs"
)

// How chunks survive a lost store (the cluster file's redundancy key):
// "replicas:N" keeps N copies of each chunk (the same as replication = N,
// the default with N = replication), "ec:K+M" erasure-codes them, K data
// and M parity units per stripe on K+M distinct stores (internal/erasure).
// Like the chunk size, it cannot change on a cluster that holds files.
const (
	RedundancyReplicas = "replicas"
	RedundancyEC       = "ec"
)

// ParseRedundancy parses "replicas:N" or "ec:K+M" into the replica count
// (0 for ec) and the erasure scheme (the zero Scheme for replicas).
func ParseRedundancy(text string) (replicas int, scheme erasure.Scheme, err error) {
	mode, arg, ok := strings.Cut(text, ":")
	switch {
	case ok && mode == RedundancyReplicas:
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1 {
			return 0, erasure.Scheme{}, errs.New(errs.Invalid, "redundancy", "%q: want replicas:N with N >= 1", text)
		}
		return n, erasure.Scheme{}, nil
	case ok && mode == RedundancyEC:
		s, err := erasure.ParseScheme(arg)
		if err != nil {
			return 0, erasure.Scheme{}, errs.Wrap(errs.Invalid, "redundancy", text, err)
		}
		return 0, s, nil
	}
	return 0, erasure.Scheme{}, errs.New(errs.Invalid, "redundancy", "%q: want replicas:N or ec:K+M (such as replicas:2 or ec:4+1)", text)
}

// SetRedundancy sets the cluster's redundancy from text ("replicas:N" or
// "ec:K+M"): for replicas it sets Replication to N, for ec to 1.
func (c *Cluster) SetRedundancy(text string) error {
	n, s, err := ParseRedundancy(text)
	if err != nil {
		return err
	}
	c.Redundancy = text
	if s.Enabled() {
		c.Replication = 1
	} else {
		c.Replication = n
	}
	return nil
}

// Erasure returns the cluster's erasure scheme, or the zero Scheme when it
// keeps replicas.
func (c *Cluster) Erasure() erasure.Scheme {
	if c.Redundancy == "" {
		return erasure.Scheme{}
	}
	_, s, err := ParseRedundancy(c.Redundancy)
	if err != nil {
		return erasure.Scheme{}
	}
	return s
}

// RedundancyString is the cluster's redundancy as the redundancy key
// writes it, "replicas:N" when only replication is set.
func (c *Cluster) RedundancyString() string {
	if c.Redundancy != "" {
		return c.Redundancy
	}
	return RedundancyReplicas + ":" + strconv.Itoa(c.Replication)
}

func (c *Cluster) validateRedundancy(v *validator) {
	if c.Redundancy == "" {
		return
	}
	n, s, err := ParseRedundancy(c.Redundancy)
	switch {
	case err != nil:
		v.addf("redundancy", "%v", err)
	case s.Enabled():
		if err := s.Validate(len(c.Store)); err != nil {
			v.addf("redundancy", "%v", err)
		}
		if c.Replication != 1 {
			v.addf("redundancy", "%s keeps one copy of each unit; replication must be 1, not %d", c.Redundancy, c.Replication)
		}
	case n != c.Replication:
		v.addf("redundancy", "%s disagrees with replication = %d", c.Redundancy, c.Replication)
	}
}

// applyRedundancy makes replication follow a redundancy key in a file that
// does not set replication itself.
func (c *Cluster) applyRedundancy(replicationSet bool) {
	if c.Redundancy == "" || replicationSet {
		return
	}
	n, s, err := ParseRedundancy(c.Redundancy)
	switch {
	case err != nil: // validate reports it
	case s.Enabled():
		c.Replication = 1
	default:
		c.Replication = n
	}
}
