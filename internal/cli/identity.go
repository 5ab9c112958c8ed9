package cli

import (
	"path/filepath"

	"github.com/weftfs/weft/internal/config"
)

// IdentityEnv is the environment variable that names the identity
// directory when --identity is not given.
const IdentityEnv = "WEFT_IDENTITY"

const identityFlagUsage = "identity directory to connect with (weft ca issue; default $" + IdentityEnv +
	", else the cluster file's admin_identity)"

const securityFlagUsage = "a new cluster's security: secure (authenticated, integrity-checked), private (also encrypted) " +
	"or none (plaintext, no checks) (default secure; an existing cluster keeps its file's)"

// applyIdentity makes --identity the identity every connection of this
// command uses: it replaces the cluster's admin identity, which is what
// clients, fsck, gc, repair and status connect with.
func (a *app) applyIdentity(c *config.Cluster) {
	if a.identity == "" {
		return
	}
	dir, err := filepath.Abs(a.identity)
	if err != nil {
		dir = a.identity
	}
	c.AdminIdentity = dir
}
