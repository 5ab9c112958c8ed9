package cli

// weft down: stop the weft up that serves a data directory (one that runs
// in the background after weft up -d), by the pid it recorded there.

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/fusefs"
)

func newDownCommand(a *app) *cobra.Command {
	var (
		data    string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "down [--data DIR]",
		Short: "Stop the weft up (also one started with -d) that serves DIR",
		Long: "Stop the weft up process that serves --data DIR, found by the pid it\n" +
			"recorded in DIR/" + cluster.UpRecordName + " (only if it is still that process): SIGTERM,\n" +
			"and SIGKILL if it has not stopped after --timeout (a mount with open files\n" +
			"keeps it running until they are closed). Its mount is unmounted, also one\n" +
			"left behind by a killed process. Stopping a stopped weft up succeeds.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return usageErrorf(cmd, "--timeout %v: want a duration above 0", timeout)
			}
			dir, err := filepath.Abs(data)
			if err != nil {
				return usageError(cmd, err)
			}
			return runDown(cmd.Context(), cmd.OutOrStdout(), dir, timeout)
		},
	}
	cmd.Flags().StringVar(&data, "data", defaultDataDir(), "the data directory given to weft up")
	cmd.Flags().DurationVar(&timeout, "timeout", 20*time.Second, "how long to wait after SIGTERM before SIGKILL")
	return cmd
}

func runDown(ctx context.Context, w io.Writer, dir string, timeout time.Duration) error {
	const op = "down"
	rec, err := cluster.ReadUpRecord(dir)
	if errs.Is(err, errs.NotExist) {
		fmt.Fprintf(w, "weft: no weft up is running in %s\n", dir)
		return nil
	}
	if err != nil {
		return err
	}
	if !rec.Alive() {
		fmt.Fprintf(w, "weft: the weft up of %s (pid %d) was not running\n", dir, rec.Pid)
		return finishDown(w, dir, rec)
	}
	if err := syscall.Kill(rec.Pid, syscall.SIGTERM); err != nil {
		return errs.Wrap(errs.Other, op, dir, fmt.Errorf("signal pid %d: %w", rec.Pid, err))
	}
	if err := waitGone(ctx, rec, timeout); err != nil {
		if !errs.Is(err, errs.Timeout) {
			return err
		}
		fmt.Fprintf(w, "weft: pid %d did not stop within %v (a file open on its mount?); killing it\n", rec.Pid, timeout)
		if rec.Alive() {
			_ = syscall.Kill(rec.Pid, syscall.SIGKILL)
		}
		if err := waitGone(ctx, rec, 5*time.Second); err != nil {
			return errs.Wrap(errs.KindOf(err), op, dir, fmt.Errorf("pid %d survived SIGKILL: %w", rec.Pid, err))
		}
	}
	fmt.Fprintf(w, "weft: stopped the weft up of %s (pid %d)\n", dir, rec.Pid)
	return finishDown(w, dir, rec)
}

// finishDown unmounts what the stopped process left mounted and removes its
// record.
func finishDown(w io.Writer, dir string, rec *cluster.UpRecord) error {
	if rec.Mount != "" && fusefs.Mounted(rec.Mount) {
		if err := fusefs.Unmount(rec.Mount); err != nil {
			return err
		}
		fmt.Fprintf(w, "weft: unmounted %s\n", rec.Mount)
	}
	return cluster.RemoveUpRecord(dir)
}

// waitGone waits until the recorded process has exited, at most d.
func waitGone(ctx context.Context, rec *cluster.UpRecord, d time.Duration) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for rec.Alive() {
		select {
		case <-ctx.Done():
			return errs.Wrap(errs.Canceled, "down", "", ctx.Err())
		case <-deadline.C:
			return errs.New(errs.Timeout, "down", "pid %d still runs after %v", rec.Pid, d)
		case <-tick.C:
		}
	}
	return nil
}
