package cli

import (
	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
)

// adminCapability is the capability source of the admin tools that call
// stores directly (weft repair, gc, fsck --repair, status): capabilities
// minted with the admin key from the cluster secret. Nil when the cluster
// has no secret, or when it cannot be read here (a user who is not the
// cluster's owner): the stores then refuse the calls, and the tools report
// the refusals.
func adminCapability(cfg *config.Cluster, rights auth.Rights) func(ino uint64) []byte {
	m, _, err := auth.LoadMinter(cfg.CapabilitySecret, auth.AdminKeyID)
	if err != nil || m == nil {
		return nil
	}
	return func(ino uint64) []byte { return m.Service(ino, rights) }
}

// adminDeleteCapability is adminCapability for fsck's deletions.
func adminDeleteCapability(cfg *config.Cluster) func(core.Ino) []byte {
	f := adminCapability(cfg, auth.Delete)
	if f == nil {
		return nil
	}
	return func(ino core.Ino) []byte { return f(uint64(ino)) }
}
