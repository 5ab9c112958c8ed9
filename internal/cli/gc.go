package cli

// weft gc: find the chunks that no file owns on every store server and
// delete them.

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/fsck"
)

func newGCCommand(a *app) *cobra.Command {
	var (
		dryRun  bool
		grace   time.Duration
		timeout time.Duration
		release time.Duration
	)
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Delete the chunks that no file owns from every store server",
		Long: "List every chunk of every store server of the cluster file (--cluster or\n" +
			"$" + ClusterEnv + "), ask the meta servers which files own them, and delete the\n" +
			"chunks of inodes no meta server knows and the chunks past the end of their\n" +
			"file. The meta servers reclaim what unlinks and truncates free themselves\n" +
			"(their pending reclaims are listed, not touched); gc finds what nothing\n" +
			"else will. Chunks changed within --grace are left alone: a client may have\n" +
			"written them and not committed yet. With --dry-run nothing is deleted.\n\n" +
			"Exit status: 0 when done (or, with --dry-run, nothing to delete), 1 when\n" +
			"orphan chunks are left (--dry-run) or a deletion failed, 2 for bad usage,\n" +
			"3 for a bad cluster file, 4 when servers cannot be reached.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return usageErrorf(cmd, "--timeout %v: want a duration above 0", timeout)
			}
			if grace <= 0 {
				return usageErrorf(cmd, "--grace %v: want a duration above 0", grace)
			}
			cfg, c, err := a.connectMeta(cmd, timeout)
			if err != nil {
				return err
			}
			defer c.Close()
			r, err := fsck.GC(cmd.Context(), c, fsck.GCOptions{
				Grace: grace, DryRun: dryRun, ChunkSize: int64(cfg.ChunkSize), ReleaseHeld: release,
				Log: a.cliLogger(cmd.ErrOrStderr()),
			})
			if err != nil {
				return err
			}
			printGC(cmd.OutOrStdout(), r, dryRun, grace)
			switch {
			case len(r.Errors) > 0:
				return errs.New(errs.IO, "gc", "%d deletions failed", len(r.Errors))
			case dryRun && r.Orphans > 0:
				return errs.New(errs.Corrupt, "gc", "%d orphan chunks (dry run)", r.Orphans)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&dryRun, "dry-run", false, "find orphan chunks, delete nothing")
	fl.DurationVar(&grace, "grace", fsck.DefaultGCGrace, "leave chunks changed more recently than this alone")
	fl.DurationVar(&timeout, "timeout", 15*time.Second, "how long to wait for each call to a server")
	fl.DurationVar(&release, "release-held", 0, "release reclaims held for open-unlinked files longer than this (their client died)")
	return cmd
}

func printGC(w io.Writer, r *fsck.GCReport, dryRun bool, grace time.Duration) {
	fmt.Fprintf(w, "stores: %d, chunks: %d (%d bytes)\n", r.Stores, r.Chunks, r.Bytes)
	fmt.Fprintf(w, "orphan chunks: %d (%d bytes)", r.Orphans, r.OrphanB)
	switch {
	case dryRun:
		fmt.Fprintln(w, ", dry run: none deleted")
	default:
		fmt.Fprintf(w, ", deleted: %d\n", r.Reclaimed)
	}
	if r.Young > 0 {
		fmt.Fprintf(w, "left alone: %d orphan-looking chunks changed within the last %v\n", r.Young, grace)
	}
	fmt.Fprintf(w, "pending reclaims on the meta servers: %d (held by open files: %d, released now: %d)\n", r.PendingReclaims, r.HeldReclaims, r.Released)
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
}
