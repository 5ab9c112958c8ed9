package cli

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/edge"
)

func newEdgeCommand(a *app) *cobra.Command {
	var upstream, listen, out, metricsAddr, durability string
	var window time.Duration
	cmd := &cobra.Command{
		Use:   "edge --upstream FILE --out FILE [--listen HOST:PORT] [--durability sync|writeback] [--identity DIR] [--metrics-addr HOST:PORT]",
		Short: "Run an edge metadata server in front of a remote cluster",
		Long: "Run an edge metadata server: a remote site's clients use it as their meta servers,\n" +
			"and it caches the upstream cluster's metadata under read leases, so that they pay\n" +
			"the wide-area round trip only on a miss or a change. It listens once per upstream\n" +
			"meta server (port, port+1, ...; port 0: free ports) and writes --out, the cluster\n" +
			"file the site's clients and mounts use: its listeners as the meta servers, the\n" +
			"upstream's stores as the stores (data moves directly). It runs until Ctrl-C or SIGTERM.\n\n" +
			"On a secured cluster (security secure or private) the edge needs an identity of its own,\n" +
			"issued with weft ca issue --role edge: it connects upstream with it and serves its clients\n" +
			"with it, requiring their certificates of the same CA and limiting each request's uid and\n" +
			"gids to what the client's certificate allows, as a meta server does.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if upstream == "" || out == "" {
				return usageErrorf(cmd, "--upstream and --out are required")
			}
			if durability != "sync" && durability != "writeback" {
				return usageErrorf(cmd, "--durability must be sync or writeback, not %q", durability)
			}
			cfg, err := a.loadClusterFile(upstream)
			if err != nil {
				return err
			}
			srv, err := edge.Start(cmd.Context(), edge.Config{
				Upstream: cfg,
				Listen:   listen,
				Log:      a.serverLogger(cmd.ErrOrStderr()),
				// Delegated write leases, cache hits (docs/cli.md).
				MetricsAddr: metricsAddr,
				// The edge's own write-back of setattrs (docs/cli.md).
				WriteBack:       durability == "writeback",
				WriteBackWindow: window,

				IdentityDir: a.identity,
			})
			if err != nil {
				return err
			}
			if err := srv.Cluster().Write(out); err != nil {
				srv.Close()
				return err
			}
			<-cmd.Context().Done()
			return srv.Close()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&upstream, "upstream", "", "the upstream (authoritative) cluster file")
	fl.StringVar(&listen, "listen", "127.0.0.1:0", "host:port of the listener for upstream meta server 0; server i listens on port+i")
	fl.StringVar(&metricsAddr, "metrics-addr", "", "serve the edge's Prometheus metrics at host:port/metrics")
	fl.StringVar(&durability, "durability", "sync", "sync: every change is durable upstream before the edge answers; writeback: the edge completes chmod and utimes of files under write leases it holds upstream and sends them within --writeback-window, at fsync or at a recall")
	fl.DurationVar(&window, "writeback-window", edge.DefaultWriteBackWindow, "with --durability writeback, how long a change may wait at the edge at most")
	fl.StringVar(&out, "out", "", "where to write the edge's cluster file (for the site's clients)")
	fl.StringVar(&a.identity, "identity", os.Getenv(IdentityEnv), "the edge's own identity directory (weft ca issue --role edge), needed on a secured cluster (default $"+IdentityEnv+")")
	return cmd
}
