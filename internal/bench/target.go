package bench

// Targets: the file systems the benchmarks measure, each a mount point the
// suite prepares and tears down itself.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/linksim"
)

// Target kinds, as --targets names them.
const (
	kindWeft          = "weft"
	kindLocal         = "local"
	kindTmpfs         = "tmpfs"
	kindSSHFS         = "sshfs"
	kindJuiceFSSQLite = "juicefs-sqlite"
	kindJuiceFSRedis  = "juicefs-redis"
	kindLoopback      = "loopback"
	kindNFS           = "nfs"
)

// TargetNames are the names --targets accepts; "juicefs" is both JuiceFS
// targets, "all" every target.
var TargetNames = []string{kindWeft, kindLocal, kindTmpfs, kindSSHFS, "juicefs", kindJuiceFSSQLite, kindJuiceFSRedis, kindLoopback, kindNFS, "all"}

var defaultTargets = []string{kindWeft, kindLocal}

// parseTargets expands and checks --targets (comma-separated lists allowed).
func parseTargets(names []string) ([]string, error) {
	if len(names) == 0 {
		names = defaultTargets
	}
	var out []string
	add := func(k string) {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	for _, n := range names {
		for _, k := range strings.Split(n, ",") {
			switch k = strings.TrimSpace(k); k {
			case "":
			case "all":
				for _, a := range []string{kindWeft, kindLocal, kindTmpfs, kindSSHFS, kindJuiceFSSQLite, kindJuiceFSRedis, kindLoopback} {
					add(a)
				}
			case "juicefs":
				add(kindJuiceFSSQLite)
				add(kindJuiceFSRedis)
			case kindWeft, kindLocal, kindTmpfs, kindSSHFS, kindJuiceFSSQLite, kindJuiceFSRedis, kindLoopback, kindNFS:
				add(k)
			default:
				return nil, errs.New(errs.Invalid, "bench", "unknown target %q (known: %s)", k, strings.Join(TargetNames, ", "))
			}
		}
	}
	return out, nil
}

// Target is one column of a benchmark: a kind of file system and, for
// weft, the settings of its servers.
type Target struct {
	Name string // as the report shows it
	Kind string
	// Durability and Backend configure a weft target ("" is weft up's
	// default: sync, disk).
	Durability, Backend string
	// Binary, if set, is the weft executable of this target instead of
	// the run's (Options.BaseWeft for the "(base)" columns).
	Binary string
	// Security, if set, runs the target as separate processes (weft
	// cluster start with this security mode, then weft mount), so that
	// every call crosses a real connection in that mode: in weft up's one
	// process the mount calls its servers in-process, past TLS.
	Security string
	// LeaseTerm, if set, is the cluster's lease term (separate processes).
	LeaseTerm time.Duration
}

// weftVariant is a weft configuration a benchmark compares.
type weftVariant struct {
	name, durability, backend, security string
	leaseTerm                           time.Duration // 0: the cluster's default
}

var (
	weftDefault = weftVariant{"weft", "sync", "disk", "", 0}
	weftSync    = weftVariant{"weft (sync)", "sync", "disk", "", 0}
	weftAsync   = weftVariant{"weft (async)", "async", "disk", "", 0}
	weftDisk    = weftVariant{"weft (disk)", "sync", "disk", "", 0}
	weftMem     = weftVariant{"weft (mem)", "sync", "mem", "", 0}

	// The security modes (seed 001's secure vs non-secure), each as
	// separate processes.
	weftNone    = weftVariant{"weft (none)", "sync", "disk", "none", 0}
	weftSecure  = weftVariant{"weft (secure)", "sync", "disk", "secure", 0}
	weftPrivate = weftVariant{"weft (private)", "sync", "disk", "private", 0}
	// Secure with the record layer kept on loopback connections (which
	// otherwise go bare after the handshake): what secure costs where the
	// records run, between machines.
	weftSecureRecords = weftVariant{"weft (secure, records on loopback)", "sync", "disk", securityRecordsVariant, 0}

	// A mount in writeback mode (metadata write-back under directory
	// write leases) of sync servers, as separate processes: leases need
	// the mount's own connection to be recalled over.
	weftWriteback = weftVariant{"weft (writeback)", "writeback", "disk", "none", 0}
	// The same with 30 s leases: the kernel keeps what a lease covers for
	// as long as the lease lasts, and a dead holder blocks others as long.
	weftWritebackLong = weftVariant{"weft (writeback, 30 s leases)", "writeback", "disk", "none", 30 * time.Second}
)

// targets returns the run's targets for this benchmark: weft once per
// variant (weftDefault if none is given), each followed by its base build
// when the run has one (Options.BaseWeft), the others as asked. NFS never
// has a row (see nfsNote).
func (e *Env) targets(variants ...weftVariant) []Target {
	if len(variants) == 0 {
		variants = []weftVariant{weftDefault}
	}
	var out []Target
	for _, k := range e.run.targets {
		switch k {
		case kindNFS:
		case kindWeft:
			for _, v := range variants {
				out = append(out, Target{Name: v.name, Kind: k, Durability: v.durability, Backend: v.backend, Security: v.security, LeaseTerm: v.leaseTerm})
				if e.BaseWeft != "" && v.security == "" {
					out = append(out, Target{Name: baseName(v.name), Kind: k, Durability: v.durability, Backend: v.backend, Binary: e.BaseWeft})
				}
			}
		default:
			out = append(out, Target{Name: k, Kind: k})
		}
	}
	return out
}

// securityTargets are weft once per security mode (as separate
// processes), if the run measures weft.
func (e *Env) securityTargets() []Target {
	var out []Target
	for _, t := range e.targets(weftNone, weftSecure, weftSecureRecords, weftPrivate) {
		if t.Kind == kindWeft {
			out = append(out, t)
		}
	}
	return out
}

// baseName names the base build's column of a weft target: "weft (base)",
// "weft (sync, base)".
func baseName(name string) string {
	if strings.HasSuffix(name, ")") {
		return strings.TrimSuffix(name, ")") + ", base)"
	}
	return name + " (base)"
}

// baseGoals compares every result of a base build's column with the same
// case of the build under test: the cost of the changes since the base,
// which should stay within 10%. Every unit the suite compares this way
// (MB/s, ops/s) is better when higher.
func baseGoals(rs []Result) []string {
	var out []string
	for _, b := range rs {
		if len(b.Samples) == 0 {
			continue
		}
		for _, r := range rs {
			if r.Case == b.Case && baseName(r.Target) == b.Target && len(r.Samples) > 0 {
				what := fmt.Sprintf("%s %s, %s / base build", r.Bench, r.Case, r.Target)
				out = append(out, ratio(what, r.Median(), b.Median(), "≥ 0.9×", r.Median() >= 0.9*b.Median()))
			}
		}
	}
	return out
}

// alwaysWith adds targets of the given kinds that the run did not ask for:
// the ones a seed's comparison needs (tmpfs for lat_fs and IOZONE).
func alwaysWith(ts []Target, kinds ...string) []Target {
	for _, k := range kinds {
		if !slices.ContainsFunc(ts, func(t Target) bool { return t.Kind == k }) {
			ts = append(ts, Target{Name: k, Kind: k})
		}
	}
	return ts
}

// Mount is a prepared target: a directory to work in, a way to drop its
// caches (remount) and its teardown.
type Mount struct {
	Target Target
	Dir    string

	remount func(ctx context.Context) error
	// procs, if set, lists the processes that do the target's work now
	// (a weft target as separate processes: its servers and the mount
	// daemon, which a remount replaces).
	procs func() ([]targetProc, error)
	// requests, if set, is how many requests the target's servers have
	// served so far, by method (their metrics' request counters).
	requests func(ctx context.Context) (map[string]float64, error)
	mu       sync.Mutex
	stops    []func() error // teardown steps, run newest first
	closed   bool
}

// onClose adds a teardown step.
func (m *Mount) onClose(stop func() error) {
	m.mu.Lock()
	m.stops = append(m.stops, stop)
	m.mu.Unlock()
}

// Remount drops what the target caches of its files: unmount and mount
// again for FUSE targets, drop the kernel's page cache for the local disk.
func (m *Mount) Remount(ctx context.Context) error {
	if m.remount == nil {
		return nil
	}
	return m.remount(ctx)
}

// CPU is the CPU time the target's processes have used so far; ok is false
// for a target whose processes the suite does not know (a kernel file
// system, or one process shared with the benchmark).
func (m *Mount) CPU() (_ time.Duration, ok bool, _ error) {
	by, ok, err := m.CPUByProcess()
	var sum time.Duration
	for _, d := range by {
		sum += d
	}
	return sum, ok, err
}

// targetProc is one of a target's processes: what it does ("mount",
// "meta", "store") and its pid.
type targetProc struct {
	Role string
	Pid  int
}

// CPUByProcess is CPU's time by what each process does (a role's
// processes added up).
func (m *Mount) CPUByProcess() (_ map[string]time.Duration, ok bool, _ error) {
	if m.procs == nil {
		return nil, false, nil
	}
	procs, err := m.procs()
	if err != nil {
		return nil, true, err
	}
	by := make(map[string]time.Duration)
	for _, p := range procs {
		d, err := processCPU(p.Pid)
		if err != nil {
			return nil, true, err
		}
		by[p.Role] += d
	}
	return by, true, nil
}

// Requests is how many requests the target's servers have served so far,
// by method (requestsByMethod); ok is false if the suite cannot read their
// counters.
func (m *Mount) Requests(ctx context.Context) (_ map[string]float64, ok bool, _ error) {
	if m.requests == nil {
		return nil, false, nil
	}
	by, err := m.requests(ctx)
	return by, true, err
}

// Close tears the target down; every step runs even if one fails. Each step
// bounds its own time.
func (m *Mount) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	stops := m.stops
	m.stops = nil
	m.mu.Unlock()
	var all []error
	for i := len(stops) - 1; i >= 0; i-- {
		if err := stops[i](); err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// mount prepares t in a fresh directory under the benchmark's scratch
// directory. With a link, the target's network hop (sshd, Redis) goes
// through a linksim proxy of that profile; targets without one refuse.
func (e *Env) mount(ctx context.Context, t Target, link *linksim.Profile) (*Mount, error) {
	base, err := os.MkdirTemp(e.Dir, t.Kind+"-")
	if err != nil {
		return nil, err
	}
	m := &Mount{Target: t}
	m.onClose(func() error { return os.RemoveAll(base) })
	e.run.addMount(m)
	if link != nil && !slices.Contains([]string{kindSSHFS, kindJuiceFSRedis}, t.Kind) {
		m.Close()
		return nil, errs.New(errs.Invalid, "bench", "%s has no network hop to put the %s link on", t.Kind, link.Name)
	}
	switch t.Kind {
	case kindLocal:
		err = e.mountLocal(m, base)
	case kindTmpfs:
		err = e.mountTmpfs(ctx, m, base)
	case kindWeft:
		err = e.mountWeft(ctx, m, base)
	case kindLoopback:
		err = e.mountLoopback(ctx, m, base)
	case kindSSHFS:
		err = e.mountSSHFS(ctx, m, base, link)
	case kindJuiceFSSQLite, kindJuiceFSRedis:
		err = e.mountJuiceFS(ctx, m, base, link)
	default:
		err = errs.New(errs.Invalid, "bench", "no target %q", t.Kind)
	}
	if err != nil {
		if cerr := m.Close(); cerr != nil {
			err = fmt.Errorf("%w (and teardown: %v)", err, cerr)
		}
		return nil, err
	}
	return m, nil
}

// eachTargetInterleaved mounts every target at once and runs reps rounds:
// each round calls fn once per target (fn measures one repeat), starting one
// target later than the round before. On a shared machine the load drifts
// over a run; taking the targets in turn spreads the drift (and whatever one
// target leaves behind for the next) over all of them instead of charging it
// to whichever ran while the machine was busy. A target that cannot be
// mounted, or whose repeat fails, is reported as skipped and measured no
// more; a canceled run stops. Every target is torn down before it returns.
func (e *Env) eachTargetInterleaved(ctx context.Context, ts []Target, reps int, fn func(m *Mount, rep int) error) error {
	return e.eachTargetInterleavedSteps(ctx, ts, reps, 1, func(m *Mount, rep, _ int) error { return fn(m, rep) })
}

// eachTargetInterleavedSteps is eachTargetInterleaved for a repeat made of
// steps (andrew's phases) that are compared between the targets one by
// one: each round runs step 0 on every target, then step 1 on every
// target, and so on, so that the targets' samples of one step lie seconds
// apart, not a whole repeat. A target whose step fails runs no further
// step or round.
func (e *Env) eachTargetInterleavedSteps(ctx context.Context, ts []Target, reps, steps int, fn func(m *Mount, rep, step int) error) error {
	type live struct {
		m   *Mount
		err error
	}
	var all []*live
	defer func() {
		for _, l := range all {
			if cerr := l.m.Close(); cerr != nil {
				e.run.opts.Log.Warn("teardown failed", "target", l.m.Target.Name, "err", cerr)
			}
		}
	}()
	for _, t := range ts {
		if err := ctx.Err(); err != nil {
			return err
		}
		e.step("mount " + t.Name)
		m, err := e.mount(ctx, t, nil)
		if err != nil {
			e.skip(t.Name, err)
			continue
		}
		all = append(all, &live{m: m})
	}
	for rep := range reps {
		for step := range steps {
			for j := range all {
				l := all[(rep+j)%len(all)]
				if l.err != nil {
					continue
				}
				if l.err = fn(l.m, rep, step); l.err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					e.skip(l.m.Target.Name, l.err)
				}
			}
		}
	}
	return nil
}

// eachTarget mounts every target in turn, runs fn on it and tears it down.
// A target that cannot be mounted, or whose run fails, is reported as
// skipped and the benchmark goes on with the next one; a canceled run stops.
func (e *Env) eachTarget(ctx context.Context, ts []Target, link *linksim.Profile, fn func(m *Mount) error) error {
	for _, t := range ts {
		if err := ctx.Err(); err != nil {
			return err
		}
		e.step("mount " + t.Name)
		m, err := e.mount(ctx, t, link)
		if err != nil {
			e.skip(t.Name, err)
			continue
		}
		err = fn(m)
		if cerr := m.Close(); cerr != nil {
			e.run.opts.Log.Warn("teardown failed", "target", t.Name, "err", cerr)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.skip(t.Name, err)
		}
	}
	return nil
}
