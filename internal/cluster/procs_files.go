package cluster

// The files of a local multi-process cluster besides the cluster file: the
// pid file, the lock that keeps two commands from starting or stopping the
// same directory at once, and what /proc says about a recorded process.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
)

// lockFileName is the file flock(2)ed while a command starts or stops the
// cluster of a directory.
const lockFileName = ".cluster.lock"

// pidFile is the content of DIR/pids (JSON): what a later command needs to
// find, stop and restart the processes.
type pidFile struct {
	Binary   string     `json:"binary"`
	LogLevel string     `json:"log_level,omitempty"`
	MetaCPU  float64    `json:"meta_cpu,omitempty"`
	Cgroup   string     `json:"cgroup,omitempty"`
	CgroupV2 bool       `json:"cgroup_v2,omitempty"`
	Servers  []pidEntry `json:"servers"`
}

// pidEntry names one process for the life of the machine: a pid is reused,
// a pid with its start time is not.
type pidEntry struct {
	Role Role `json:"role"`
	ID   int  `json:"id"`
	Pid  int  `json:"pid"`
	// StartTime is field 22 of /proc/PID/stat: clock ticks after boot.
	StartTime uint64 `json:"start_time"`
}

func readPidFile(dir string) (*pidFile, error) {
	path := filepath.Join(dir, PidFileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, errs.Wrap(errs.NotExist, "read pid file", path, err)
	}
	if err != nil {
		return nil, errs.Wrap(errs.IO, "read pid file", path, err)
	}
	var pf pidFile
	if err := json.Unmarshal(data, &pf); err != nil {
		return nil, errs.Wrap(errs.Corrupt, "read pid file", path, err)
	}
	return &pf, nil
}

// writePidFileLocked records the processes, atomically (a temporary file
// renamed over the old one), so a reader never sees half a file.
func (p *Procs) writePidFileLocked() error {
	pf := pidFile{Binary: p.binary, LogLevel: p.logLevel, MetaCPU: p.metaCPU}
	if p.cgroup != nil {
		pf.Cgroup, pf.CgroupV2 = p.cgroup.root, p.cgroup.v2
	}
	for _, pr := range p.mu.procs {
		pf.Servers = append(pf.Servers, pidEntry{Role: pr.role, ID: pr.id, Pid: pr.pid, StartTime: pr.startTime})
	}
	data, err := json.MarshalIndent(&pf, "", "  ")
	if err != nil {
		return errs.Wrap(errs.Other, "write pid file", p.dir, err)
	}
	path := filepath.Join(p.dir, PidFileName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return errs.Wrap(errs.IO, "write pid file", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return errs.Wrap(errs.IO, "write pid file", path, err)
	}
	return nil
}

// OpenProcs returns the local cluster whose processes the pid file of dir
// lists, to stop it or to kill and restart its servers. It fails with
// errs.NotExist when dir has no pid file: no cluster was started there, or
// it was stopped. Processes that have exited since are reported as not
// running.
func OpenProcs(dir string) (*Procs, error) {
	const op = "open local cluster"
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, errs.Wrap(errs.Invalid, op, dir, err)
	}
	// As StartProcs names it (a missing dir is left to readPidFile).
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	pf, err := readPidFile(dir)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, ClusterFileName)
	cfg, err := config.Load(file)
	if err != nil {
		// Not NotExist, which says that nothing was started here.
		return nil, &errs.Error{Kind: errs.Other, Op: op, Path: dir,
			Msg: "its pid file lists servers, but the cluster file cannot be read", Err: err}
	}
	p := &Procs{
		dir:      dir,
		file:     file,
		binary:   pf.Binary,
		logLevel: pf.LogLevel,
		metaCPU:  pf.MetaCPU,
		timeout:  DefaultProcsStartTimeout,
		cfg:      cfg,
	}
	if pf.Cgroup != "" {
		p.cgroup = &cpuCgroup{root: pf.Cgroup, v2: pf.CgroupV2}
	}
	if p.dial, err = DialOptions(cfg, ""); err != nil {
		return nil, errs.WithPath(err, op, dir)
	}
	p.mu.procs = p.procList()
	for _, e := range pf.Servers {
		if i := slices.IndexFunc(p.mu.procs, func(pr *proc) bool { return pr.role == e.Role && pr.id == e.ID }); i >= 0 {
			p.mu.procs[i].pid, p.mu.procs[i].startTime = e.Pid, e.StartTime
		}
	}
	return p, nil
}

// checkNotRunning fails when a process of dir's pid file still runs. A pid
// file whose processes are all gone (a crash, a reboot) is stale: it and its
// cgroups are removed.
func checkNotRunning(dir string) error {
	p, err := OpenProcs(dir)
	if errs.Is(err, errs.NotExist) {
		return nil
	}
	if err != nil {
		pf, perr := readPidFile(dir)
		if perr != nil {
			return err
		}
		// No usable cluster file: judge by the pid file alone.
		for _, e := range pf.Servers {
			if e.Pid != 0 && procAlive(e.Pid, e.StartTime, "", e.Role) {
				return errs.New(errs.Busy, "start local cluster", "%s %d (pid %d) of %s is still running", e.Role, e.ID, e.Pid, dir)
			}
		}
		return os.Remove(filepath.Join(dir, PidFileName))
	}
	var running []string
	for _, s := range p.Servers() {
		if s.Running {
			running = append(running, fmt.Sprintf("%s %d (pid %d)", s.Role, s.ID, s.Pid))
		}
	}
	if len(running) > 0 {
		return errs.New(errs.Busy, "start local cluster", "a cluster is already running in %s: %s; stop it first (weft cluster stop --dir %s)",
			dir, strings.Join(running, ", "), dir)
	}
	// Stale: nothing runs, so this removes only files.
	return p.stopLocked(0, true)
}

// lockDir takes the directory's lock, waiting while another command holds
// it, for at most a minute.
func lockDir(ctx context.Context, dir string) (unlock func(), err error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, errs.Wrap(errs.IO, "lock", path, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, errs.Wrap(errs.Busy, "lock", path, fmt.Errorf("another weft cluster command is working on %s: %w", dir, err))
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, errs.Wrap(errs.Canceled, "lock", path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// procStat returns the state (R, S, Z, ...) and the start time of a
// process from /proc/PID/stat.
func procStat(pid int) (state byte, startTime uint64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses,
	// so the fields are counted from the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(data[i+1:])) // fields[0] is field 3
	const startField = 22
	if len(fields) < startField-2 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	start, err := strconv.ParseUint(fields[startField-3], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return fields[0][0], start, nil
}

// procAlive reports whether pid is the weft server that was recorded: it
// exists and has not finished exiting, started at startTime, and its
// command line runs role (with clusterFile, if given).
func procAlive(pid int, startTime uint64, clusterFile string, role Role) bool {
	state, start, err := procStat(pid)
	if err != nil || start != startTime {
		return false
	}
	if state == 'Z' || state == 'X' {
		// The main thread of a killed process is a zombie while its other
		// threads still exit, holding its files and sockets: a restart
		// on its port must wait for them.
		return otherThreads(pid)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	if len(cmdline) == 0 {
		// An exiting process has lost its memory, and with it its command
		// line, but maybe not yet its files and sockets.
		return true
	}
	args := strings.Split(string(cmdline), "\x00")
	return slices.Contains(args, string(role)) && (clusterFile == "" || slices.Contains(args, clusterFile))
}

// otherThreads reports whether a process whose main thread has exited
// still has threads.
func otherThreads(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(data)) {
		if n, ok := strings.CutPrefix(line, "Threads:"); ok {
			threads, err := strconv.Atoi(strings.TrimSpace(n))
			return err == nil && threads > 1
		}
	}
	return false
}

// logTail returns the last lines of a log written after offset, for an
// error message.
func logTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	const maxBytes = 4000
	if st, err := f.Stat(); err == nil && st.Size()-offset > maxBytes {
		offset = st.Size() - maxBytes
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return "(" + err.Error() + ")"
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "(nothing)"
	}
	return strings.Join(lines, "\n")
}
