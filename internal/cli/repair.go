package cli

// weft repair: restore every chunk to its R replicas (internal/repair).

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/repair"
	"github.com/weftfs/weft/internal/rpc"
)

func newRepairCommand(a *app) *cobra.Command {
	var (
		dryRun, verify bool
		rate           string
		timeout        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Copy chunks back to the stores that should hold them (missing, stale or bad copies)",
		Long: "List every store's chunks and copy each chunk's newest version to each of\n" +
			"its R placed stores that lacks it, holds an older version (it missed writes\n" +
			"while down) or, with --verify, holds a copy that fails its checksums. A\n" +
			"write racing a copy wins; the copy is left to the next pass. Each store also\n" +
			"repairs its own copies in the background (docs/design.md, \"Repair\").\n\n" +
			"Exit status: 0 when every chunk is on its replicas, 1 when copies are left\n" +
			"to make (a store was unreachable, a copy failed or raced a write: run\n" +
			"again), 2 for bad usage, 3 for a bad cluster file.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rateBytes, err := config.ParseByteSize(rate)
			if err != nil || rateBytes < 0 {
				return usageErrorf(cmd, "--rate %q: want a size per second such as 100MiB, 0 for no limit", rate)
			}
			cfg, err := a.loadCluster("")
			if err != nil {
				return err
			}
			dial, err := cluster.DialOptions(cfg, "")
			if err != nil {
				return err
			}
			stores, closeStores := storePeers(cfg, dial)
			defer closeStores()
			r, err := repair.Run(cmd.Context(), repair.Config{
				Stores: stores, Replication: cfg.Replication, Erasure: cfg.Erasure(), Only: -1,
				DryRun: dryRun, Verify: verify, RateBytes: int64(rateBytes), CallTimeout: timeout,
				Logger:     a.cliLogger(cmd.ErrOrStderr()),
				Capability: cluster.AdminCapability(cfg, auth.Read|auth.Write),
			})
			if err != nil {
				return err
			}
			printRepair(cmd.OutOrStdout(), r, dryRun)
			if r.Unrecoverable > 0 {
				return errs.New(errs.IO, "repair", "%d chunks lost", r.Unrecoverable)
			}
			if dryRun && r.UnderReplicated > 0 || !dryRun && !r.Clean() {
				return errs.New(errs.IO, "repair", "copies left to make")
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&dryRun, "dry-run", false, "report what is missing, copy nothing")
	fl.BoolVar(&verify, "verify", false, "read every copy, so copies failing their checksums are rewritten too")
	fl.StringVar(&rate, "rate", "0", "bytes copied per second at most (0: no limit)")
	fl.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for each call to a store")
	return cmd
}

// storePeers connects to every store of cfg, in its order (repair and
// status's replica count list them all); done closes them.
func storePeers(cfg *config.Cluster, dial rpc.DialOptions) (stores []repair.Store, done func()) {
	peers := make([]*rpc.Peer, len(cfg.Store))
	stores = make([]repair.Store, len(cfg.Store))
	for i, s := range cfg.Store {
		peers[i] = rpc.NewPeer(s.Addr, dial)
		stores[i] = peers[i]
	}
	return stores, func() {
		for _, p := range peers {
			p.Close()
		}
	}
}

func printRepair(w io.Writer, r *repair.Report, dryRun bool) {
	fmt.Fprintf(w, "chunks:           %d\n", r.Chunks)
	fmt.Fprintf(w, "under-replicated: %d (copies missing %d, stale %d, bad %d)\n", r.UnderReplicated, r.Missing, r.Stale, r.Bad)
	if r.Marked > 0 {
		fmt.Fprintf(w, "stale parity:     %d stripes marked by a client's parity cache (rewritten once older than %v)\n", r.Marked, repair.DefaultMarkGrace)
	}
	if !dryRun {
		fmt.Fprintf(w, "copied:           %d (%d bytes)\n", r.Copied, r.CopiedBytes)
		fmt.Fprintf(w, "left:             %d raced a write, %d failed\n", r.Raced, r.Failed)
	}
	if r.Unrecoverable > 0 {
		fmt.Fprintf(w, "LOST:             %d chunks have no readable copy left (reads of them fail with EIO):", len(r.Lost))
		for _, id := range r.Lost {
			fmt.Fprintf(w, " ino %d chunk %d;", id.GetIno(), id.GetIndex())
		}
		fmt.Fprintln(w)
	}
	if len(r.Unreachable) > 0 {
		fmt.Fprintf(w, "unreachable stores: %v (what they lack is unknown)\n", r.Unreachable)
	}
}
