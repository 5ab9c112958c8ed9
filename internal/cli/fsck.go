package cli

// weft fsck: check (and with --repair, repair) the namespace every meta
// server of the cluster holds.

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/fsck"
)

func newFsckCommand(a *app) *cobra.Command {
	var (
		repair  bool
		timeout time.Duration
		wait    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "fsck",
		Short: "Check the namespace on every meta server, and repair it with --repair",
		Long: "Read every key of every meta server of the cluster file (--cluster or\n" +
			"$" + ClusterEnv + ") and check that each directory entry is in the partition\n" +
			"and on the server its name's hash says, that no name is in two places, that\n" +
			"no entry points to a missing inode and no inode is left without a name, and\n" +
			"that directories' partitions and counts add up. The meta servers must all be\n" +
			"running (fsck then checks each suspicion again under their locks, so\n" +
			"operations running meanwhile are never reported) or all stopped (fsck opens\n" +
			"their stores). With --repair it fixes what it safely can and checks again.\n\n" +
			"Exit status: 0 when nothing is left to fix and no operation is unfinished,\n" +
			"1 when findings are left or operations are unfinished (run again later),\n" +
			"2 for bad usage, 3 for a bad cluster file, 4 when servers cannot be reached.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return usageErrorf(cmd, "--timeout %v: want a duration above 0", timeout)
			}
			if wait < 0 {
				return usageErrorf(cmd, "--wait %v: want a duration of 0 or more", wait)
			}
			cfg, c, err := a.connectMeta(cmd, timeout)
			if err != nil {
				return err
			}
			defer c.Close()
			if wait == 0 {
				wait = -1 // fsck.Options: 0 is the default, below 0 no wait
			}
			r, err := fsck.Check(cmd.Context(), c, fsck.Options{
				Repair: repair, Wait: wait, Log: a.cliLogger(cmd.ErrOrStderr()),
			})
			if err != nil {
				return err
			}
			printFsck(cmd.OutOrStdout(), a.clusterPath, cfg.Name, r)
			if err := fsckProblem(r); err != nil {
				return err
			}
			return fsckChunks(cmd, c, int64(cfg.ChunkSize))
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&repair, "repair", false, "repair what can be repaired safely")
	fl.DurationVar(&timeout, "timeout", 15*time.Second, "how long to wait for each call to a server")
	fl.DurationVar(&wait, "wait", fsck.DefaultWait, "on a running cluster, how long to let unfinished cross-server operations and splits finish")
	return cmd
}

// connectMeta loads the cluster file and connects to its meta servers (all
// running, or all stopped: their stores opened), as fsck and gc do.
func (a *app) connectMeta(cmd *cobra.Command, timeout time.Duration) (*config.Cluster, *fsck.Cluster, error) {
	cfg, err := a.loadCluster("")
	if err != nil {
		return nil, nil, err
	}
	c, err := fsck.Connect(cmd.Context(), cfg, timeout)
	if err != nil {
		return nil, nil, err
	}
	return cfg, c, nil
}

// fsckProblem is the error fsck exits with: findings left, or work
// unfinished.
func fsckProblem(r *fsck.Report) error {
	switch left := r.Unrepaired(); {
	case left > 0:
		return errs.New(errs.Corrupt, "fsck", "%d problems left", left)
	case len(r.Pending) > 0:
		return errs.New(errs.Busy, "fsck", "%d operations unfinished: run fsck again", len(r.Pending))
	}
	return nil
}

func printFsck(w io.Writer, file, name string, r *fsck.Report) {
	state := "stopped: read their stores"
	if r.Running {
		state = "running"
	}
	fmt.Fprintf(w, "fsck of cluster %s", name)
	if file != "" {
		fmt.Fprintf(w, " (%s)", file)
	}
	fmt.Fprintf(w, ": %d meta servers, %s\n", r.Servers, state)
	fmt.Fprintf(w, "scanned: %d directories, %d partitions, %d entries, %d inodes, %d extended attributes\n",
		r.Directories, r.Partitions, r.Entries, r.Inodes, r.Xattrs)
	if r.Suspicions > 0 {
		fmt.Fprintf(w, "checked again under locks: %d suspicions\n", r.Suspicions)
	}
	if r.Rounds > 1 {
		fmt.Fprintf(w, "passes: %d (checked again after repairing)\n", r.Rounds)
	}
	byKind := r.ByKind()
	if len(byKind) == 0 {
		fmt.Fprintln(w, "findings: none")
	} else {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tFOUND\tREPAIRED")
		for _, k := range fsck.Kinds {
			if c, ok := byKind[k]; ok {
				fmt.Fprintf(tw, "%s\t%d\t%d\n", k, c[0], c[1])
			}
		}
		tw.Flush()
		fmt.Fprintln(w)
		for _, f := range r.Findings {
			fmt.Fprintln(w, f)
		}
		for _, k := range fsck.Kinds {
			if n := r.Omitted[k]; n > 0 {
				fmt.Fprintf(w, "%s: %d more not listed\n", k, n)
			}
		}
	}
	if len(r.Pending) > 0 {
		fmt.Fprintf(w, "\nunfinished (not damage; their meta servers finish them, a stopped one when it starts):\n")
		for _, p := range r.Pending {
			fmt.Fprintf(w, "  %s\n", p)
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	switch left := r.Unrepaired(); {
	case left > 0:
		fmt.Fprintf(w, "\nresult: %d problems left\n", left)
	case len(r.Pending) > 0:
		fmt.Fprintf(w, "\nresult: no damage found; %d operations unfinished\n", len(r.Pending))
	case len(r.Findings) > 0:
		fmt.Fprintf(w, "\nresult: clean after repairing %d problems\n", len(r.Findings))
	default:
		fmt.Fprintln(w, "\nresult: clean")
	}
}

// fsckChunks reports the chunks no file owns (as weft gc --dry-run finds
// them) and the meta servers' pending reclaims. Orphan chunks are a
// problem (run weft gc); stores that cannot be listed only leave a note.
func fsckChunks(cmd *cobra.Command, c *fsck.Cluster, chunkSize int64) error {
	w := cmd.OutOrStdout()
	r, err := fsck.GC(cmd.Context(), c, fsck.GCOptions{DryRun: true, ChunkSize: chunkSize})
	if err != nil {
		fmt.Fprintf(w, "chunks: not checked: %v\n", err)
		return nil
	}
	fmt.Fprintf(w, "chunks: %d on %d stores; orphans older than %v: %d (%d bytes); pending reclaims: %d (held by open files: %d)\n",
		r.Chunks, r.Stores, fsck.DefaultGCGrace, r.Orphans, r.OrphanB, r.PendingReclaims, r.HeldReclaims)
	if r.Orphans > 0 {
		return errs.New(errs.Corrupt, "fsck", "%d chunks no file owns: run weft gc", r.Orphans)
	}
	return nil
}
