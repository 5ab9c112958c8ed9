package cluster

// A local multi-process cluster (weft cluster start/stop): N meta and M store
// servers, each a `weft meta` or `weft store` process of its own on a
// loopback port, all described by DIR/weft.toml. The processes outlive the
// command that started them (own session, output to log files), so what
// ties them to DIR afterwards is the pid file DIR/pids: role, id, pid and the
// process's start time, which together name one process for the life of the
// machine even after its pid is reused.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
)

// Role is the kind of a weft server: RoleMeta or RoleStore.
type Role string

// The roles, also the subcommands that run them.
const (
	RoleMeta  Role = "meta"
	RoleStore Role = "store"
)

// Names and limits of a local multi-process cluster.
const (
	// PidFileName is the file in a local cluster's directory that lists
	// its running processes.
	PidFileName = "pids"
	// LogDirName is the directory under a local cluster's directory that
	// holds one log file per server (meta-0.log, store-1.log, ...).
	LogDirName = "logs"
	// MaxLocalServers bounds the servers of each role one machine runs.
	MaxLocalServers = 256
	// DefaultProcsStartTimeout bounds how long StartProcs and Restart wait
	// for servers to answer.
	DefaultProcsStartTimeout = 30 * time.Second
	// ProcsStopTimeout is how long a stop waits after SIGTERM before it
	// sends SIGKILL.
	ProcsStopTimeout = 10 * time.Second
	// minCPU is the smallest CPU cap: the kernel's smallest CFS quota is
	// 1 ms per 100 ms period.
	minCPU = 0.01
)

// ProcsOptions configure StartProcs. Zero settings keep what the existing
// cluster file says, or take the defaults on a first start.
type ProcsOptions struct {
	// Binary is the weft executable each server runs. Required.
	Binary string
	// Dir holds the cluster file, the pid file, the logs and every
	// server's data (meta-0, store-0, ...). Required.
	Dir string
	// Meta and Store are how many servers of each role to run. 0 means as
	// many as the existing cluster file lists, or 1 on a first start; a
	// different number than the file's is an error.
	Meta, Store int
	// Durability is "sync" or "async".
	Durability string
	// SplitThreshold is the entries of a directory partition before it
	// splits.
	SplitThreshold int
	// Replication is how many store servers hold each chunk. It cannot
	// change once Dir holds a cluster.
	Replication int
	// Redundancy, if set, is "replicas:N" or "ec:K+M" (config's
	// redundancy key); it cannot change once Dir holds a cluster, and
	// with Replication set it must agree with it.
	Redundancy string
	// Backend is every store's backend, "disk" or "mem". It cannot change
	// once Dir holds a cluster.
	Backend string
	// MemLimit bounds each mem backend; 0 means the file's or
	// DefaultEmbeddedMemLimit.
	MemLimit int64
	// Metrics gives every server a metrics address (a free port) unless
	// the cluster file already has one.
	Metrics bool
	// MetaCPU, if above 0, caps each meta process at this many cores
	// through a cgroup CPU quota. It needs root and a cgroup CPU
	// controller. It is not recorded in the cluster file: give it on
	// every start. Capped processes run with GOMAXPROCS set to the cap
	// rounded up.
	MetaCPU float64
	// LogLevel is the servers' --log-level; "" leaves their default.
	LogLevel string
	// StartTimeout bounds the wait for every server to answer; 0 means
	// DefaultProcsStartTimeout.
	StartTimeout time.Duration
	// Security is a new cluster's security mode; "" means secure. An
	// existing cluster keeps its file's.
	Security string
	// RecordsOnLoopback, for a new secure cluster, keeps the integrity
	// record layer on loopback connections (the cluster file's
	// records_on_loopback), for measuring it.
	RecordsOnLoopback bool
	// LeaseTerm, if above 0, is the cluster file's lease_term (the grace
	// follows it unless the file sets lease_grace).
	LeaseTerm time.Duration
}

// Validate checks the options alone, before anything is started or written.
func (o *ProcsOptions) Validate() error {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if o.Binary == "" {
		bad("binary: no weft executable given")
	}
	if o.Dir == "" {
		bad("dir: no directory given")
	}
	checkCount := func(name string, n, max int, maxWhy string) {
		switch {
		case n < 0:
			bad("%s: %d is negative", name, n)
		case n > max:
			bad("%s: %d is more than %d, %s", name, n, max, maxWhy)
		}
	}
	if o.Meta > core.MaxServers {
		checkCount("meta", o.Meta, core.MaxServers, "the most meta servers a weft cluster can have")
	} else {
		checkCount("meta", o.Meta, MaxLocalServers, "the most servers of a role a local cluster runs")
	}
	checkCount("store", o.Store, MaxLocalServers, "the most servers of a role a local cluster runs")
	switch o.Security {
	case "", config.SecurityNone, config.SecuritySecure, config.SecurityPrivate:
	default:
		bad("security: %q is not one of none, secure, private", o.Security)
	}
	if o.Durability != "" && o.Durability != config.DurabilitySync && o.Durability != config.DurabilityAsync {
		bad("durability: %q is not one of sync, async", o.Durability)
	}
	if o.SplitThreshold != 0 && o.SplitThreshold < config.MinSplitThreshold {
		bad("split threshold: %d is less than %d", o.SplitThreshold, config.MinSplitThreshold)
	}
	if o.Replication < 0 {
		bad("replication: %d is negative", o.Replication)
	} else if o.Store > 0 && o.Replication > o.Store {
		bad("replication: %d is more than the %d store servers", o.Replication, o.Store)
	}
	if o.Redundancy != "" {
		o.validateRedundancy(bad)
	}
	if o.Backend != "" && o.Backend != config.BackendDisk && o.Backend != config.BackendMem {
		bad("backend: %q is not one of disk, mem", o.Backend)
	}
	if o.MemLimit < 0 {
		bad("mem limit: %d is negative", o.MemLimit)
	}
	if o.MetaCPU != 0 && (math.IsNaN(o.MetaCPU) || o.MetaCPU < minCPU || o.MetaCPU > float64(runtime.NumCPU())) {
		bad("meta cpu: %g is not between %g and the %d cores of this machine", o.MetaCPU, minCPU, runtime.NumCPU())
	}
	if o.LogLevel != "" {
		var l slog.Level
		if err := l.UnmarshalText([]byte(o.LogLevel)); err != nil {
			bad("log level: %q is not one of debug, info, warn, error", o.LogLevel)
		}
	}
	if o.StartTimeout < 0 {
		bad("start timeout: %v is negative", o.StartTimeout)
	}
	if len(problems) > 0 {
		return errs.New(errs.Invalid, "local cluster options", "%s", strings.Join(problems, "; "))
	}
	return nil
}

// Procs is a local multi-process cluster: what StartProcs started, or what
// OpenProcs found running in a directory. Its methods are safe for
// concurrent use.
type Procs struct {
	dir      string
	file     string
	binary   string
	logLevel string
	metaCPU  float64
	timeout  time.Duration
	cfg      *config.Cluster // as the servers see it: absolute data directories
	cgroup   *cpuCgroup      // nil without a CPU cap
	dial     rpc.DialOptions // the admin identity's, for the readiness checks

	mu struct {
		sync.Mutex
		procs []*proc // meta servers by id, then store servers by id
	}
}

// proc is one server process.
type proc struct {
	role      Role
	id        int
	addr      string
	log       string // log file
	pid       int    // 0: not started
	startTime uint64 // /proc/PID/stat field 22
	// cmd and exited are set when this process started it: exited closes
	// once the process has exited and been reaped. Processes found through
	// the pid file are watched through /proc instead.
	cmd    *exec.Cmd
	exited chan struct{}
	logOff int64 // size of the log before this start, for the error tail
}

func (p *proc) name() string { return fmt.Sprintf("%s %d", p.role, p.id) }

// slug names the server in file names: "meta-0".
func (p *proc) slug() string { return serverSlug(p.role, p.id) }

func serverSlug(role Role, id int) string { return fmt.Sprintf("%s-%d", role, id) }

// ProcInfo describes one server process of a Procs.
type ProcInfo struct {
	Role    Role
	ID      int
	Addr    string
	Pid     int // 0 if never started
	Running bool
	Log     string // the server's log file
}

// StartProcs starts the servers of opts.Dir as processes of their own and
// returns once every one answers, or fails and leaves none running. On a
// first start it picks free loopback ports and writes Dir/weft.toml; when
// Dir already holds a cluster file it starts the servers that file lists,
// on the same ports and data, so that data survives a stop and a start.
// It refuses a directory whose cluster is still running.
func StartProcs(ctx context.Context, opts ProcsOptions) (_ *Procs, err error) {
	const op = "start local cluster"
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, errs.Wrap(errs.Invalid, op, opts.Dir, err)
	}
	file := filepath.Join(dir, ClusterFileName)
	onDisk, firstStart, err := procsConfig(file, opts)
	if err != nil {
		return nil, err
	}

	if err := os.MkdirAll(filepath.Join(dir, LogDirName), 0o755); err != nil {
		return nil, errs.Wrap(errs.IO, op, dir, err)
	}
	// The servers' command lines name the cluster file by this path, and
	// a later stop recognises them by it, whatever path it is given.
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return nil, errs.Wrap(errs.IO, op, opts.Dir, err)
	}
	file = filepath.Join(dir, ClusterFileName)
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := checkNotRunning(dir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(file); firstStart && err == nil {
		return nil, errs.New(errs.Busy, op, "%s appeared while starting: another command is starting a cluster in %s", file, dir)
	}
	if err := checkPortsFree(onDisk); err != nil {
		return nil, err
	}
	if firstStart {
		onDisk.Security = opts.Security
		onDisk.RecordsOnLoopback = opts.RecordsOnLoopback
		if err := InitSecurity(onDisk, dir); err != nil {
			return nil, err
		}
		relativeSecurityPaths(onDisk, dir)
		if onDisk.Secured() {
			// Capabilities come with the mode (created below, by
			// ensureCapabilitySecret); none checks nothing.
			onDisk.CapabilitySecret = CapabilitySecretName
		}
	}
	if err := onDisk.Write(file); err != nil {
		return nil, err
	}
	if firstStart {
		// On failure, no cluster file naming servers that never ran.
		defer func() {
			if err != nil {
				os.Remove(file)
			}
		}()
	}
	cfg, err := config.Load(file) // the servers' view: absolute directories
	if err != nil {
		return nil, err
	}
	if err := ensureCapabilitySecret(cfg); err != nil {
		return nil, err
	}

	p := &Procs{
		dir:      dir,
		file:     file,
		binary:   opts.Binary,
		logLevel: opts.LogLevel,
		metaCPU:  opts.MetaCPU,
		timeout:  opts.StartTimeout,
		cfg:      cfg,
	}
	if p.timeout == 0 {
		p.timeout = DefaultProcsStartTimeout
	}
	if p.dial, err = DialOptions(cfg, ""); err != nil {
		return nil, err
	}
	// p is not shared until it is returned: the ...Locked methods need no
	// lock here.
	p.mu.procs = p.procList()
	defer func() {
		if err != nil {
			// Leave nothing behind: no process, no pid file, no cgroup.
			err = errors.Join(err, p.stopLocked(ProcsStopTimeout, false))
		}
	}()
	if opts.MetaCPU > 0 {
		if p.cgroup, err = newCPUCgroup(dir); err != nil {
			return nil, err
		}
	}
	for _, pr := range p.mu.procs {
		if err := p.spawnLocked(pr); err != nil {
			return nil, err
		}
	}
	if err := p.writePidFileLocked(); err != nil {
		return nil, err
	}
	if err := p.waitReady(ctx, p.mu.procs); err != nil {
		return nil, err
	}
	return p, nil
}

// procsConfig returns the cluster file to write: the existing one with opts
// applied, or a new one on free loopback ports. Data directories are
// relative to the file, so the directory can move as a whole.
func procsConfig(file string, opts ProcsOptions) (cfg *config.Cluster, firstStart bool, err error) {
	const op = "start local cluster"
	data, err := os.ReadFile(file)
	switch {
	case errors.Is(err, os.ErrNotExist):
		cfg, err = newProcsConfig(opts)
		return cfg, true, err
	case err != nil:
		return nil, false, errs.Wrap(errs.IO, op, file, err)
	}
	if cfg, err = config.Parse(data); err != nil {
		return nil, false, errs.WithPath(err, op, file)
	}
	dir := filepath.Dir(file)
	switch {
	case opts.Meta != 0 && opts.Meta != len(cfg.Meta), opts.Store != 0 && opts.Store != len(cfg.Store):
		return nil, false, errs.New(errs.Invalid, op, "%s holds a cluster of %d meta and %d store servers; start it without --meta and --store, or use another directory",
			dir, len(cfg.Meta), len(cfg.Store))
	case opts.Backend != "" && opts.Backend != cfg.Store[0].Backend:
		return nil, false, errs.New(errs.Invalid, op, "%s was created with the %s backend; it cannot change to %s", dir, cfg.Store[0].Backend, opts.Backend)
	case opts.Replication != 0 && opts.Replication != cfg.Replication:
		return nil, false, errs.New(errs.Invalid, op, "%s was created with replication %d; it cannot change to %d (chunks would not be found)",
			dir, cfg.Replication, opts.Replication)
	case opts.Redundancy != "" && opts.Redundancy != cfg.RedundancyString():
		return nil, false, errs.New(errs.Invalid, op, "%s was created with redundancy %s; it cannot change to %s (chunks would not be found)",
			dir, cfg.RedundancyString(), opts.Redundancy)
	}
	applyProcsOptions(cfg, opts)
	if opts.Metrics {
		var missing []*string
		for i := range cfg.Meta {
			if cfg.Meta[i].MetricsAddr == "" {
				missing = append(missing, &cfg.Meta[i].MetricsAddr)
			}
		}
		for i := range cfg.Store {
			if cfg.Store[i].MetricsAddr == "" {
				missing = append(missing, &cfg.Store[i].MetricsAddr)
			}
		}
		if err := pickPorts(missing); err != nil {
			return nil, false, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, false, errs.WithPath(err, op, file)
	}
	return cfg, false, nil
}

// newProcsConfig is the cluster file of a first start.
func newProcsConfig(opts ProcsOptions) (*config.Cluster, error) {
	cfg := config.Default()
	nMeta, nStore := max(opts.Meta, 1), max(opts.Store, 1)
	var addrs []*string
	cfg.Meta = make([]config.MetaServer, nMeta)
	for i := range cfg.Meta {
		cfg.Meta[i] = config.DefaultMetaServer("", fmt.Sprintf("meta-%d", i))
		addrs = append(addrs, &cfg.Meta[i].Addr)
		if opts.Metrics {
			addrs = append(addrs, &cfg.Meta[i].MetricsAddr)
		}
	}
	cfg.Store = make([]config.StoreServer, nStore)
	for i := range cfg.Store {
		cfg.Store[i] = config.DefaultStoreServer("", fmt.Sprintf("store-%d", i))
		addrs = append(addrs, &cfg.Store[i].Addr)
		if opts.Metrics {
			addrs = append(addrs, &cfg.Store[i].MetricsAddr)
		}
	}
	if opts.Replication != 0 {
		cfg.Replication = opts.Replication
	}
	if opts.Redundancy != "" {
		if err := cfg.SetRedundancy(opts.Redundancy); err != nil {
			return nil, err
		}
	}
	if opts.Backend != "" {
		for i := range cfg.Store {
			cfg.Store[i].Backend = opts.Backend
		}
	}
	applyProcsOptions(cfg, opts)
	// Validate before picking ports so that a bad setting is reported as
	// such; the placeholder addresses are replaced below.
	probe := cfg.Clone()
	for i := range probe.Meta {
		probe.Meta[i].Addr, probe.Meta[i].MetricsAddr = fmt.Sprintf("127.0.0.1:%d", 1+i), ""
	}
	for i := range probe.Store {
		probe.Store[i].Addr, probe.Store[i].MetricsAddr = fmt.Sprintf("127.0.0.2:%d", 1+i), ""
	}
	if err := probe.Validate(); err != nil {
		return nil, err
	}
	if err := pickPorts(addrs); err != nil {
		return nil, err
	}
	return cfg, nil
}

// applyProcsOptions applies the settings that may change between starts.
func applyProcsOptions(cfg *config.Cluster, opts ProcsOptions) {
	if opts.Durability != "" {
		cfg.Durability = opts.Durability
	}
	if opts.SplitThreshold != 0 {
		cfg.SplitThreshold = opts.SplitThreshold
	}
	if opts.LeaseTerm > 0 {
		cfg.LeaseTerm = config.Duration(opts.LeaseTerm)
	}
	for i := range cfg.Store {
		if opts.MemLimit != 0 {
			cfg.Store[i].MemLimit = config.ByteSize(opts.MemLimit)
		}
		if cfg.Store[i].Backend == config.BackendMem && cfg.Store[i].MemLimit == 0 {
			cfg.Store[i].MemLimit = DefaultEmbeddedMemLimit
		}
	}
}

// pickPorts sets each address to a distinct free loopback port, below the
// kernel's ephemeral range so that a restart finds it free (rpc.PickAddrs).
func pickPorts(addrs []*string) error {
	picked, err := rpc.PickAddrs(len(addrs))
	if err != nil {
		return err
	}
	for i, a := range addrs {
		*a = picked[i]
	}
	return nil
}

// checkPortsFree fails when another program listens on a server's address,
// such as a weft up started with the same directory.
func checkPortsFree(cfg *config.Cluster) error {
	var addrs []string
	for _, m := range cfg.Meta {
		addrs = append(addrs, m.Addr, m.MetricsAddr)
	}
	for _, s := range cfg.Store {
		addrs = append(addrs, s.Addr, s.MetricsAddr)
	}
	for _, a := range addrs {
		if a == "" {
			continue
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return errs.Wrap(errs.Busy, "start local cluster", a,
				fmt.Errorf("%w (is weft up, or a cluster not started by weft cluster start, using this directory?)", err))
		}
		ln.Close()
	}
	return nil
}

// procList returns one proc per server of the cluster file, none started.
func (p *Procs) procList() []*proc {
	var procs []*proc
	for i, m := range p.cfg.Meta {
		procs = append(procs, &proc{role: RoleMeta, id: i, addr: m.Addr, log: p.logPath(RoleMeta, i)})
	}
	for i, s := range p.cfg.Store {
		procs = append(procs, &proc{role: RoleStore, id: i, addr: s.Addr, log: p.logPath(RoleStore, i)})
	}
	return procs
}

func (p *Procs) logPath(role Role, id int) string {
	return filepath.Join(p.dir, LogDirName, serverSlug(role, id)+".log")
}

// spawnLocked starts pr's process in a session of its own, with output
// appended to its log file, and caps its CPU if asked to.
func (p *Procs) spawnLocked(pr *proc) error {
	op := "start " + pr.name()
	logf, err := os.OpenFile(pr.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return errs.Wrap(errs.IO, op, pr.log, err)
	}
	defer logf.Close() // the child has its own descriptor
	if st, err := logf.Stat(); err == nil {
		pr.logOff = st.Size()
	}
	var args []string
	if p.logLevel != "" {
		args = append(args, "--log-level", p.logLevel)
	}
	args = append(args, string(pr.role), "--config", p.file, "--id", fmt.Sprint(pr.id))
	cmd := exec.Command(p.binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf // stdin is /dev/null
	if pr.role == RoleMeta && p.cgroup != nil {
		// As many Ps as whole cores in the quota: with more, the runtime's
		// idle Ps spin and its threads switch in and out, which took about
		// half of a 0.05-core quota (mdtest at 8 servers: 6.0x one server's
		// creates with one P, 4.4x with two).
		cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", int(math.Ceil(p.metaCPU))))
	}
	// A session of its own: no terminal signals, and it outlives the
	// command that started it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return errs.Wrap(errs.Other, op, p.binary, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait() // reap; the exit status is in the log
		close(exited)
	}()
	pr.cmd, pr.exited, pr.pid = cmd, exited, cmd.Process.Pid
	_, start, err := procStat(pr.pid)
	if err != nil {
		// Exited already; waitReady reports it with the log.
		start = 0
	}
	pr.startTime = start
	if pr.role == RoleMeta && p.cgroup != nil {
		if err := p.cgroup.limit(pr.slug(), pr.pid, p.metaCPU); err != nil {
			// Not left running uncapped.
			cmd.Process.Kill()
			<-exited
			return err
		}
	}
	return nil
}

// waitReady waits until every process in procs answers a weft handshake, or
// one exits, or the start timeout passes.
func (p *Procs) waitReady(ctx context.Context, procs []*proc) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	pending := append([]*proc(nil), procs...)
	for len(pending) > 0 {
		pr := pending[0]
		if !p.running(pr) {
			return errs.New(errs.Unavailable, "start "+pr.name(), "the server exited; its log %s says:\n%s", pr.log, logTail(pr.log, pr.logOff))
		}
		dctx, dcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		c, err := rpc.Dial(dctx, pr.addr, p.dial)
		dcancel()
		if err == nil {
			c.Close()
			pending = pending[1:]
			continue
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return errs.Wrap(errs.Canceled, "start "+pr.name(), "", ctx.Err())
			}
			return errs.New(errs.Timeout, "start "+pr.name(), "no answer at %s after %v; its log %s says:\n%s",
				pr.addr, p.timeout, pr.log, logTail(pr.log, pr.logOff))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// running reports whether pr's process is alive (a zombie is not).
func (p *Procs) running(pr *proc) bool {
	if pr.pid == 0 {
		return false
	}
	if pr.exited != nil {
		select {
		case <-pr.exited:
			return false
		default:
			return true
		}
	}
	return procAlive(pr.pid, pr.startTime, p.file, pr.role)
}

// signal sends sig to pr if it is still the process that was started.
func (p *Procs) signal(pr *proc, sig syscall.Signal) error {
	var target *os.Process
	if pr.cmd != nil {
		target = pr.cmd.Process // by pidfd too
	} else {
		if pr.pid == 0 {
			return nil
		}
		// On Linux FindProcess holds a pidfd: checked below, the process
		// it names cannot be swapped for another with a reused pid
		// before the signal.
		found, err := os.FindProcess(pr.pid)
		if err != nil {
			return nil
		}
		defer found.Release()
		target = found
	}
	if !p.running(pr) {
		return nil
	}
	err := target.Signal(sig)
	if err != nil && !errors.Is(err, os.ErrProcessDone) && !errors.Is(err, syscall.ESRCH) {
		kind := errs.Other
		if errors.Is(err, syscall.EPERM) {
			kind = errs.NotPermitted
		}
		return errs.Wrap(kind, fmt.Sprintf("signal %s (pid %d)", pr.name(), pr.pid), "", err)
	}
	return nil
}

// waitGone waits until none of procs runs, for at most d; it returns those
// still running.
func (p *Procs) waitGone(procs []*proc, d time.Duration) []*proc {
	deadline := time.Now().Add(d)
	for {
		var left []*proc
		for _, pr := range procs {
			if p.running(pr) {
				left = append(left, pr)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopLocked ends every process: SIGTERM and up to grace for them to
// finish, then SIGKILL (at once when kill is set). It then removes the pid
// file and the cgroups.
func (p *Procs) stopLocked(grace time.Duration, kill bool) error {
	var errList []error
	all := p.mu.procs
	if !kill {
		for _, pr := range all {
			if err := p.signal(pr, syscall.SIGTERM); err != nil {
				errList = append(errList, err)
			}
		}
		all = p.waitGone(all, grace)
	}
	for _, pr := range all {
		if err := p.signal(pr, syscall.SIGKILL); err != nil {
			errList = append(errList, err)
		}
	}
	if left := p.waitGone(all, 5*time.Second); len(left) > 0 {
		var names []string
		for _, pr := range left {
			names = append(names, fmt.Sprintf("%s (pid %d)", pr.name(), pr.pid))
		}
		errList = append(errList, errs.New(errs.Busy, "stop local cluster", "still running after SIGKILL: %s", strings.Join(names, ", ")))
		return errors.Join(errList...) // keep the pid file: they are still ours
	}
	for _, pr := range p.mu.procs {
		pr.pid, pr.startTime, pr.cmd = 0, 0, nil
	}
	if err := os.Remove(filepath.Join(p.dir, PidFileName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errList = append(errList, errs.Wrap(errs.IO, "stop local cluster", PidFileName, err))
	}
	if p.cgroup != nil {
		if err := p.cgroup.remove(); err != nil {
			errList = append(errList, err)
		}
	}
	return errors.Join(errList...)
}

// Stop stops every server gracefully (SIGTERM, then SIGKILL after
// ProcsStopTimeout) and removes the pid file and the CPU cgroups. The data
// and the cluster file stay, for StartProcs to start the same cluster again.
func (p *Procs) Stop() error {
	return p.end(false)
}

// KillAll kills every server at once with SIGKILL, as a machine crash
// would, and removes the pid file and the CPU cgroups.
func (p *Procs) KillAll() error {
	return p.end(true)
}

func (p *Procs) end(kill bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	unlock, err := lockDir(context.Background(), p.dir)
	if err != nil {
		return err
	}
	defer unlock()
	return p.stopLocked(ProcsStopTimeout, kill)
}

// Kill kills one server with SIGKILL and returns once it is gone. The pid
// file keeps its entry, so Stop still finds the others and Restart can
// start it again.
func (p *Procs) Kill(role Role, id int) error {
	return p.stopOne(role, id, 0, true)
}

// Terminate stops one server gracefully: SIGTERM, then SIGKILL after
// ProcsStopTimeout.
func (p *Procs) Terminate(role Role, id int) error {
	return p.stopOne(role, id, ProcsStopTimeout, false)
}

func (p *Procs) stopOne(role Role, id int, grace time.Duration, kill bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, err := p.findLocked(role, id)
	if err != nil {
		return err
	}
	if !p.running(pr) {
		return errs.New(errs.Invalid, "stop "+pr.name(), "it is not running")
	}
	if !kill {
		if err := p.signal(pr, syscall.SIGTERM); err != nil {
			return err
		}
		if len(p.waitGone([]*proc{pr}, grace)) == 0 {
			return nil
		}
	}
	if err := p.signal(pr, syscall.SIGKILL); err != nil {
		return err
	}
	if len(p.waitGone([]*proc{pr}, 5*time.Second)) > 0 {
		return errs.New(errs.Busy, "stop "+pr.name(), "pid %d still runs after SIGKILL", pr.pid)
	}
	return nil
}

// Restart starts a server that is not running (killed, stopped, or
// crashed) again, on the same address and data, and returns once it
// answers.
func (p *Procs) Restart(ctx context.Context, role Role, id int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, err := p.findLocked(role, id)
	if err != nil {
		return err
	}
	if p.running(pr) {
		return errs.New(errs.Busy, "restart "+pr.name(), "it is running (pid %d); kill or stop it first", pr.pid)
	}
	unlock, err := lockDir(ctx, p.dir)
	if err != nil {
		return err
	}
	defer unlock()
	if err := p.spawnLocked(pr); err != nil {
		return err
	}
	if err := p.writePidFileLocked(); err != nil {
		return err
	}
	if err := p.waitReady(ctx, []*proc{pr}); err != nil {
		p.signal(pr, syscall.SIGKILL)
		p.waitGone([]*proc{pr}, 5*time.Second)
		return err
	}
	return nil
}

func (p *Procs) findLocked(role Role, id int) (*proc, error) {
	for _, pr := range p.mu.procs {
		if pr.role == role && pr.id == id {
			return pr, nil
		}
	}
	return nil, errs.New(errs.Invalid, "local cluster", "no %s server %d in %s", role, id, p.file)
}

// Dir returns the cluster's directory.
func (p *Procs) Dir() string { return p.dir }

// ClusterFile returns the path of the cluster file.
func (p *Procs) ClusterFile() string { return p.file }

// Config returns a copy of the cluster's configuration, with absolute data
// directories.
func (p *Procs) Config() *config.Cluster { return p.cfg.Clone() }

// CgroupDir returns the directory of the CPU cgroups, or "" without a CPU
// cap. Each capped server has a directory below it named "meta-ID".
func (p *Procs) CgroupDir() string {
	if p.cgroup == nil {
		return ""
	}
	return p.cgroup.root
}

// Servers describes every server process, meta servers first.
func (p *Procs) Servers() []ProcInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []ProcInfo
	for _, pr := range p.mu.procs {
		out = append(out, ProcInfo{Role: pr.role, ID: pr.id, Addr: pr.addr, Pid: pr.pid, Running: p.running(pr), Log: pr.log})
	}
	return out
}
