package cluster

import (
	"log/slog"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
)

// ClientConfig is the client library's view of a cluster file: where the
// servers are and how data is laid out, with creds as the default
// credentials and, in a secured cluster, the admin identity to connect with.
func ClientConfig(cfg *config.Cluster, creds core.Creds, log *slog.Logger) client.Config {
	cc := client.Config{
		ChunkSize:   int64(cfg.ChunkSize),
		Replication: cfg.Replication,
		Erasure:     cfg.Erasure(),
		InlineLimit: cfg.InlineLimit,
		SyncOnClose: cfg.Durability == config.DurabilitySync,
		Creds:       creds,
		Logger:      log,
	}
	cc.LeaseTerm, _ = cfg.Lease()
	if cfg.Secured() {
		// The cluster's administrator, unless the caller names another
		// identity (weft --identity).
		cc.Identity = cfg.AdminIdentity
		cc.Dial.IntegrityOnly = cfg.SecurityMode() == config.SecuritySecure
		cc.Dial.RecordsOnLoopback = cfg.RecordsOnLoopback
	}
	if cc.InlineLimit == 0 {
		cc.InlineLimit = -1 // the file turns inlining off; the library's 0 means default
	}
	for _, m := range cfg.Meta {
		cc.MetaAddrs = append(cc.MetaAddrs, m.Addr)
	}
	for _, s := range cfg.Store {
		cc.StoreAddrs = append(cc.StoreAddrs, s.Addr)
	}
	return cc
}
