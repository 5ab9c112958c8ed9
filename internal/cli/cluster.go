package cli

// weft cluster start / stop: a local multi-process cluster, N meta and M
// store servers each in a process of its own on loopback ports (package
// cluster, Procs, does the work).

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
)

func newClusterCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Start and stop a local cluster: N meta and M store servers, each its own process",
		Long: "Run a cluster of several meta and store servers on this machine, each a\n" +
			"weft meta or weft store process of its own on a free 127.0.0.1 port, all\n" +
			"described by DIR/weft.toml. For tests, benchmarks and trying a real\n" +
			"multi-server layout on one machine.",
		Args: unknownCommand,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(newClusterStartCommand(a), newClusterStopCommand(a))
	return cmd
}

type clusterStartFlags struct {
	dir            string
	meta, store    int
	durability     string
	splitThreshold int
	leaseTerm      time.Duration
	replication    int
	redundancy     string
	backend        string
	memLimit       string
	security       string
	records        bool
	metaCPU        float64
	metrics        bool
	binary         string
}

func newClusterStartCommand(a *app) *cobra.Command {
	var f clusterStartFlags
	cmd := &cobra.Command{
		Use:   "start --dir DIR [--meta N] [--store M]",
		Short: "Start N meta and M store servers as background processes",
		Long: "Start N weft meta and M weft store processes with all their data under\n" +
			"DIR (meta-0, store-0, ...), logs in DIR/logs and their pids in DIR/pids,\n" +
			"and return once every server answers. The first start picks free\n" +
			"127.0.0.1 ports and writes DIR/weft.toml; a later start on the same DIR\n" +
			"starts the same servers on the same ports and data. The servers run until\n" +
			"weft cluster stop.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runClusterStart(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "dir", "", "directory for the cluster file, data, logs and pids (required)")
	fl.IntVar(&f.meta, "meta", 0, "meta servers (default: as before, else 1)")
	fl.IntVar(&f.store, "store", 0, "store servers (default: as before, else 1)")
	fl.StringVar(&f.durability, "durability", "", "when metadata changes are acknowledged: sync or async (default: as before, else sync)")
	fl.IntVar(&f.splitThreshold, "split-threshold", 0, fmt.Sprintf("entries of a directory partition before it splits (default: as before, else %d)", config.DefaultSplitThreshold))
	fl.DurationVar(&f.leaseTerm, "lease-term", 0, fmt.Sprintf("how long a client's lease lasts, between %v and %v: longer lets mounts cache longer, and a dead holder blocks others longer (default: as before, else %v)", config.MinLeaseTerm, config.MaxLeaseTerm, config.DefaultLeaseTerm))
	fl.IntVar(&f.replication, "replication", 0, "store servers holding each chunk (default: as before, else 1); cannot change later")
	fl.StringVar(&f.redundancy, "redundancy", "", "how chunks survive a lost store: replicas:N or ec:K+M, such as ec:4+1 (default: as before, else replicas:1 or --replication); cannot change later")
	fl.StringVar(&f.backend, "backend", "", "where stores keep file data: disk or mem (default: as before, else disk); cannot change later")
	fl.StringVar(&f.memLimit, "mem-limit", "", "bytes each mem backend may hold, such as 2GiB (default: as before, else 1GiB)")
	fl.StringVar(&f.security, "security", "", securityFlagUsage)
	fl.BoolVar(&f.records, "records-on-loopback", false, "secure mode: keep the integrity record layer on loopback connections too (a new cluster's records_on_loopback; for measuring it)")
	fl.Float64Var(&f.metaCPU, "meta-cpu", 0, "cap each meta server at this many cores, such as 0.5 (cgroups; needs root)")
	fl.BoolVar(&f.metrics, "metrics", false, "give every server a Prometheus metrics address (recorded in the cluster file)")
	fl.StringVar(&f.binary, "binary", "", "weft executable the servers run (default: this one)")
	_ = fl.MarkHidden("binary") // for tests, which run as a test binary
	return cmd
}

func (a *app) runClusterStart(cmd *cobra.Command, f clusterStartFlags) error {
	opts, err := f.options(cmd)
	if err != nil {
		return err
	}
	opts.LogLevel = a.logLevel
	restart := false
	if _, err := os.Stat(filepath.Join(opts.Dir, cluster.ClusterFileName)); err == nil {
		restart = true
	}
	p, err := cluster.StartProcs(cmd.Context(), opts)
	if err != nil {
		return err
	}
	printClusterBanner(cmd.OutOrStdout(), a.self, p, restart, opts.MetaCPU)
	return nil
}

// options turns the flags into cluster options; a bad value is a usage
// error and starts nothing.
func (f clusterStartFlags) options(cmd *cobra.Command) (cluster.ProcsOptions, error) {
	if f.dir == "" {
		return cluster.ProcsOptions{}, usageErrorf(cmd, "--dir is required: the directory that holds (or will hold) the cluster")
	}
	// 0 means "as before" in the options; given on the command line it is
	// a mistake.
	for _, c := range []struct {
		flag string
		v    int
	}{{"meta", f.meta}, {"store", f.store}, {"replication", f.replication}, {"split-threshold", f.splitThreshold}} {
		if cmd.Flags().Changed(c.flag) && c.v < 1 {
			return cluster.ProcsOptions{}, usageErrorf(cmd, "--%s %d: want at least 1", c.flag, c.v)
		}
	}
	if cmd.Flags().Changed("lease-term") && (f.leaseTerm < config.MinLeaseTerm || f.leaseTerm > config.MaxLeaseTerm) {
		return cluster.ProcsOptions{}, usageErrorf(cmd, "--lease-term %v: want between %v and %v", f.leaseTerm, config.MinLeaseTerm, config.MaxLeaseTerm)
	}
	if cmd.Flags().Changed("meta-cpu") && f.metaCPU <= 0 {
		return cluster.ProcsOptions{}, usageErrorf(cmd, "--meta-cpu %g: want a share of cores above 0, such as 0.5", f.metaCPU)
	}
	if err := checkChoice(cmd, "durability", f.durability, config.DurabilitySync, config.DurabilityAsync); err != nil {
		return cluster.ProcsOptions{}, err
	}
	if err := checkChoice(cmd, "backend", f.backend, config.BackendDisk, config.BackendMem); err != nil {
		return cluster.ProcsOptions{}, err
	}
	opts := cluster.ProcsOptions{
		Binary:         f.binary,
		Dir:            f.dir,
		Meta:           f.meta,
		Store:          f.store,
		Durability:     f.durability,
		SplitThreshold: f.splitThreshold,
		LeaseTerm:      f.leaseTerm,
		Replication:    f.replication,
		Redundancy:     f.redundancy,
		Backend:        f.backend,
		Metrics:        f.metrics,
		MetaCPU:        f.metaCPU,
		Security:       f.security,

		RecordsOnLoopback: f.records,
	}
	if err := checkChoice(cmd, "security", f.security, config.SecurityNone, config.SecuritySecure, config.SecurityPrivate); err != nil {
		return cluster.ProcsOptions{}, err
	}
	if f.memLimit != "" {
		n, err := config.ParseByteSize(f.memLimit)
		if err != nil || n <= 0 {
			return opts, usageErrorf(cmd, "--mem-limit %q is not a size above 0, such as 512MiB or 2GiB", f.memLimit)
		}
		opts.MemLimit = int64(n)
	}
	if opts.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return opts, errs.Wrap(errs.Other, "cluster start", "", fmt.Errorf("cannot find the weft executable: %w", err))
		}
		opts.Binary = exe
	}
	if err := opts.Validate(); err != nil {
		return opts, usageError(cmd, err)
	}
	return opts, nil
}

func printClusterBanner(w io.Writer, self string, p *cluster.Procs, restart bool, metaCPU float64) {
	cfg := p.Config()
	verb := "is up"
	if restart {
		verb = "is up again"
	}
	fmt.Fprintf(w, "weft cluster %s: %d meta, %d store servers (%s backend, %s durability)\n\n",
		verb, len(cfg.Meta), len(cfg.Store), cfg.Store[0].Backend, cfg.Durability)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tID\tADDR\tPID\tLOG")
	for _, s := range p.Servers() {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\n", s.Role, s.ID, s.Addr, s.Pid, s.Log)
	}
	tw.Flush()
	if metaCPU > 0 {
		fmt.Fprintf(w, "\nmeta servers capped at %g cores each (cgroup %s)\n", metaCPU, p.CgroupDir())
	}
	fmt.Fprintf(w, "\ncluster file: %s\n\n", p.ClusterFile())
	fmt.Fprintf(w, "Use it from any shell:\n\n")
	fmt.Fprintf(w, "    export %s=%s\n", ClusterEnv, shellQuote(p.ClusterFile()))
	fmt.Fprintf(w, "    %s status\n", self)
	fmt.Fprintf(w, "    %s ls /\n\n", self)
	fmt.Fprintf(w, "Stop it with: %s cluster stop --dir %s\n", self, shellQuote(p.Dir()))
}

func newClusterStopCommand(a *app) *cobra.Command {
	var (
		dir  string
		kill bool
	)
	cmd := &cobra.Command{
		Use:   "stop --dir DIR [--kill]",
		Short: "Stop the servers weft cluster start started in DIR",
		Long: "Stop every server listed in DIR/pids: SIGTERM, and SIGKILL for those still\n" +
			"running after 10 seconds (at once with --kill). Only processes that are\n" +
			"still the ones started are signalled. The data and DIR/weft.toml stay, so\n" +
			"weft cluster start --dir DIR starts the same cluster again. Stopping a\n" +
			"stopped cluster succeeds.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return usageErrorf(cmd, "--dir is required: the directory given to weft cluster start")
			}
			return runClusterStop(cmd.OutOrStdout(), dir, kill)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the cluster's directory (required)")
	cmd.Flags().BoolVar(&kill, "kill", false, "SIGKILL every server at once, as a crash would")
	return cmd
}

func runClusterStop(w io.Writer, dir string, kill bool) error {
	p, err := cluster.OpenProcs(dir)
	if errs.Is(err, errs.NotExist) { // no pid file
		fmt.Fprintf(w, "weft: no cluster is running in %s\n", dir)
		return nil
	}
	if err != nil {
		return err
	}
	running := 0
	for _, s := range p.Servers() {
		if s.Running {
			running++
		}
	}
	if kill {
		err = p.KillAll()
	} else {
		err = p.Stop()
	}
	if err != nil {
		return err
	}
	switch {
	case running == 0:
		fmt.Fprintf(w, "weft: the cluster in %s was not running (removed its stale pid file)\n", dir)
	case kill:
		fmt.Fprintf(w, "weft: killed %d servers in %s\n", running, dir)
	default:
		fmt.Fprintf(w, "weft: stopped %d servers in %s\n", running, dir)
	}
	return nil
}
