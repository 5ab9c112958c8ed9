package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
)

type upFlags struct {
	data        string
	durability  string
	backend     string
	memLimit    string
	metricsAddr string
	mount       string
	security    string
	mountFlags
}

func newUpCommand(a *app) *cobra.Command {
	var f upFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a single-machine cluster: one meta and one store server",
		Long: "Run one meta server and one store server in this process, with all data\n" +
			"under --data. The first start picks free loopback ports and writes\n" +
			"DATA/weft.toml; later starts reuse it, so clients keep working.\n" +
			"With --mount it also mounts the cluster there (see weft mount).\n" +
			"Stops cleanly on Ctrl-C or SIGTERM.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runUp(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.data, "data", defaultDataDir(), "directory for the cluster file and all data")
	fl.StringVar(&f.durability, "durability", "", "when metadata changes are acknowledged: sync or async (default: as before, else sync); writeback or create-at-close: sync servers and a --mount in that mode (docs/fuse.md)")
	fl.StringVar(&f.backend, "backend", "", "where the store keeps file data: disk or mem (default: as before, else disk)")
	fl.StringVar(&f.memLimit, "mem-limit", "", "bytes the mem backend may hold, such as 2GiB (default: as before, else 1GiB)")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at host:port/metrics")
	fl.StringVar(&f.mount, "mount", "", "also mount the cluster on this directory (FUSE)")
	fl.StringVar(&f.security, "security", "", securityFlagUsage)
	f.mountFlags.register(cmd)
	return cmd
}

func (a *app) runUp(cmd *cobra.Command, f upFlags) error {
	opts := cluster.EmbeddedOptions{
		Dir:         f.data,
		Durability:  f.durability,
		Backend:     f.backend,
		MetricsAddr: f.metricsAddr,
		Logger:      a.serverLogger(cmd.ErrOrStderr()),
		Security:    f.security,
	}
	if err := checkChoice(cmd, "security", f.security, config.SecurityNone, config.SecuritySecure, config.SecurityPrivate); err != nil {
		return err
	}
	if err := checkChoice(cmd, "durability", f.durability, config.DurabilitySync, config.DurabilityAsync,
		config.DurabilityWriteback, config.DurabilityCreateAtClose); err != nil {
		return err
	}
	if f.durability == config.DurabilityWriteback || f.durability == config.DurabilityCreateAtClose {
		// The servers stay sync; the mount's own mode does the rest.
		opts.Durability, f.mountFlags.durability = config.DurabilitySync, f.durability
	}
	if err := checkChoice(cmd, "backend", f.backend, config.BackendDisk, config.BackendMem); err != nil {
		return err
	}
	if f.memLimit != "" {
		n, err := config.ParseByteSize(f.memLimit)
		if err != nil || n <= 0 {
			return usageErrorf(cmd, "--mem-limit %q is not a size above 0, such as 512MiB or 2GiB", f.memLimit)
		}
		opts.MemLimit = int64(n)
	}

	if f.mount != "" {
		mnt, err := filepath.Abs(f.mount)
		if err != nil {
			return usageError(cmd, err)
		}
		if err := a.prepareMountPoint(cmd, mnt); err != nil {
			return err
		}
		f.mount = mnt
	}
	if f.background {
		data, err := filepath.Abs(f.data)
		if err != nil {
			return usageError(cmd, err)
		}
		if f.logFile == "" {
			// Beside the data it is about, one log per cluster.
			if err := os.MkdirAll(data, 0o755); err != nil {
				return errs.Wrap(errs.IO, "up", data, err)
			}
			f.logFile = filepath.Join(data, "up.log")
		}
		return daemonize(cmd, f.logFile, f.mount, upReady(f.logFile, f.mount), func(w io.Writer) {
			file := filepath.Join(data, cluster.ClusterFileName)
			fmt.Fprintf(w, "cluster file: %s\n\n", file)
			fmt.Fprintf(w, "    export %s=%s\n", ClusterEnv, shellQuote(file))
			fmt.Fprintf(w, "    %s ls /\n\n", a.self)
			fmt.Fprintf(w, "Stop it with: %s down --data %s\n", a.self, shellQuote(data))
		})
	}

	ctx := cmd.Context()
	e, err := cluster.StartEmbedded(ctx, opts)
	if err != nil {
		return asStorageError(err)
	}
	// weft down finds this process by the record (weft up -d detached it).
	removeRecord, err := cluster.WriteUpRecord(filepath.Dir(e.ClusterFile()), f.mount)
	if err != nil {
		return errors.Join(err, e.Close())
	}
	defer removeRecord()
	a.printUpBanner(cmd.OutOrStdout(), e)
	var mountErr error
	if f.mount != "" {
		// Until a signal; if someone unmounts it, the cluster keeps running.
		mountErr = a.mountOnUp(cmd, e, f.mount, f.mountFlags, opts.Logger)
	}
	<-ctx.Done()
	fmt.Fprintln(cmd.OutOrStdout(), "weft: stopping")
	return errors.Join(mountErr, e.Close())
}

// upReady is the readiness check of weft up -d: the servers are up (the
// banner is in the log) and, with --mount, the mount answers.
func upReady(logFile, mnt string) func() bool {
	if logFile == "" {
		logFile = defaultLogFile(mnt)
	}
	mounted := mountReady(mnt)
	return func() bool {
		data, err := os.ReadFile(logFile)
		return err == nil && bytes.Contains(data, []byte("weft is up:")) && (mnt == "" || mounted())
	}
}

func (a *app) printUpBanner(w io.Writer, e *cluster.Embedded) {
	cfg := e.Config()
	fmt.Fprintf(w, "weft is up: meta %s, store %s (%s backend, %s durability)\n",
		e.MetaAddr(), e.StoreAddr(), cfg.Store[0].Backend, cfg.Durability)
	if m := e.MetricsAddr(); m != "" {
		fmt.Fprintf(w, "metrics:      http://%s/metrics\n", m)
	}
	fmt.Fprintf(w, "cluster file: %s\n\n", e.ClusterFile())
	fmt.Fprintf(w, "Use it from another shell:\n\n")
	fmt.Fprintf(w, "    export %s=%s\n", ClusterEnv, shellQuote(e.ClusterFile()))
	fmt.Fprintf(w, "    %s put ./some-file /some-file\n", a.self)
	fmt.Fprintf(w, "    %s ls /\n", a.self)
	fmt.Fprintf(w, "    %s get /some-file ./copy\n\n", a.self)
	fmt.Fprintf(w, "Press Ctrl-C to stop (or run '%s down --data %s').\n", a.self, shellQuote(filepath.Dir(e.ClusterFile())))
}

// checkChoice accepts "" (not given) or one of choices.
func checkChoice(cmd *cobra.Command, flag, value string, choices ...string) error {
	if value == "" || slices.Contains(choices, value) {
		return nil
	}
	return usageErrorf(cmd, "--%s %q is not one of %s", flag, value, strings.Join(choices, ", "))
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
