package bench

// A weft target as separate processes: `weft cluster start` (one meta and
// one store server) and a `weft mount` daemon, so that every call of the
// mount crosses a real connection in the target's security mode.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"

	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
)

// securityRecordsVariant is Target.Security for secure mode with the
// record layer kept on loopback connections (--records-on-loopback).
const securityRecordsVariant = "secure-records"

// mountWeftProcs starts t's cluster under base/cluster and mounts it on
// base/mnt with the cluster's admin identity. A remount restarts the mount
// daemon only (its page cache goes); the servers keep running.
func (e *Env) mountWeftProcs(ctx context.Context, m *Mount, base, bin string) error {
	dir := filepath.Join(base, "cluster")
	m.Dir = filepath.Join(base, "mnt")
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return err
	}
	t := m.Target
	// --metrics: the servers' request counters say what work each phase
	// asked of them (Mount.Requests).
	args := []string{"cluster", "start", "--dir", dir, "--meta", "1", "--store", "1", "--metrics", "--security", t.Security}
	if t.Security == securityRecordsVariant {
		args = []string{"cluster", "start", "--dir", dir, "--meta", "1", "--store", "1", "--metrics", "--security", config.SecuritySecure, "--records-on-loopback"}
	}
	var mountArgs []string
	switch t.Durability {
	case "":
	case config.DurabilityWriteback:
		// The servers stay sync: the mount writes back.
		args = append(args, "--durability", config.DurabilitySync)
		mountArgs = []string{"--durability", config.DurabilityWriteback}
	default:
		args = append(args, "--durability", t.Durability)
	}
	if t.Backend != "" {
		args = append(args, "--backend", t.Backend)
	}
	if t.LeaseTerm > 0 {
		args = append(args, "--lease-term", t.LeaseTerm.String())
	}
	// Teardown runs even when the run was canceled (its context's values,
	// not its cancel), each step bounded by unmountTimeout.
	teardown := context.WithoutCancel(ctx)
	stop := func() error {
		return run(teardown, unmountTimeout, bin, "cluster", "stop", "--dir", dir)
	}
	if err := run(ctx, mountTimeout, bin, args...); err != nil {
		return errors.Join(err, stop())
	}
	m.onClose(stop)
	servers, err := cluster.OpenProcs(dir)
	if err != nil {
		return err
	}
	var mountPid atomic.Int64 // the mount daemon's, once mounted
	mount := func(ctx context.Context) error {
		margs := append([]string{"mount", "--cluster", filepath.Join(dir, "weft.toml"), "-d",
			"--log-file", filepath.Join(base, "mount.log")}, mountArgs...)
		out, err := runOutput(ctx, mountTimeout, bin, append(margs, m.Dir)...)
		if err != nil {
			return err
		}
		pid, err := backgroundPid(out)
		if err != nil {
			return err
		}
		mountPid.Store(int64(pid))
		return waitMounted(ctx, m.Dir, nil)
	}
	m.procs = func() ([]targetProc, error) {
		procs := []targetProc{{Role: "mount", Pid: int(mountPid.Load())}}
		for _, s := range servers.Servers() {
			if !s.Running {
				return nil, fmt.Errorf("%s server %d is not running", s.Role, s.ID)
			}
			procs = append(procs, targetProc{Role: string(s.Role), Pid: s.Pid})
		}
		return procs, nil
	}
	cfg, err := config.Load(filepath.Join(dir, "weft.toml"))
	if err != nil {
		return err
	}
	var metrics []string
	for _, s := range cfg.Meta {
		metrics = append(metrics, s.MetricsAddr)
	}
	for _, s := range cfg.Store {
		metrics = append(metrics, s.MetricsAddr)
	}
	m.requests = func(ctx context.Context) (map[string]float64, error) { return requestsServed(ctx, metrics) }
	// The mount daemon exits when its mount goes away.
	umount := func() error {
		if !isMounted(m.Dir) {
			return nil
		}
		err := run(teardown, unmountTimeout, bin, "umount", m.Dir)
		if err != nil || isMounted(m.Dir) {
			return errors.Join(err, unmount(m.Dir, "fusermount3"))
		}
		return nil
	}
	m.onClose(umount)
	m.remount = func(ctx context.Context) error {
		if err := umount(); err != nil {
			return err
		}
		return mount(ctx)
	}
	if v := commandVersion(bin, "version"); v != "" {
		e.run.version("weft", v)
	}
	return mount(ctx)
}

// backgroundPidRE finds the pid weft mount -d prints: "running in the
// background (pid N)".
var backgroundPidRE = regexp.MustCompile(`\(pid (\d+)\)`)

// backgroundPid is the pid in the output of weft mount -d.
func backgroundPid(out []byte) (int, error) {
	m := backgroundPidRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("weft mount -d printed no pid: %q", lastLine(out))
	}
	return strconv.Atoi(string(m[1]))
}
