package bench

// Local targets (a directory, tmpfs), FUSE mount plumbing shared by the FUSE
// targets, and the weft and loopback FUSE targets.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// Time limits of target setup and teardown.
const (
	mountTimeout   = 60 * time.Second
	unmountTimeout = 30 * time.Second
	stopTimeout    = 10 * time.Second
)

func (e *Env) mountLocal(m *Mount, base string) error {
	m.Dir = filepath.Join(base, "fs")
	m.remount = dropCaches
	e.run.version("local", describeMachine(base).Disk)
	return os.MkdirAll(m.Dir, 0o755)
}

// dropCaches writes back dirty pages and empties the page cache, so the next
// read of a local file comes from the disk.
func dropCaches(ctx context.Context) error {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return errs.Wrap(errs.Permission, "drop caches", "/proc/sys/vm/drop_caches", err)
	}
	return nil
}

func (e *Env) mountTmpfs(ctx context.Context, m *Mount, base string) error {
	m.Dir = filepath.Join(base, "fs")
	if err := mountTmpfsAt(ctx, m, m.Dir); err != nil {
		return err
	}
	e.run.version("tmpfs", "kernel tmpfs")
	return nil
}

// mountTmpfsAt mounts a tmpfs on dir and adds its unmount to m's teardown.
// Its content is its cache, so remounting has nothing to drop.
func mountTmpfsAt(ctx context.Context, m *Mount, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := run(ctx, mountTimeout, "mount", "-t", "tmpfs", "-o", "size=16g,mode=0755", "tmpfs", dir); err != nil {
		return fmt.Errorf("cannot mount a tmpfs (needs root): %w", err)
	}
	m.onClose(func() error { return unmount(dir, "umount") })
	return nil
}

// isMounted reports whether dir is a mount point of this mount namespace.
func isMounted(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountPath(fields[4]) == dir {
			return true
		}
	}
	return false
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(byte(c))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmount unmounts dir with the given program (fusermount3 or umount),
// retrying while it is busy, then lazily; bounded by unmountTimeout.
func unmount(dir, program string) error {
	if !isMounted(dir) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), unmountTimeout)
	defer cancel()
	args := func(lazy bool) []string {
		if program == "fusermount3" {
			if lazy {
				return []string{"-u", "-z", dir}
			}
			return []string{"-u", dir}
		}
		if lazy {
			return []string{"-l", dir}
		}
		return []string{dir}
	}
	var last error
	for i := 0; i < 20 && isMounted(dir); i++ {
		if last = run(ctx, 5*time.Second, program, args(false)...); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !isMounted(dir) {
		return nil
	}
	if err := run(ctx, 5*time.Second, program, args(true)...); err != nil {
		return errors.Join(last, err)
	}
	return nil
}

// child is a long-running process a target started (a FUSE daemon in the
// foreground, sshd, redis-server); its output goes to a log file so a
// failure can be explained.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done
}

// startChild starts a process whose output goes to logPath.
func startChild(name, logPath, program string, args ...string) (*child, error) {
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(program, args...)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so a Ctrl-C at the terminal reaches the suite,
	// which then stops its children in order (unmount before kill).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, errs.Wrap(errs.Unavailable, "start "+name, program, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		out.Close()
		close(c.done)
	}()
	return c, nil
}

// exited reports whether the process has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// failure describes why the process ended, from its log.
func (c *child) failure() error {
	b, _ := os.ReadFile(c.log)
	return errs.New(errs.Unavailable, c.name, "exited (%v): %s", c.err, lastLine(b))
}

// stop ends the process: SIGTERM, then SIGKILL after stopTimeout.
func (c *child) stop() error {
	if c.exited() {
		return nil
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return nil
	case <-time.After(stopTimeout):
	}
	c.cmd.Process.Kill()
	select {
	case <-c.done:
	case <-time.After(stopTimeout):
		return errs.New(errs.Timeout, c.name, "pid %d did not exit after SIGKILL", c.cmd.Process.Pid)
	}
	return nil
}

// waitMounted waits until dir is a mount point; it fails early if the
// serving process (if any) exits.
func waitMounted(ctx context.Context, dir string, c *child) error {
	deadline := time.Now().Add(mountTimeout)
	for !isMounted(dir) {
		if c != nil && c.exited() {
			return c.failure()
		}
		if time.Now().After(deadline) {
			return errs.New(errs.Timeout, "mount", "%s not mounted after %v", dir, mountTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// fuseDaemon runs a FUSE file system in the foreground as a child: start
// mounts it (waiting until the mount appears), stop unmounts it and ends
// the process. Remounting is stop then start.
type fuseDaemon struct {
	name    string
	dir     string // mount point
	logPath string
	argv    func() (string, []string)
	proc    *child
}

func (d *fuseDaemon) start(ctx context.Context) error {
	prog, args := d.argv()
	c, err := startChild(d.name, d.logPath, prog, args...)
	if err != nil {
		return err
	}
	d.proc = c
	if err := waitMounted(ctx, d.dir, c); err != nil {
		d.stop()
		return err
	}
	return nil
}

func (d *fuseDaemon) stop() error {
	err := unmount(d.dir, "fusermount3")
	if d.proc != nil {
		// An unmounted FUSE daemon exits by itself; give it the chance.
		select {
		case <-d.proc.done:
		case <-time.After(stopTimeout):
		}
		err = errors.Join(err, d.proc.stop())
	}
	return err
}

func (d *fuseDaemon) remount(ctx context.Context) error {
	if err := d.stop(); err != nil {
		return err
	}
	return d.start(ctx)
}

// mountLoopback mounts go-fuse's loopback example over a tmpfs: the cost of
// FUSE itself, with the fastest file system underneath. It is mounted as
// weft's mounts are, allow_other with default_permissions (go-fuse's
// -allow-other sets both): the kernel then checks permissions itself and
// asks the daemon for a directory's attributes after each create and
// unlink in it, one request more per file that a mount without them does
// not pay.
func (e *Env) mountLoopback(ctx context.Context, m *Mount, base string) error {
	bin, err := e.run.tools.loopback(ctx)
	if err != nil {
		return err
	}
	back := filepath.Join(base, "back")
	if err := mountTmpfsAt(ctx, m, back); err != nil {
		return err
	}
	m.Dir = filepath.Join(base, "mnt")
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return err
	}
	d := &fuseDaemon{name: "loopback", dir: m.Dir, logPath: filepath.Join(base, "loopback.log"),
		argv: func() (string, []string) { return bin, []string{"-q", "-allow-other", m.Dir, back} }}
	m.onClose(d.stop)
	m.remount = d.remount
	e.run.version("loopback", goFuseLoopback+" over tmpfs")
	return d.start(ctx)
}

// stopDaemons ends the weft up daemons this benchmark started on data
// (found by their command line, which names this run's own data
// directory): a daemon that is still running a moment after its unmount is
// asked to stop with SIGTERM, as Ctrl-C would, and killed if it does not.
func stopDaemons(data string) error {
	wait := func(d time.Duration) []int {
		deadline := time.Now().Add(d)
		for {
			pids := daemonsOn(data)
			if len(pids) == 0 || time.Now().After(deadline) {
				return pids
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	pids := wait(2 * time.Second)
	if len(pids) == 0 {
		return nil
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	if pids = wait(stopTimeout); len(pids) == 0 {
		return nil
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return errs.New(errs.Timeout, "weft up", "daemon on %s ignored SIGTERM for %v: killed pids %v", data, stopTimeout, pids)
}

// daemonsOn returns the pids of processes whose command line has
// "--data DATA" or "--data=DATA".
func daemonsOn(data string) []int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		for i := 0; i < len(args); i++ {
			if args[i] == "--data="+data || args[i] == "--data" && i+1 < len(args) && args[i+1] == data {
				var pid int
				fmt.Sscanf(filepath.Base(filepath.Dir(p)), "%d", &pid)
				if pid > 0 && pid != os.Getpid() {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}

// weftBinary is the weft executable that runs the weft target.
func (e *Env) weftBinary() (string, error) {
	if e.run.opts.Weft != "" {
		return e.run.opts.Weft, nil
	}
	return os.Executable()
}

// mountWeft runs weft up --mount --background: one meta and one store server
// and the FUSE client in a daemon process, with data under base.
func (e *Env) mountWeft(ctx context.Context, m *Mount, base string) error {
	bin, err := e.weftBinary()
	if err != nil {
		return err
	}
	if m.Target.Security != "" {
		return e.mountWeftProcs(ctx, m, base, bin)
	}
	version := "weft"
	if m.Target.Binary != "" {
		bin, version = m.Target.Binary, "weft (base)"
	}
	data := filepath.Join(base, "data")
	m.Dir = filepath.Join(base, "mnt")
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return err
	}
	t := m.Target
	up := func(ctx context.Context) error {
		args := []string{"up", "--data", data, "--mount", m.Dir, "--background"}
		if t.Durability != "" {
			args = append(args, "--durability", t.Durability)
		}
		if t.Backend != "" {
			args = append(args, "--backend", t.Backend)
		}
		if t.Backend == "mem" {
			args = append(args, "--mem-limit", "6GiB")
		}
		// The daemon may keep inherited descriptors open: its output goes to
		// a file, never a pipe this process would wait on.
		logPath := filepath.Join(base, "weft-up.log")
		c, err := startChild("weft up", logPath, bin, args...)
		if err != nil {
			return err
		}
		select {
		case <-c.done:
		case <-time.After(mountTimeout):
			c.stop()
			return errs.New(errs.Timeout, "weft up --background", "did not return within %v", mountTimeout)
		case <-ctx.Done():
			c.stop()
			return ctx.Err()
		}
		if c.err != nil {
			return c.failure()
		}
		return waitMounted(ctx, m.Dir, nil)
	}
	// down unmounts and waits for the daemon to exit, so that a remount
	// finds its ports free.
	down := func() error {
		var err error
		if isMounted(m.Dir) {
			err = run(context.Background(), unmountTimeout, bin, "umount", m.Dir)
			if err != nil || isMounted(m.Dir) {
				// weft umount did not do it: unmount by hand; the daemon
				// exits when its mount goes away.
				err = errors.Join(err, unmount(m.Dir, "fusermount3"))
			} else {
				err = nil
			}
		}
		return errors.Join(err, stopDaemons(data))
	}
	m.onClose(down)
	m.remount = func(ctx context.Context) error {
		if err := down(); err != nil {
			return err
		}
		return up(ctx)
	}
	if v := commandVersion(bin, "version"); v != "" {
		e.run.version(version, v)
	}
	return up(ctx)
}
