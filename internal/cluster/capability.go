package cluster

import (
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/config"
)

// CapabilitySecretName is the capability secret's file in the directory of
// a cluster that weft up or weft cluster start made.
const CapabilitySecretName = "capability.key"

// ensureCapabilitySecret creates cfg's capability secret if the cluster has
// one configured and the file is missing.
func ensureCapabilitySecret(cfg *config.Cluster) error {
	if cfg.CapabilitySecret == "" {
		return nil
	}
	return auth.CreateSecret(cfg.CapabilitySecret)
}

// capabilityKeys returns the keys of cfg's capability secret, or nil when
// the cluster has none (capabilities off).
func capabilityKeys(cfg *config.Cluster) (*auth.Keyring, error) {
	if cfg.CapabilitySecret == "" {
		return nil, nil
	}
	secret, err := auth.LoadSecret(cfg.CapabilitySecret)
	if err != nil {
		return nil, err
	}
	return auth.NewKeyring(secret)
}

// metaMinter is meta server id's minter, nil with capabilities off.
func metaMinter(cfg *config.Cluster, id int, now func() time.Time) (*auth.Minter, error) {
	keys, err := capabilityKeys(cfg)
	if keys == nil || err != nil {
		return nil, err
	}
	return auth.NewMinter(keys, uint32(id), 0, now)
}

// storeCapabilities returns store id's verifier and the capability source
// of its repair pass; nils with capabilities off.
func storeCapabilities(cfg *config.Cluster, id int, now func() time.Time) (*auth.Verifier, func(uint64) []byte, error) {
	keys, err := capabilityKeys(cfg)
	if keys == nil || err != nil {
		return nil, nil, err
	}
	m, err := auth.NewMinter(keys, auth.StoreKeyBase+uint32(id), 0, now)
	if err != nil {
		return nil, nil, err
	}
	repair := func(ino uint64) []byte { return m.Service(ino, auth.Read|auth.Write) }
	return auth.NewVerifier(keys, 0, now), repair, nil
}

// AdminCapability is the capability source of the admin tools that call
// stores directly (weft repair and status; fsck and gc mint their own):
// capabilities with rights minted with the admin key from the cluster
// secret. Nil when the cluster has no secret or it cannot be read here (a
// user who is not the cluster's owner): the stores then refuse the calls,
// and the tools report the refusals.
func AdminCapability(cfg *config.Cluster, rights auth.Rights) func(ino uint64) []byte {
	m, _, err := auth.LoadMinter(cfg.CapabilitySecret, auth.AdminKeyID)
	if err != nil || m == nil {
		return nil
	}
	return func(ino uint64) []byte { return m.Service(ino, rights) }
}
