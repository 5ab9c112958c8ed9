package cli

// This file holds weft mount, weft umount and the mount half of weft up:
// serving a FUSE mount in the foreground until a signal or an external
// umount, and -d/--background, which runs the same command detached and
// returns once the mount answers.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/fusefs"
)

// mountFlags are the flags of weft mount that weft up shares.
type mountFlags struct {
	background      bool
	logFile         string
	allowOther      bool
	entryTimeout    time.Duration
	attrTimeout     time.Duration
	negativeTimeout time.Duration
	debug           bool
	durability      string // weft mount only: sync, writeback or create-at-close
	pprof           string // weft mount only: loopback address of the Go profiles
}

func (f *mountFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVarP(&f.background, "background", "d", false, "run in the background; return once the mount answers")
	fl.StringVar(&f.logFile, "log-file", "", "where a background process writes its log (default: a file in the temp directory, printed)")
	fl.BoolVar(&f.allowOther, "allow-other", os.Geteuid() == 0, "let other users use the mount (as root: default on)")
	fl.DurationVar(&f.entryTimeout, "entry-timeout", time.Second, "how long the kernel caches names")
	fl.DurationVar(&f.attrTimeout, "attr-timeout", time.Second, "how long the kernel caches attributes")
	fl.DurationVar(&f.negativeTimeout, "negative-timeout", 0, "how long the kernel remembers that a name does not exist")
	fl.BoolVar(&f.debug, "fuse-debug", false, "log every FUSE request and reply (very verbose)")
}

func (f *mountFlags) options(c *client.Client, log *slog.Logger, fsName string) fusefs.Options {
	neg := func(d time.Duration) time.Duration {
		if d == 0 {
			return -1 // fusefs: negative means "none", 0 means "default"
		}
		return d
	}
	return fusefs.Options{
		Client:          c,
		Logger:          log,
		FsName:          fsName,
		AllowOther:      f.allowOther,
		EntryTimeout:    neg(f.entryTimeout),
		AttrTimeout:     neg(f.attrTimeout),
		NegativeTimeout: neg(f.negativeTimeout),
		Debug:           f.debug,
	}
}

func newMountCommand(a *app) *cobra.Command {
	var f mountFlags
	cmd := &cobra.Command{
		Use:   "mount MOUNTPOINT",
		Short: "Mount the cluster as a POSIX file system (FUSE)",
		Long: "Mount the cluster named by --cluster (or $" + ClusterEnv + ") on MOUNTPOINT and\n" +
			"serve it until Ctrl-C, SIGTERM or 'weft umount MOUNTPOINT'. With -d it runs in\n" +
			"the background and returns once the mount answers.\n\n" +
			"Programs on the mount act as themselves: the metadata server checks their\n" +
			"uid, gid and groups. Changes are visible to other mounts when the file is\n" +
			"closed and opened again (close-to-open); docs/fuse.md has the details.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runMount(cmd, args[0], f)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&f.pprof, "pprof", "", "serve the mount daemon's Go profiles (net/http/pprof, /debug/pprof/) at this loopback address, e.g. 127.0.0.1:6060")
	cmd.Flags().StringVar(&f.durability, "durability", "", "metadata changes: sync (acknowledged once on disk), writeback (complete in the mount under directory write leases, durable at fsync or within 1s) or create-at-close (sync, but a new file's create waits for its close, which sends it with the content in one request; docs/fuse.md); default: the cluster file's mount_durability, else sync")
	return cmd
}

func newUmountCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "umount MOUNTPOINT",
		Short: "Unmount a weft mount, also one whose process died",
		Long: "Unmount MOUNTPOINT with fusermount3 -u (or umount as root). If the mount is\n" +
			"busy, or its weft process was killed, it is detached lazily: it disappears\n" +
			"now and the kernel lets go of it when the last file in it is closed.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := fusefs.Unmount(args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "weft: unmounted %s\n", args[0])
			return nil
		},
	}
}

func (a *app) runMount(cmd *cobra.Command, mnt string, f mountFlags) error {
	cfg, err := a.loadCluster("")
	if err != nil {
		return err
	}
	mnt, err = filepath.Abs(mnt)
	if err != nil {
		return usageError(cmd, err)
	}
	if err := a.prepareMountPoint(cmd, mnt); err != nil {
		return err
	}
	if f.durability == "" {
		f.durability = cfg.MountDurability
	}
	if err := checkChoice(cmd, "durability", f.durability, config.DurabilitySync, config.DurabilityWriteback, config.DurabilityCreateAtClose); err != nil {
		return err
	}
	if f.pprof != "" {
		if err := checkPprofAddr(f.pprof); err != nil {
			return usageError(cmd, err)
		}
	}
	if f.background {
		return daemonize(cmd, f.logFile, mnt, mountReady(mnt), func(w io.Writer) {
			fmt.Fprintf(w, "Unmount it with: %s umount %s\n", a.self, shellQuote(mnt))
		})
	}
	if err := probeMeta(cmd.Context(), cfg); err != nil {
		return err
	}
	log := a.cliLogger(cmd.ErrOrStderr())
	if f.pprof != "" {
		bound, stop, err := servePprof(f.pprof, log)
		if err != nil {
			return err
		}
		defer stop()
		log.Info("serving Go profiles", "addr", "http://"+bound.String()+"/debug/pprof/")
	}
	cc := cluster.ClientConfig(cfg, core.Root, log)
	cc.WriteBack = f.durability == config.DurabilityWriteback
	cc.CreateAtClose = f.durability == config.DurabilityCreateAtClose
	c, err := client.New(cc)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := checkReachable(cmd.Context(), c); err != nil {
		return err
	}
	fsName := "weft"
	if p, err := filepath.Abs(a.clusterPath); err == nil && a.clusterPath != "" {
		fsName = "weft:" + p
	}
	return a.serveMount(cmd, f.options(c, log, fsName), mnt, log)
}

// checkReachable fails early, with a clear error, when the cluster does not
// answer: a mount of an unreachable cluster would hang its first user.
func checkReachable(ctx context.Context, c *client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.GetAttr(ctx, client.Ref{Ino: core.RootIno}); err != nil {
		kind := errs.KindOf(err)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			kind = errs.Timeout // this wait ran out, not the user's patience (exit code 4, not 130)
		}
		return errs.Wrap(kind, "mount", "", fmt.Errorf("the cluster does not answer: %w", err))
	}
	return nil
}

// serveMount mounts and serves until the command's context ends (a signal)
// or someone unmounts the file system. A mount still in use when the signal
// comes is detached lazily and served until its last file is closed; a
// second signal stops at once (the default action of cmd/weft).
func (a *app) serveMount(cmd *cobra.Command, opts fusefs.Options, mnt string, log *slog.Logger) error {
	m, err := fusefs.New(mnt, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "weft: mounted at %s (Ctrl-C or '%s umount %s' to stop)\n", mnt, a.self, shellQuote(mnt))
	done := make(chan struct{})
	go func() {
		m.Wait()
		close(done)
	}()
	select {
	case <-done:
		fmt.Fprintf(cmd.OutOrStdout(), "weft: %s was unmounted\n", mnt)
		return nil
	case <-cmd.Context().Done():
	}
	if err := m.Unmount(false); err != nil {
		log.Warn("mount point busy: detaching it; serving open files until they are closed (Ctrl-C again to stop now)", "mountpoint", mnt)
		if err := m.Unmount(true); err != nil {
			return err
		}
	}
	<-done
	fmt.Fprintf(cmd.OutOrStdout(), "weft: unmounted %s\n", mnt)
	return nil
}

// mountReady is the readiness check of a background mount: the mount table
// has a weft mount on mnt and it answers a stat.
func mountReady(mnt string) func() bool {
	return func() bool {
		var st syscall.Stat_t
		return fusefs.Mounted(mnt) && syscall.Stat(mnt, &st) == nil && !fusefs.Stale(mnt)
	}
}

// daemonize runs this command again without -d, detached (new session,
// output to a log file), and returns once ready reports true, or with the
// child's log when it exits first. Once ready, it prints where things are,
// then what hints adds.
func daemonize(cmd *cobra.Command, logFile, mnt string, ready func() bool, hints func(io.Writer)) error {
	const op = "background"
	exe, err := os.Executable()
	if err != nil {
		return errs.Wrap(errs.Other, op, "", err)
	}
	if logFile == "" {
		logFile = defaultLogFile(mnt)
	}
	logw, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return errs.Wrap(errs.IO, op, logFile, err)
	}
	defer logw.Close()
	child := exec.Command(exe, foregroundArgs(os.Args[1:])...)
	child.Stdout, child.Stderr = logw, logw
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // no terminal signals
	if err := child.Start(); err != nil {
		return errs.Wrap(errs.Other, op, exe, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case err := <-exited:
			return errs.New(errs.Other, op, "weft exited before the mount was ready (%v); its log %s says:\n%s", err, logFile, logTail(logFile))
		case <-cmd.Context().Done():
			_ = child.Process.Signal(syscall.SIGTERM)
			return errs.New(errs.Canceled, op, "interrupted while waiting for the mount")
		case <-timeout:
			_ = child.Process.Kill()
			return errs.New(errs.Timeout, op, "the mount was not ready after 60s; its log %s says:\n%s", logFile, logTail(logFile))
		case <-tick.C:
			if ready() {
				where := ""
				if mnt != "" {
					where = ", mounted at " + mnt
				}
				fmt.Fprintf(cmd.OutOrStdout(), "weft: running in the background (pid %d)%s, log %s\n", child.Process.Pid, where, logFile)
				hints(cmd.OutOrStdout())
				return nil
			}
		}
	}
}

// foregroundArgs drops -d/--background from a command line.
func foregroundArgs(args []string) []string {
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		switch {
		case a == "-d", a == "--background", strings.HasPrefix(a, "--background="), strings.HasPrefix(a, "-d="):
			continue
		}
		out = append(out, a)
	}
	return out
}

// defaultLogFile names the log of a background mount: one per mount point
// and user, in the temp directory.
func defaultLogFile(mnt string) string {
	h := fnv.New32a()
	io.WriteString(h, mnt)
	return filepath.Join(os.TempDir(), fmt.Sprintf("weft-%d-%08x.log", os.Getuid(), h.Sum32()))
}

// logTail returns the last lines of a log file, for an error message.
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(bytes.TrimSpace(data))
}

// mountOnUp mounts an embedded cluster for weft up --mount. The mount's
// client calls the servers in this process directly, without TCP, except
// in writeback and create-at-close modes: their leases need a connection
// to be recalled over.
func (a *app) mountOnUp(cmd *cobra.Command, e *cluster.Embedded, mnt string, f mountFlags, log *slog.Logger) error {
	cc := cluster.ClientConfig(e.Config(), core.Root, log)
	switch f.durability {
	case config.DurabilityWriteback:
		cc.WriteBack = true
	case config.DurabilityCreateAtClose:
		cc.CreateAtClose = true
	default:
		cc.Local = e.Local()
	}
	c, err := client.New(cc)
	if err != nil {
		return err
	}
	defer c.Close()
	err = a.serveMount(cmd, f.options(c, log, "weft:"+e.ClusterFile()), mnt, log)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
