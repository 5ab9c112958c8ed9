package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// ValidationError lists every problem found in a cluster, each naming the
// setting it is about ("store[1].backend: ...").
type ValidationError struct {
	Problems []string
}

func (e *ValidationError) Error() string {
	if len(e.Problems) == 1 {
		return e.Problems[0]
	}
	return fmt.Sprintf("%d problems: %s", len(e.Problems), strings.Join(e.Problems, "; "))
}

// Validate checks every setting and every server entry. It reports all
// problems at once, as an errs.Invalid error wrapping a *ValidationError.
func (c *Cluster) Validate() error {
	if err := c.validate(); err != nil {
		return errs.Wrap(errs.Invalid, "invalid cluster", "", err)
	}
	return nil
}

// validate returns a *ValidationError or nil.
func (c *Cluster) validate() error {
	v := &validator{}
	c.validateSettings(v)
	c.validateRedundancy(v)
	c.validateServers(v)
	c.validateSecurity(v)
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: v.problems}
}

type validator struct {
	problems []string
}

func (v *validator) addf(field, format string, args ...any) {
	v.problems = append(v.problems, field+": "+fmt.Sprintf(format, args...))
}

func (c *Cluster) validateSettings(v *validator) {
	if strings.TrimSpace(c.Name) == "" {
		v.addf("name", "is empty")
	}
	cs := int64(c.ChunkSize)
	if cs < MinChunkSize || cs > MaxChunkSize || cs&(cs-1) != 0 {
		v.addf("chunk_size", "%d is not a power of two between %s and %s",
			cs, ByteSize(MinChunkSize), ByteSize(MaxChunkSize))
	}
	if c.Replication < 1 {
		v.addf("replication", "%d is less than 1", c.Replication)
	} else if len(c.Store) > 0 && c.Replication > len(c.Store) {
		v.addf("replication", "%d is more than the %d store servers", c.Replication, len(c.Store))
	}
	if c.Durability != DurabilitySync && c.Durability != DurabilityAsync {
		v.addf("durability", "%q is not one of %s, %s", c.Durability, DurabilitySync, DurabilityAsync)
	}
	if m := c.MountDurability; m != "" && m != DurabilitySync && m != DurabilityWriteback && m != DurabilityCreateAtClose {
		v.addf("mount_durability", "%q is not one of %s, %s, %s", m, DurabilitySync, DurabilityWriteback, DurabilityCreateAtClose)
	}
	if c.InlineLimit < 0 || c.InlineLimit > MaxInlineLimit {
		v.addf("inline_limit", "%d is not between 0 and %d", c.InlineLimit, MaxInlineLimit)
	}
	if c.SplitThreshold < MinSplitThreshold {
		v.addf("split_threshold", "%d is less than %d", c.SplitThreshold, MinSplitThreshold)
	}
	if c.SplitBits < 1 || c.SplitBits > MaxSplitBits {
		v.addf("split_bits", "%d is not between 1 and %d", c.SplitBits, MaxSplitBits)
	}
	c.validateLease(v)
}

// validateLease checks lease_term and lease_grace (0: their defaults).
func (c *Cluster) validateLease(v *validator) {
	term := time.Duration(c.LeaseTerm)
	if term != 0 && (term < MinLeaseTerm || term > MaxLeaseTerm) {
		v.addf("lease_term", "%v is not between %v and %v", term, MinLeaseTerm, MaxLeaseTerm)
		return
	}
	eff, _ := c.Lease()
	switch grace := time.Duration(c.LeaseGrace); {
	case grace == 0:
	case grace < eff:
		v.addf("lease_grace", "%v is shorter than the lease term %v: after a restart, a client may still trust a lease granted before for up to a term", grace, eff)
	case grace > MaxLeaseGrace:
		v.addf("lease_grace", "%v is longer than %v (a restarted meta server refuses every change for that long)", grace, MaxLeaseGrace)
	}
}

func (c *Cluster) validateServers(v *validator) {
	if len(c.Meta) == 0 {
		v.addf("meta", "no meta servers; add at least one [[meta]] entry")
	}
	if len(c.Meta) > core.MaxServers {
		v.addf("meta", "%d meta servers; at most %d are supported", len(c.Meta), core.MaxServers)
	}
	if len(c.Store) == 0 {
		v.addf("store", "no store servers; add at least one [[store]] entry")
	}
	// Every listening address belongs to one server only: two entries with
	// the same address would start one server and fail the other, or worse,
	// send clients to the wrong role.
	owner := map[string]string{}
	checkAddr := func(field, addr string, required bool) {
		if addr == "" {
			if required {
				v.addf(field, "is empty; want host:port")
			}
			return
		}
		if err := checkHostPort(addr); err != nil {
			v.addf(field, "%q: %v", addr, err)
			return
		}
		if prev, ok := owner[addr]; ok {
			v.addf(field, "%q is also %s", addr, prev)
			return
		}
		owner[addr] = field
	}
	// Server addresses first, so that a clash with a metrics address is
	// reported on the metrics address.
	for i, m := range c.Meta {
		checkAddr(fmt.Sprintf("meta[%d].addr", i), m.Addr, true)
	}
	for i, s := range c.Store {
		checkAddr(fmt.Sprintf("store[%d].addr", i), s.Addr, true)
	}
	for i, m := range c.Meta {
		checkAddr(fmt.Sprintf("meta[%d].metrics_addr", i), m.MetricsAddr, false)
	}
	for i, s := range c.Store {
		checkAddr(fmt.Sprintf("store[%d].metrics_addr", i), s.MetricsAddr, false)
		switch s.Backend {
		case BackendDisk:
		case BackendMem:
			if s.MemLimit <= 0 {
				v.addf(fmt.Sprintf("store[%d].mem_limit", i), "must be set above 0 for the mem backend (for example \"2GiB\")")
			}
		default:
			v.addf(fmt.Sprintf("store[%d].backend", i), "%q is not one of %s, %s", s.Backend, BackendDisk, BackendMem)
		}
		if s.MemLimit < 0 {
			v.addf(fmt.Sprintf("store[%d].mem_limit", i), "%d is negative", s.MemLimit)
		}
	}
}

// checkHostPort accepts host:port with a non-empty host and a port in
// 1..65535. Port 0 is refused: the file tells clients where to connect, so
// the port must be known in advance.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("not host:port")
	}
	if host == "" {
		return fmt.Errorf("host is empty")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not between 1 and 65535", port)
	}
	return nil
}
