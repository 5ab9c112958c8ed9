package fsck

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/layout"
	"github.com/weftfs/weft/internal/meta"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// Store is one meta server's keys as fsck reads and repairs them: through
// the running server, or straight from the store of a stopped one.
type Store interface {
	// Scan reads keys in order (proto/fsck.proto).
	Scan(ctx context.Context, req *weftpb.ScanRequest) (*weftpb.ScanReply, error)
	// Lock takes the lock stripes of inos on the server (and, on server
	// 0, the cluster's directory-move lock if renameMu), as a coordinating
	// meta server does for a cross-server operation. Until Unlock, no
	// operation changes the records they guard.
	Lock(ctx context.Context, inos []core.Ino, renameMu bool) (Locked, error)
	Close() error
}

// Locked is what a Store holds for fsck.
type Locked interface {
	// Apply writes ops in one synced batch and keeps the locks.
	Apply(ctx context.Context, ops []*weftpb.KeyOp) error
	// Unlock releases the locks.
	Unlock()
}

// Cluster is the meta servers of one cluster, index = server id, all
// running or all stopped, and the store servers' addresses (for reclaiming
// the chunks of the inodes fsck reclaims).
type Cluster struct {
	Meta       []Store
	StoreAddrs []string
	Running    bool
	// Timeout bounds each call to a server.
	Timeout time.Duration
	// Dial is the template of every connection fsck and gc dial: the
	// cluster identity they act with (zero: plaintext).
	Dial rpc.DialOptions
	// Capability returns the capability to delete ino's chunks with (the
	// admin's, from the cluster secret); nil: none.
	Capability func(ino core.Ino) []byte
}

// adminCapability returns the source of the capabilities fsck deletes
// chunks with: minted with the admin key from the cluster secret (nil when
// the cluster has none). A secret this user cannot read is an error: fsck
// and gc would fail at every store.
func adminCapability(cfg *config.Cluster) (func(core.Ino) []byte, error) {
	m, _, err := auth.LoadMinter(cfg.CapabilitySecret, auth.AdminKeyID)
	if err != nil || m == nil {
		return nil, err
	}
	return func(ino core.Ino) []byte { return m.Service(uint64(ino), auth.Delete) }, nil
}

// capability returns the capability to delete ino's chunks, if any.
func (c *Cluster) capability(ino core.Ino) []byte {
	if c.Capability == nil {
		return nil
	}
	return c.Capability(ino)
}

// Close closes every store.
func (c *Cluster) Close() error {
	var first error
	for _, s := range c.Meta {
		if err := s.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// fsckCoordinator is the coordinator id in the top 16 bits of the txids fsck
// locks stripes under: above every meta server id, so a server restart that
// releases its own coordinator's locks never releases fsck's.
const fsckCoordinator = 0xffff

// maxLockHold is how long fsck may hold a running server's locks before it
// gives up on writing under them: the server releases locks whose
// coordinator goes silent after 30 s (internal/meta, lockLease), and a write
// after that would no longer be guarded.
const maxLockHold = 20 * time.Second

// Connect reaches the meta servers of cfg. It asks each one for its status
// (each call bounded by timeout): if all answer, fsck works through them; if
// none does, it opens their stores (the cluster file's meta[i].dir)
// directly. A cluster with some meta servers up and others down is refused:
// the running ones may hold locks and intents for the others, and their
// stores cannot be opened while they run.
func Connect(ctx context.Context, cfg *config.Cluster, timeout time.Duration) (*Cluster, error) {
	return ConnectAs(ctx, cfg, timeout, rpc.DialOptions{})
}

// ConnectAs is Connect with dial as the template of every connection: the
// TLS identity of a secured cluster's administrator.
func ConnectAs(ctx context.Context, cfg *config.Cluster, timeout time.Duration, dial rpc.DialOptions) (*Cluster, error) {
	const op = "fsck"
	if cfg.Secured() && dial.TLS == nil {
		b, err := auth.LoadIdentity(cfg.AdminIdentity)
		if err != nil {
			return nil, errs.WithPath(err, op, "admin identity")
		}
		b.DialOptions(&dial)
		dial.IntegrityOnly = cfg.SecurityMode() == config.SecuritySecure
		dial.RecordsOnLoopback = cfg.RecordsOnLoopback
	}
	n := len(cfg.Meta)
	if n == 0 {
		return nil, errs.New(errs.Invalid, op, "the cluster file lists no meta servers")
	}
	var storeAddrs []string
	for _, s := range cfg.Store {
		storeAddrs = append(storeAddrs, s.Addr)
	}
	capability, err := adminCapability(cfg)
	if err != nil {
		return nil, err
	}
	peers := make([]*rpc.Peer, n)
	probe := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range cfg.Meta {
		peers[i] = rpc.NewPeer(m.Addr, dial)
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			var r weftpb.StatusReply
			err := peers[i].Call(cctx, weftpb.MethodStatus, &weftpb.StatusRequest{}, &r)
			switch {
			case err != nil:
				probe[i] = err
			case int(r.ServerId) != i:
				probe[i] = errs.New(errs.Invalid, op, "meta server %d (%s) answers as meta server %d: the cluster file's [[meta]] list does not match the servers", i, m.Addr, r.ServerId)
			case r.Servers != 0 && int(r.Servers) != n:
				probe[i] = errs.New(errs.Invalid, op, "meta server %d counts %d meta servers, the cluster file lists %d", i, r.Servers, n)
			}
		})
	}
	wg.Wait()
	var up, down []int
	for i, err := range probe {
		switch {
		case err == nil:
			up = append(up, i)
		case errs.Is(err, errs.Unavailable) || errs.Is(err, errs.Timeout):
			down = append(down, i)
		default:
			closePeers(peers)
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		closePeers(peers)
		return nil, errs.Wrap(errs.Canceled, op, "", err)
	}
	switch {
	case len(down) == 0:
		c := &Cluster{Running: true, StoreAddrs: storeAddrs, Timeout: timeout, Dial: dial, Capability: capability}
		var txids atomic.Uint64
		txids.Store(uint64(time.Now().UnixNano()))
		for i, p := range peers {
			c.Meta = append(c.Meta, &remoteStore{id: i, peer: p, timeout: timeout, txids: &txids})
		}
		return c, nil
	case len(up) > 0:
		closePeers(peers)
		return nil, errs.New(errs.Unavailable, op, "meta servers %s are running and %s are not (%v): "+
			"fsck checks a cluster whose meta servers all run, or all are stopped", idList(up), idList(down), probe[down[0]])
	}
	closePeers(peers)
	c := &Cluster{StoreAddrs: storeAddrs, Timeout: timeout, Dial: dial, Capability: capability}
	for i, m := range cfg.Meta {
		if m.Dir == "" {
			c.Close()
			return nil, errs.New(errs.Invalid, op, "the meta servers are stopped and meta[%d].dir is not set: "+
				"fsck of a stopped cluster opens every meta server's store", i)
		}
		o, err := meta.OpenOffline(m.Dir)
		if err != nil {
			c.Close()
			return nil, errs.Wrap(errs.KindOf(err), op, fmt.Sprintf("meta server %d is not running and its store", i), err)
		}
		s := offlineStore{o}
		c.Meta = append(c.Meta, s)
		if err := checkIdentity(ctx, s, i, n); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// checkIdentity checks that the stopped store of meta server id belongs to
// that server of a cluster of n, as the server itself does when it opens.
func checkIdentity(ctx context.Context, s Store, id, n int) error {
	const op = "fsck"
	for _, want := range []struct {
		key  []byte
		val  uint64
		what string
	}{{[]byte(layout.KeyServerID), uint64(id), "meta server id"}, {[]byte(layout.KeyServers), uint64(n), "number of meta servers"}} {
		v, found, err := get(ctx, s, want.key)
		if err != nil {
			return err
		}
		if !found && bytes.Equal(want.key, []byte(layout.KeyServers)) {
			continue // a store from before the key existed: one server
		}
		if !found || len(v) != 8 || binary.BigEndian.Uint64(v) != want.val {
			return errs.New(errs.Invalid, op, "the store of meta server %d records %s %x, the cluster file says %d", id, want.what, v, want.val)
		}
	}
	return nil
}

func closePeers(peers []*rpc.Peer) {
	for _, p := range peers {
		p.Close()
	}
}

func idList(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

// remoteStore is a running meta server.
type remoteStore struct {
	id      int
	peer    *rpc.Peer
	timeout time.Duration
	txids   *atomic.Uint64
}

func (r *remoteStore) call(ctx context.Context, method uint16, req, resp proto.Message) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	err := r.peer.Call(ctx, method, req, resp)
	return errs.Wrap(errs.KindOf(err), "fsck", fmt.Sprintf("meta server %d", r.id), err)
}

func (r *remoteStore) Scan(ctx context.Context, req *weftpb.ScanRequest) (*weftpb.ScanReply, error) {
	resp := &weftpb.ScanReply{}
	if err := r.call(ctx, weftpb.MethodScan, req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// Lock takes the stripes with PeerLock, under a txid of fsck's own. If fsck
// dies while it holds them, the server releases them after its lock lease.
func (r *remoteStore) Lock(ctx context.Context, inos []core.Ino, renameMu bool) (Locked, error) {
	var stripes []uint32
	for _, ino := range inos {
		stripes = append(stripes, meta.LockStripe(ino))
	}
	slices.Sort(stripes)
	stripes = slices.Compact(stripes)
	txid := uint64(fsckCoordinator)<<48 | r.txids.Add(1)&(1<<48-1)
	if err := r.call(ctx, weftpb.MethodPeerLock, &weftpb.PeerLockRequest{Txid: txid, Stripes: stripes, RenameMu: renameMu}, &weftpb.Empty{}); err != nil {
		// The lock may have been taken after all (a reply lost to the
		// deadline): release it rather than wait for the lease.
		r.unlock(txid)
		return nil, err
	}
	return &remoteLocked{r: r, txid: txid, since: time.Now()}, nil
}

func (r *remoteStore) unlock(txid uint64) {
	// A context of its own: the caller's may be what ended the work.
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	_ = r.call(ctx, weftpb.MethodPeerUnlock, &weftpb.PeerUnlockRequest{Txid: txid}, &weftpb.Empty{})
}

func (r *remoteStore) Close() error { return r.peer.Close() }

type remoteLocked struct {
	r     *remoteStore
	txid  uint64
	since time.Time
}

func (l *remoteLocked) Apply(ctx context.Context, ops []*weftpb.KeyOp) error {
	if time.Since(l.since) > maxLockHold {
		return errs.New(errs.Timeout, "fsck", "held the locks of meta server %d for over %v: not writing under locks the server may have released", l.r.id, maxLockHold)
	}
	return l.r.call(ctx, weftpb.MethodPeerApply, &weftpb.PeerApplyRequest{Txid: l.txid, Ops: ops, KeepLocks: true}, &weftpb.Empty{})
}

func (l *remoteLocked) Unlock() { l.r.unlock(l.txid) }

// offlineStore is a stopped meta server's store, opened by fsck.
type offlineStore struct{ o *meta.Offline }

func (s offlineStore) Scan(_ context.Context, req *weftpb.ScanRequest) (*weftpb.ScanReply, error) {
	return s.o.Scan(req)
}

// Lock needs no locks: nothing else has the store open.
func (s offlineStore) Lock(context.Context, []core.Ino, bool) (Locked, error) {
	return offlineLocked(s), nil
}

func (s offlineStore) Close() error { return s.o.Close() }

type offlineLocked offlineStore

func (l offlineLocked) Apply(_ context.Context, ops []*weftpb.KeyOp) error { return l.o.Apply(ops) }
func (l offlineLocked) Unlock()                                            {}

// Reads.

// scanPageLimit is how many keys fsck asks for per Scan.
const scanPageLimit = 4096

// scanRange calls fn for every key in [start, end) of s, in order, reading
// page by page (limit keys a page; 0: scanPageLimit). fn may keep k and v:
// they belong to the reply, which nothing reuses.
func scanRange(ctx context.Context, s Store, start, end []byte, limit uint32, fn func(k, v []byte) error) error {
	if limit == 0 {
		limit = scanPageLimit
	}
	req := &weftpb.ScanRequest{Start: start, End: end, Limit: limit}
	for {
		if err := ctx.Err(); err != nil {
			return errs.Wrap(errs.Canceled, "fsck", "", err)
		}
		r, err := s.Scan(ctx, req)
		if err != nil {
			return err
		}
		for _, p := range r.Pairs {
			if err := fn(p.Key, p.Value); err != nil {
				return err
			}
		}
		if r.Eof {
			return nil
		}
		if len(r.Pairs) == 0 {
			return errs.New(errs.Protocol, "fsck", "a scan reply that is not the end returned no keys")
		}
		req = &weftpb.ScanRequest{After: r.Pairs[len(r.Pairs)-1].Key, End: end, Limit: limit}
	}
}

// get reads one key.
func get(ctx context.Context, s Store, key []byte) (val []byte, found bool, err error) {
	r, err := s.Scan(ctx, &weftpb.ScanRequest{Start: key, End: append(slices.Clone(key), 0), Limit: 1})
	if err != nil {
		return nil, false, err
	}
	if len(r.Pairs) == 0 || !bytes.Equal(r.Pairs[0].Key, key) {
		return nil, false, nil
	}
	return r.Pairs[0].Value, true, nil
}

// anyKey reports whether [start, end) of s holds a key.
func anyKey(ctx context.Context, s Store, start, end []byte) (bool, error) {
	r, err := s.Scan(ctx, &weftpb.ScanRequest{Start: start, End: end, Limit: 1})
	if err != nil {
		return false, err
	}
	return len(r.Pairs) > 0, nil
}
