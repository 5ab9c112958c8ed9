package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"maps"
	"math"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// File locks: fcntl byte-range locks and flock, arbitrated by the meta
// server that allocated the file's inode, so that clients (and so mounts)
// exclude each other. A client has one lock session, a random 64-bit id
// made at its first lock request; it keeps the session alive with a
// keepalive every lockKeepAliveEvery to every meta server it locked on, and
// Close ends it, releasing whatever it still holds. A client that dies stops
// sending keepalives and its locks go away when the session expires on the
// server (lease.DefaultSessionTTL, 10 s). docs/fuse.md, "Locks", has the whole
// story.

// LockType is the kind of a lock.
type LockType uint8

const (
	// Unlock removes locks (in SetLock) or says there is no lock (from
	// GetLock).
	Unlock LockType = iota
	// ReadLock is shared: any number of owners may hold overlapping ones.
	ReadLock
	// WriteLock is exclusive.
	WriteLock
)

// MaxLockEnd is the largest offset a lock covers; a lock that ends there
// covers the file to its end, however long it grows.
const MaxLockEnd = math.MaxInt64

// Lock is a lock on bytes Start..End (both inclusive) of a file.
type Lock struct {
	Type       LockType
	Start, End uint64
	Pid        uint32 // the holder's process, as its kernel named it
}

// LockOwner names who holds a lock within this client: for the FUSE layer,
// the kernel's lock owner (a process's file table for POSIX locks, an open
// file description for flock). POSIX and flock locks never conflict with
// each other.
type LockOwner struct {
	ID    uint64
	Flock bool
}

const (
	// lockKeepAliveEvery is how often a client renews its lock session:
	// a fifth of the server's 10 s session lifetime, so that a few lost or
	// late keepalives do not cost the locks.
	lockKeepAliveEvery = 2 * time.Second
	// lockWaitSlice is how long one blocking lock request waits on the
	// server before the client asks again.
	lockWaitSlice = 30 * time.Second
	// lockEndTimeout bounds the calls that end the session at Close.
	lockEndTimeout = 2 * time.Second
)

// lockSession is a client's lock session. The zero value is ready: the id
// and the keepalive loop start with the first lock request.
type lockSession struct {
	mu struct {
		sync.Mutex
		id uint64
		// servers are the meta servers (index into metas) the session
		// sent requests to, true once one was answered; nil until the
		// session starts.
		servers map[int]bool
		ended   bool
	}
	stop chan struct{} // closed by endLocks; set with mu.servers
	done chan struct{} // closed when the keepalive loop has returned
}

// lockPeer returns the meta server that arbitrates the locks of ino: the
// one whose id is in the inode's top bits.
func (c *Client) lockPeer(ino core.Ino) (int, *rpc.Peer) {
	i := ino.Server() % len(c.metas)
	return i, c.metas[i]
}

// lockSessionFor returns the session id, starting the session (and its
// keepalives to server) if needed.
func (c *Client) lockSessionFor(server int) (uint64, error) {
	s := &c.locks
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.ended {
		return 0, errs.New(errs.Unavailable, "lock", "client is closed")
	}
	if s.mu.servers == nil {
		var b [8]byte
		for s.mu.id == 0 {
			_, _ = rand.Read(b[:]) // never fails (crypto/rand)
			s.mu.id = binary.LittleEndian.Uint64(b[:])
		}
		s.mu.servers = make(map[int]bool)
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go c.keepLocksAlive(s.mu.id, s.stop, s.done)
	}
	if _, ok := s.mu.servers[server]; !ok {
		s.mu.servers[server] = false
	}
	return s.mu.id, nil
}

// answered notes that server knows the session: from now on, a keepalive
// it does not recognise means it lost the session's locks.
func (s *lockSession) answered(server int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.servers != nil {
		s.mu.servers[server] = true
	}
}

// SetLock sets lk for owner on ino, or removes owner's locks in lk's range
// if lk.Type is Unlock. It fails with errs.Busy if another owner holds a
// conflicting lock.
func (c *Client) SetLock(ctx context.Context, ino core.Ino, owner LockOwner, lk Lock) error {
	return c.setLock(ctx, ino, owner, lk, false)
}

// SetLockWait is SetLock that waits for conflicting locks to go away. It
// returns errs.Canceled when ctx ends first (an interrupted F_SETLKW).
// There is no deadlock detection: two owners waiting for each other wait
// until one is interrupted.
func (c *Client) SetLockWait(ctx context.Context, ino core.Ino, owner LockOwner, lk Lock) error {
	return c.setLock(ctx, ino, owner, lk, true)
}

func (c *Client) setLock(ctx context.Context, ino core.Ino, owner LockOwner, lk Lock, wait bool) error {
	const op = "lock"
	r, err := lockRange(op, lk)
	if err != nil {
		return err
	}
	server, p := c.lockPeer(ino)
	session, err := c.lockSessionFor(server)
	if err != nil {
		return err
	}
	req := &weftpb.SetLockRequest{
		Ino:   uint64(ino),
		Owner: &weftpb.LockOwner{Session: session, Owner: owner.ID, Flock: owner.Flock},
		Lock:  r,
	}
	if wait {
		req.WaitMs = uint32(lockWaitSlice / time.Millisecond)
	}
	for {
		// Setting a lock is idempotent (the owner's state over the range
		// becomes lk), so a request lost with its connection may be sent
		// again.
		var reply weftpb.SetLockReply
		if err := c.callIdempotent(ctx, p, weftpb.MethodSetLock, req, &reply); err != nil {
			return err
		}
		c.locks.answered(server)
		if reply.Granted {
			return nil
		}
		if !wait {
			return errs.New(errs.Busy, op, "inode %d: a conflicting lock is held", ino)
		}
		if err := ctx.Err(); err != nil {
			return errs.Wrap(errs.Canceled, op, "", err)
		}
	}
}

// GetLock returns a lock that would conflict with owner setting lk on ino,
// or a Lock of type Unlock if there is none (F_GETLK).
func (c *Client) GetLock(ctx context.Context, ino core.Ino, owner LockOwner, lk Lock) (Lock, error) {
	const op = "getlock"
	r, err := lockRange(op, lk)
	if err != nil {
		return Lock{}, err
	}
	server, p := c.lockPeer(ino)
	session, err := c.lockSessionFor(server)
	if err != nil {
		return Lock{}, err
	}
	req := &weftpb.GetLockRequest{
		Ino:   uint64(ino),
		Owner: &weftpb.LockOwner{Session: session, Owner: owner.ID, Flock: owner.Flock},
		Lock:  r,
	}
	var reply weftpb.GetLockReply
	if err := c.callIdempotent(ctx, p, weftpb.MethodGetLock, req, &reply); err != nil {
		return Lock{}, err
	}
	c.locks.answered(server)
	got := Lock{Type: Unlock}
	if cf := reply.Conflict; cf != nil && cf.Type != weftpb.LockType_LOCK_UNLOCK {
		got = Lock{Type: WriteLock, Start: cf.Start, End: cf.End, Pid: cf.Pid}
		if cf.Type == weftpb.LockType_LOCK_READ {
			got.Type = ReadLock
		}
	}
	return got, nil
}

func lockRange(op string, lk Lock) (*weftpb.LockRange, error) {
	if lk.Start > lk.End || lk.End > MaxLockEnd {
		return nil, errs.New(errs.Invalid, op, "bad lock range %d..%d", lk.Start, lk.End)
	}
	r := &weftpb.LockRange{Start: lk.Start, End: lk.End, Pid: lk.Pid}
	switch lk.Type {
	case Unlock:
		r.Type = weftpb.LockType_LOCK_UNLOCK
	case ReadLock:
		r.Type = weftpb.LockType_LOCK_READ
	case WriteLock:
		r.Type = weftpb.LockType_LOCK_WRITE
	default:
		return nil, errs.New(errs.Invalid, op, "unknown lock type %d", lk.Type)
	}
	return r, nil
}

// keepLocksAlive renews lock session id on every meta server that has it
// until stop is closed.
func (c *Client) keepLocksAlive(id uint64, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(lockKeepAliveEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		for i, answered := range c.locks.servers() {
			ctx, cancel := context.WithTimeout(context.Background(), lockKeepAliveEvery)
			var reply weftpb.LockKeepAliveReply
			err := c.metas[i].Call(ctx, weftpb.MethodLockKeepAlive, &weftpb.LockKeepAliveRequest{Session: id}, &reply)
			cancel()
			switch {
			case err != nil:
				c.log.Debug("lock keepalive failed", "meta", i, "err", err)
			case !reply.Known && answered:
				// The server restarted, or did not hear from us for a
				// whole session lifetime: it forgot our locks.
				c.log.Warn("a meta server forgot this client's file locks (restarted, or unreachable for too long); processes may believe they hold locks they do not", "meta", i)
			}
		}
	}
}

func (s *lockSession) servers() map[int]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.mu.servers)
}

// endLocks stops the keepalives and releases every lock the client still
// holds (best effort: a server that cannot be reached drops them when the
// session expires). Called by Close.
func (c *Client) endLocks() {
	s := &c.locks
	s.mu.Lock()
	started := s.mu.servers != nil && !s.mu.ended
	s.mu.ended = true
	id := s.mu.id
	s.mu.Unlock()
	if !started {
		return
	}
	close(s.stop)
	<-s.done
	for i := range s.servers() {
		ctx, cancel := context.WithTimeout(context.Background(), lockEndTimeout)
		err := c.metas[i].Call(ctx, weftpb.MethodEndLockSession, &weftpb.EndLockSessionRequest{Session: id}, &weftpb.Empty{})
		cancel()
		if err != nil {
			c.log.Debug("ending the lock session failed; its locks go when it expires", "meta", i, "err", err)
		}
	}
}

// Revalidate makes this client's view of f's file current, for a process
// that has just been granted a lock on it: what other clients wrote and
// committed under their locks becomes visible, as NFS revalidates at lock
// time. It reports whether the file changed since this client last knew it
// (the caller then drops the kernel's page cache). A client with writes to
// the file not yet committed keeps its own view: they win, and are
// committed at the next unlock, flush or close.
func (f *File) Revalidate(ctx context.Context) (changed bool, err error) {
	before := f.n.version()
	// Opening the file again takes the server's view into the state every
	// handle of the file shares, unless it holds uncommitted writes
	// (acquireOpen): close-to-open, applied at lock time.
	again, err := f.c.OpenRef(ctx, f.Ref(), f.flags&oACCMODE)
	if err != nil {
		return false, err
	}
	changed = f.n.version() != before
	return changed, again.Close()
}

// fileVersion is what tells one state of a file's content from another.
type fileVersion struct {
	size    uint64
	mtimeNs int64 // not a time.Time: == would compare monotonic readings
	inline  bool
}

func (n *openInode) version() fileVersion {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fileVersion{size: n.mu.size, mtimeNs: n.mu.mtime.UnixNano(), inline: n.mu.inline}
}
