package fusefs

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// Options configure a mount. Zero values take the defaults the package doc
// explains.
type Options struct {
	// Client is the connection to the cluster. Required; the mount does not
	// close it.
	Client *client.Client
	// Logger receives operational warnings; nil discards them.
	Logger *slog.Logger
	// FsName is the source column of /proc/mounts ("weft" if empty).
	FsName string
	// AllowOther lets users other than the one mounting use the mount
	// (needs root or user_allow_other in /etc/fuse.conf).
	AllowOther bool
	// EntryTimeout and AttrTimeout bound how long the kernel trusts a name
	// and attributes (default 1 s; negative means 0). NegativeTimeout is how
	// long a failed lookup is remembered (default 0).
	EntryTimeout    time.Duration
	AttrTimeout     time.Duration
	NegativeTimeout time.Duration
	// MaxWrite is the largest read or write request (default and maximum
	// 1 MiB).
	MaxWrite int
	// ReadAheadKB is the kernel readahead of the mount in KiB (default 1024;
	// applied as root only, through /sys/class/bdi).
	ReadAheadKB int
	// OpTimeout bounds every weft call a request makes (default 2 min).
	OpTimeout time.Duration
	// Creds is the identity of requests that carry none (default root).
	Creds core.Creds
	// Debug logs every FUSE request and reply (go-fuse's debug output) to
	// Logger's destination through the standard log package.
	Debug bool
}

func (o *Options) setDefaults() error {
	if o.Client == nil {
		return errs.New(errs.Invalid, "mount", "no client")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.FsName == "" {
		o.FsName = "weft"
	}
	def := func(d *time.Duration, v time.Duration) {
		switch {
		case *d == 0:
			*d = v
		case *d < 0:
			*d = 0
		}
	}
	def(&o.EntryTimeout, time.Second)
	def(&o.AttrTimeout, time.Second)
	def(&o.NegativeTimeout, 0)
	def(&o.OpTimeout, 2*time.Minute)
	if o.MaxWrite <= 0 || o.MaxWrite > 1<<20 {
		o.MaxWrite = 1 << 20
	}
	if o.ReadAheadKB <= 0 {
		o.ReadAheadKB = 1024
	}
	return nil
}

// fileSystem is what every node of one mount shares.
type fileSystem struct {
	c      *client.Client
	opts   Options
	log    *slog.Logger
	groups *groupCache
	index  nodeIndex // nodes by inode, for lease recalls (lease.go)
	pg     *pgTable  // patchgroups of the mount's programs (pgctl.go)
	// leases: the client caches under read leases (client.LeasesOn), so
	// the kernel may keep only what a live lease covers (cacheFor).
	leases bool
	// life is the mount's own context, the parent of every request's
	// calls (callCtx); it ends when the mount is served no more.
	life context.Context
	// calls counts requests that reached the mount, so that a test can
	// tell what the kernel answered from its own caches.
	calls struct{ lookups, fileGetattrs atomic.Int64 }
	// growth is the content to store in the kernel's page cache with
	// a GETATTR's reply, by inode (growth.go).
	growth struct {
		sync.Mutex
		m map[core.Ino]pageStore
	}
	// lastLookups are the files the threads' last lookups found
	// (twonames.go).
	lastLookups lastLookups
	// retries are the threads answered ESTALE, whose retry may need
	// an answer other than a second ESTALE (retry.go).
	retries retries
	// hooks let a test hold the mount where the kernel's state and the
	// servers' differ; nil outside tests.
	hooks struct {
		renamed        atomic.Pointer[func()] // a rename committed; its request has not returned
		deferredNames  atomic.Pointer[func()] // before the names of a deferred recall go
		getattr        atomic.Pointer[func()] // a Getattr through a handle read the server
		heldRecall     atomic.Pointer[func()] // a recall waits for a retried open (retry.go)
		recalled       atomic.Pointer[func()] // a recall's invalidations are done; its lease is not yet released
		namesWait      atomic.Pointer[func()] // a recall of a directory found no change of this mount there; its names go next
		lookupAnswered atomic.Pointer[func()] // a lookup's server answer is in; its node is not noted yet
		renamedNames   atomic.Pointer[func()] // a rename's new name is gone from the kernel
		retryLeaseWait atomic.Pointer[func()] // a retry's lookup, refused its lease, waits for this mount's recalls
	}
}

// Mount is a mounted weft file system.
type Mount struct {
	dir    string
	dev    uint64 // the mount's device: its FUSE connection is minor(dev)
	server *fuse.Server
	fsys   *fileSystem
}

// New mounts the cluster opts.Client reaches on dir and serves it until
// Unmount (or an external umount). It refuses a dir that is already a mount
// point, and explains how to recover one left behind by a crashed mount.
func New(dir string, opts Options) (*Mount, error) {
	const op = "mount"
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, errs.Wrap(errs.Invalid, op, dir, err)
	}
	if err := CheckMountPoint(abs); err != nil {
		return nil, err
	}
	fsys := &fileSystem{c: opts.Client, opts: opts, log: opts.Logger, groups: newGroupCache(), pg: newPGTable(opts.Client)}
	// Before the mount: the kernel's first requests come at once.
	var stop context.CancelFunc
	fsys.life, stop = context.WithCancel(context.Background())
	root := &Node{fsys: fsys}
	fsys.index.root = root
	opts.Client.OnRecall(fsys.recalled)
	fsys.leases = opts.Client.LeasesOn()
	neg := opts.NegativeTimeout
	goFuseLog := log.New(slogWriter{opts.Logger}, "", 0)
	fo := &fs.Options{
		// No default entry and attribute timeouts: go-fuse would put
		// them in place of every 0 a handler sets, and 0 is what a
		// reply no lease covers must get (cacheFor). Every handler
		// that replies with an entry or attributes sets both itself.
		NegativeTimeout: &neg,
		// Mode 0 is a real mode here (chmod 000), not "unset".
		NullPermissions: true,
		RootStableAttr:  &fs.StableAttr{Ino: uint64(core.RootIno), Gen: 1},
		Logger:          goFuseLog,
		MountOptions: fuse.MountOptions{
			// The server's own messages, which go-fuse would print
			// through the standard logger.
			Logger: goFuseLog,
			// Reads answer with bytes in memory (fuse.ReadResultData),
			// never a file descriptor, so splicing cannot save a copy:
			// go-fuse would still try it for every read and, for a
			// full-size one, log that the pipe is too small.
			DisableSplice: true,
			FsName:        opts.FsName,
			Name:          "weft",
			AllowOther:    opts.AllowOther,
			Options:       []string{"default_permissions"},
			MaxWrite:      opts.MaxWrite,
			MaxReadAhead:  opts.MaxWrite,
			MaxBackground: 64,
			// Handed to the kernel with the mount: no fusermount needed
			// as root, and no daemon left behind by it.
			DirectMount:          os.Geteuid() == 0,
			EnableSymlinkCaching: true,
			// The page cache is dropped at open when the file changed
			// (openFlags), not whenever a getattr shows a new mtime: this
			// mount's own writes move the mtime all the time.
			ExplicitDataCacheControl: true,
			// O_TRUNC in OPEN (one round trip); suid/sgid cleared by the
			// server on write, truncate and chown, so the kernel does not
			// send a chmod as the writer (which only the owner may do).
			ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_HANDLE_KILLPRIV_V2,
			Debug:             opts.Debug,
			// fcntl and flock locks go to the meta server (node_lock.go).
			EnableLocks: true,
		},
	}
	server, err := mountWithLocks(abs, root, fo)
	if err != nil {
		stop()
		return nil, errs.Wrap(errs.IO, op, abs, err)
	}
	closeFuseOnExec()
	go func() {
		server.Wait()
		stop()
	}()
	m := &Mount{dir: abs, server: server, fsys: fsys}
	var st syscall.Stat_t
	if err := syscall.Stat(abs, &st); err == nil {
		m.dev = st.Dev
	}
	if os.Geteuid() == 0 {
		m.setReadAhead()
	}
	return m, nil
}

// Dir returns the mount point.
func (m *Mount) Dir() string { return m.dir }

// Wait blocks until the file system is unmounted.
func (m *Mount) Wait() { m.server.Wait() }

// Unmount detaches the file system. If it is busy (a process has a file
// open or its working directory in it) and lazy is set, it is detached
// from the namespace at once and served until the last user lets go.
func (m *Mount) Unmount(lazy bool) error {
	done := make(chan error, 1)
	go func() { done <- m.server.Unmount() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(lingerTimeout):
		// go-fuse's Unmount returns within a second when umount(2)
		// fails; still waiting means the mount is gone but the kernel
		// keeps the connection (something outside this process holds
		// it): cut it, or this process would serve nothing forever.
		if _, mounted := mountAt(m.dir); !mounted {
			m.fsys.log.Warn("the kernel kept the FUSE connection after the unmount; aborting it", "mountpoint", m.dir)
			_ = m.Abort()
		}
		err = <-done
	}
	if err == nil {
		return nil
	}
	if !lazy {
		return errs.Wrap(errs.Busy, "unmount", m.dir, err)
	}
	if lerr := lazyUnmount(m.dir); lerr != nil {
		return errs.Wrap(errs.Busy, "unmount", m.dir, errors.Join(err, lerr))
	}
	m.server.Wait()
	return nil
}

// lingerTimeout is how long Unmount waits for the kernel to close the
// connection of a mount that is gone.
const lingerTimeout = 10 * time.Second

// Abort cuts the kernel connection: every request in flight and every later
// one fails with ENOTCONN, and a detached mount goes away even while
// processes still hold files open in it. For tests and last resorts.
func (m *Mount) Abort() error {
	if m.dev == 0 {
		return errs.New(errs.Invalid, "abort", "device of %s unknown", m.dir)
	}
	const ctl = "/sys/fs/fuse/connections"
	abort := fmt.Sprintf("%s/%d/abort", ctl, minor(m.dev))
	if _, err := os.Stat(abort); errors.Is(err, os.ErrNotExist) {
		// The fusectl file system is not always mounted.
		_ = syscall.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	return os.WriteFile(abort, []byte("1"), 0)
}

// setReadAhead raises the kernel readahead of the mount beyond the 128 KiB
// a FUSE mount starts with: sequential reads then arrive as 1 MiB requests
// the client serves from whole chunks. Best effort.
func (m *Mount) setReadAhead() {
	bdi := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", major(m.dev), minor(m.dev))
	if err := os.WriteFile(bdi, []byte(fmt.Sprint(m.fsys.opts.ReadAheadKB)), 0); err != nil {
		m.fsys.log.Debug("could not raise readahead", slog.String("bdi", bdi), slog.Any("err", err))
	}
}

// closeFuseOnExec marks this process's /dev/fuse descriptors close-on-exec.
// go-fuse opens the device without O_CLOEXEC when it mounts directly, and a
// child process (a program the tests run, a shell) that inherited it would
// keep the mount's connection alive after the unmount, for as long as it
// runs.
func closeFuseOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == "/dev/fuse" {
			syscall.CloseOnExec(fd)
		}
	}
}

func major(dev uint64) uint64 { return (dev >> 8) & 0xfff }
func minor(dev uint64) uint64 { return (dev & 0xff) | ((dev >> 12) & 0xfff00) }

// slogWriter turns go-fuse's log lines into warnings of a slog logger.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Warn(strings.TrimRight(string(p), "\n"), slog.String("source", "go-fuse"))
	return len(p), nil
}
