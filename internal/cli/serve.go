package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
)

// serveFlags are the flags weft meta and weft store share.
type serveFlags struct {
	config      string
	id          int
	data        string
	metricsAddr string
}

type startFunc func(ctx context.Context, cfg *config.Cluster, id int, opts cluster.Options) (*cluster.Server, error)

func newMetaCommand(a *app) *cobra.Command {
	return newServeCommand(a, "meta", "Run a metadata server of the cluster file", cluster.StartMeta)
}

func newStoreCommand(a *app) *cobra.Command {
	return newServeCommand(a, "store", "Run a storage server of the cluster file", cluster.StartStore)
}

func newServeCommand(a *app, role, short string, start startFunc) *cobra.Command {
	f := serveFlags{id: -1}
	cmd := &cobra.Command{
		Use:   role + " --config FILE --id N",
		Short: short,
		Long: short + ".\n\n" +
			"The server is entry N of the cluster file's [[" + role + "]] list: it listens on\n" +
			"that entry's addr and keeps its data in its dir (or --data). It runs until\n" +
			"Ctrl-C or SIGTERM, then finishes the requests in flight and stops.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.id < 0 {
				return usageErrorf(cmd, "--id is required: the index of this server in the cluster file's [[%s]] list", role)
			}
			cfg, err := a.loadCluster(f.config)
			if err != nil {
				return err
			}
			srv, err := start(cmd.Context(), cfg, f.id, cluster.Options{
				Logger:      a.serverLogger(cmd.ErrOrStderr()),
				Dir:         f.data,
				MetricsAddr: f.metricsAddr,
			})
			if err != nil {
				return asStorageError(err)
			}
			<-cmd.Context().Done()
			return srv.Close()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "cluster file (default: --cluster or $"+ClusterEnv+")")
	fl.IntVar(&f.id, "id", -1, fmt.Sprintf("index of this server in the cluster file's [[%s]] list", role))
	fl.StringVar(&f.data, "data", "", "data directory (overrides the entry's dir)")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at host:port/metrics (overrides the entry's metrics_addr)")
	return cmd
}
