package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
)

// newCACommand is weft ca: the cluster CA and the identities it issues.
func newCACommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Manage the cluster CA and issue identities",
		Long: "The cluster CA signs the certificates servers, clients and administrators\n" +
			"connect with (security = \"secure\" or \"private\" in the cluster file).\n" +
			"weft up and weft cluster start create it and every identity themselves.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	for _, sub := range []*cobra.Command{newCAInitCommand(a), newCAIssueCommand(a), newCARotateCommand(a)} {
		sub.Flags().StringVar(&a.clusterPath, "cluster", os.Getenv(ClusterEnv), clusterFlagUsage)
		cmd.AddCommand(sub)
	}
	return cmd
}

// caDir is --ca, or the cluster file's ca when --cluster names one.
func (a *app) caDir(cmd *cobra.Command, flag string) (string, *config.Cluster, error) {
	var cfg *config.Cluster
	if a.clusterPath != "" {
		// As written: --identity names no CA identity to replace.
		c, err := a.loadClusterFile("")
		if err != nil {
			return "", nil, err
		}
		cfg = c
	}
	if flag != "" {
		return flag, cfg, nil
	}
	if cfg != nil && cfg.CA != "" {
		return cfg.CA, cfg, nil
	}
	return "", nil, usageErrorf(cmd, "no CA directory: pass --ca DIR, or --cluster FILE whose file names ca")
}

func newCAInitCommand(a *app) *cobra.Command {
	var dir, name string
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create a cluster CA",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, _, err := a.caDir(cmd, dir)
			if err != nil {
				return err
			}
			if _, err := auth.InitCA(d, name, time.Now()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created the cluster CA in %s (keep %s private)\n", d, auth.CAKeyFile)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "ca", "", "directory to create the CA in (default: the cluster file's ca)")
	cmd.Flags().StringVar(&name, "name", config.DefaultName, "cluster name written into the CA certificate")
	return cmd
}

func newCAIssueCommand(a *app) *cobra.Command {
	var dir, role, uid, uids, gids, out string
	var root bool
	var hosts []string
	cmd := &cobra.Command{
		Use:   "issue --role meta|store|edge|client|admin [--uid N | --uids A-B] [--root] --out DIR",
		Short: "Issue an identity signed by the cluster CA",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := identityFromFlags(cmd, role, uid, uids, gids, root)
			if err != nil {
				return err
			}
			if out == "" {
				return usageErrorf(cmd, "--out DIR is required")
			}
			d, _, err := a.caDir(cmd, dir)
			if err != nil {
				return err
			}
			ca, err := auth.LoadCA(d)
			if err != nil {
				return err
			}
			b, err := ca.Issue(id, hosts, time.Now())
			if err != nil {
				return err
			}
			if err := b.Write(out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "issued %s in %s\n", id, out)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "ca", "", "CA directory (default: the cluster file's ca)")
	fl.StringVar(&role, "role", "", "meta, store, edge, client or admin")
	fl.StringVar(&uid, "uid", "", "client: the one uid it may act as")
	fl.StringVar(&uids, "uids", "", "client: the range of uids A-B it may act as")
	fl.StringVar(&gids, "gids", "", "client: the range of gids A-B it may act as (default: the uids')")
	fl.BoolVar(&root, "root", false, "client: may act as any uid and gid, root included")
	fl.StringSliceVar(&hosts, "host", nil, "server: another address or DNS name clients reach it by (127.0.0.1 and localhost are always in)")
	fl.StringVar(&out, "out", "", "directory to write the identity to")
	return cmd
}

// identityFromFlags builds the identity weft ca issue names.
func identityFromFlags(cmd *cobra.Command, role, uid, uids, gids string, root bool) (auth.Identity, error) {
	id := auth.Identity{Role: auth.Role(role), Root: root}
	if !id.Role.Valid() {
		return id, usageErrorf(cmd, "--role %q: want meta, store, edge, client or admin", role)
	}
	if id.Role != auth.RoleClient {
		if uid != "" || uids != "" || gids != "" || root {
			return id, usageErrorf(cmd, "--uid, --uids, --gids and --root are for --role client")
		}
		return id, nil
	}
	n := 0
	for _, set := range []bool{uid != "", uids != "", root} {
		if set {
			n++
		}
	}
	if n != 1 {
		return id, usageErrorf(cmd, "a client identity takes exactly one of --uid N, --uids A-B and --root")
	}
	if root {
		if gids != "" {
			return id, usageErrorf(cmd, "--root takes no --gids")
		}
		return id, nil
	}
	r, err := auth.ParseRange(uid + uids)
	if err != nil {
		return id, usageErrorf(cmd, "%v", err)
	}
	id.UIDs, id.GIDs = r, r
	if gids != "" {
		if id.GIDs, err = auth.ParseRange(gids); err != nil {
			return id, usageErrorf(cmd, "%v", err)
		}
	}
	return id, nil
}

func newCARotateCommand(a *app) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "rotate",
		Short: "Replace the cluster CA, trusting the previous one through the transition",
		Long: "rotate creates a new CA in the CA directory. Its trust bundle holds the new\n" +
			"and the previous CA, and the new CA is cross-signed by the previous one, so\n" +
			"old and new identities keep accepting each other. With --cluster it also\n" +
			"re-issues the identities the cluster file names (every server's and the\n" +
			"admin's); restart the servers to use them. Identities issued by hand\n" +
			"(weft ca issue) keep working until the next rotation: re-issue them before.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, cfg, err := a.caDir(cmd, dir)
			if err != nil {
				return err
			}
			name := config.DefaultName
			if cfg != nil {
				name = cfg.Name
			}
			ca, err := auth.RotateCA(d, name, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rotated the cluster CA in %s\n", d)
			if cfg == nil {
				return nil
			}
			if err := cluster.IssueIdentities(cfg, ca); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "re-issued the servers' and the admin's identities; restart the servers to use them")
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "ca", "", "CA directory (default: the cluster file's ca)")
	return cmd
}
