// Package client is weft's client library: a POSIX-shaped Go API over the
// wire protocol. It resolves paths, talks to the meta servers for the
// namespace and directly to the store servers for file data, buffers writes
// (write-back, bounded memory per open file), reads ahead on sequential
// streams, and places chunks on store servers by rendezvous hashing with
// replication R.
//
// Two layers: the *At and Ref methods work on inode numbers, as the FUSE layer
// needs; the path methods (Stat, Open, Mkdir, ...) resolve paths on top of
// them, as a program or the CLI needs.
//
// Consistency is close-to-open: what a client writes becomes visible to other
// clients when it closes or syncs the file; size and mtime are committed to the
// meta server then. Leases come later (DESIGN: consistency).
package client

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/erasure"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	"google.golang.org/protobuf/proto"
)

// Config says where the servers are and how the cluster lays out data.
type Config struct {
	MetaAddrs   []string // meta servers, index = server id
	StoreAddrs  []string // store servers, index = store id
	ChunkSize   int64    // bytes per chunk (default 4 MiB)
	Replication int      // replicas per chunk (default 1)
	InlineLimit int      // largest file kept inline in its meta record (default 64 KiB; < 0: none)
	// WriteBuffer bounds the bytes buffered or in flight per open file
	// (default 4 chunks); writers wait beyond it.
	WriteBuffer int64
	// ReadAhead is how many chunks ahead of a sequential reader are fetched
	// (default 2).
	ReadAhead int
	// ReadCache bounds the bytes of whole chunks kept across opens, for
	// files read again unchanged (chunkcache.go; default DefaultReadCache,
	// < 0: none).
	ReadCache int64
	// SyncOnClose makes close as durable as fsync (the cluster's sync
	// durability mode): chunks are synced on the stores before the commit.
	SyncOnClose bool
	Creds       core.Creds // identity of requests without WithCreds
	Logger      *slog.Logger
	// RetryFor bounds how long idempotent requests (lookups, reads) retry
	// against an unreachable server before failing (default 10s).
	RetryFor time.Duration
	// Local holds the servers that run in the client's own process, by
	// address (weft up --mount): requests to them call their handlers
	// directly instead of going through loopback TCP (rpc.DialOptions.Local).
	Local map[string]*rpc.Server
	// NoSameHost keeps WriteFrom and ReadTo on the wire even for store
	// servers on this machine (samehost.go).
	NoSameHost bool
	// Dial is the template of the connections to the servers: the
	// client's cluster identity (TLS certificate), zero for plaintext.
	Dial rpc.DialOptions
	// Identity, if set, is an identity directory (weft ca issue) that New
	// loads into Dial: the certificate the client connects with. Dial's
	// IntegrityOnly says the record layer (the cluster's security mode).
	Identity string
	// ReplicaTimeout is how long a chunk read waits for one replica before
	// it asks the next one as well (default 2s): a stopped or dead store
	// delays a read by about this much when another replica is healthy.
	ReplicaTimeout time.Duration
	// StoreTimeout bounds one chunk read, write or sync on one store
	// (default 20s). Past it the replica counts as failed: a read fails
	// over, and a read whose every replica failed, or a write, fails with
	// EIO.
	StoreTimeout time.Duration
	// LeaseTerm is the cluster's lease term (default 2 s): a lease
	// request waits at most a term and a second for the server, which
	// may wait a term for a conflicting holder that does not answer.
	LeaseTerm time.Duration
	// WriteBack completes creates, unlinks, renames and setattrs in
	// directories this client holds a write lease on, and sends them in
	// batches (writeback.go; the mount's --durability writeback).
	WriteBack bool
	// WriteBackWindow bounds how long a written-back change waits in the
	// client (default DefaultWriteBackWindow).
	WriteBackWindow time.Duration
	// CreateAtClose holds a new regular file's create in the client, under
	// a write lease on its directory, only until the file's close, flush
	// or fsync, which sends it with the file's inline content in one
	// request (writeback_close.go): a small file's create, write and close
	// cost one round trip instead of two, and close stays as durable as
	// without it (SyncOnClose). Every other change goes to the servers at
	// once, as without write-back. It sets WriteBack (the leases and the
	// queue are write-back's).
	CreateAtClose bool
	// Erasure, when enabled, erasure-codes file data (stripe.go);
	// Replication is then 1.
	Erasure erasure.Scheme
	// ParityFrames is how many stripes' parity the client caches for
	// partial-stripe writes under erasure coding (stripecache.go; default
	// 8, < 0: no cache).
	ParityFrames int
	// ParityFrameAge bounds how long a cached frame's parity may lag the
	// data written under it (default 1 s).
	ParityFrameAge time.Duration
}

func (c *Config) setDefaults() error {
	if len(c.MetaAddrs) == 0 {
		return errs.New(errs.Invalid, "client config", "no meta server address")
	}
	if len(c.StoreAddrs) == 0 {
		return errs.New(errs.Invalid, "client config", "no store server address")
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = 4 << 20
	}
	if c.ChunkSize < 4096 || c.ChunkSize&(c.ChunkSize-1) != 0 {
		return errs.New(errs.Invalid, "client config", "chunk size %d is not a power of two ≥ 4096", c.ChunkSize)
	}
	if c.Replication == 0 {
		c.Replication = 1
	}
	if c.Replication < 1 || c.Replication > len(c.StoreAddrs) {
		return errs.New(errs.Invalid, "client config", "replication %d with %d store servers", c.Replication, len(c.StoreAddrs))
	}
	if err := c.checkErasure(); err != nil {
		return err
	}
	if c.InlineLimit == 0 {
		c.InlineLimit = 64 << 10
	}
	if c.WriteBuffer == 0 {
		c.WriteBuffer = 4 * c.ChunkSize
	}
	if c.WriteBuffer < c.ChunkSize {
		c.WriteBuffer = c.ChunkSize
	}
	if c.ReadAhead == 0 {
		c.ReadAhead = 2
	}
	if c.ReadCache == 0 {
		c.ReadCache = DefaultReadCache
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.RetryFor == 0 {
		c.RetryFor = 10 * time.Second
	}
	if c.ReplicaTimeout == 0 {
		c.ReplicaTimeout = DefaultReplicaTimeout
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	if c.LeaseTerm <= 0 {
		c.LeaseTerm = 2 * time.Second
	}
	if c.CreateAtClose {
		c.WriteBack = true
	}
	if c.WriteBackWindow == 0 {
		c.WriteBackWindow = DefaultWriteBackWindow
	}
	if c.ReplicaTimeout < 0 || c.StoreTimeout < 0 || c.WriteBackWindow < 0 {
		return errs.New(errs.Invalid, "client config", "negative replica timeout %v or store timeout %v", c.ReplicaTimeout, c.StoreTimeout)
	}
	return nil
}

// The defaults of Config.ReplicaTimeout and Config.StoreTimeout.
const (
	DefaultReplicaTimeout = 2 * time.Second
	DefaultStoreTimeout   = 20 * time.Second
)

// Client is a connection to one weft cluster. It is safe for concurrent use.
type Client struct {
	cfg    Config
	log    *slog.Logger
	metas  []*rpc.Peer
	stores []*rpc.Peer
	same   []*sameHost // each store's same-host path, by store id

	suspects *suspects   // stores slow or failed lately, asked last (replicas.go)
	ec       *stripes    // erasure coding (stripe.go); nil: replicas
	chunks   *chunkCache // whole chunks kept across opens (chunkcache.go); nil: none

	maps dirMaps // GIGA+ partition bitmaps of directories (route.go)

	edgeHeld edgeHeld // an edge holds changes of this client's (edgesync.go)

	// afterOpenReply, set by tests only, runs between an open's reply
	// and the open state it makes (a change racing the open).
	afterOpenReply func()
	// beforeLocate, set by tests only, runs when an open file's request
	// was refused and before the client asks where the file went (a
	// rename by another client racing the relocation).
	beforeLocate func(core.Ino)
	// afterTruncateReply, set by tests only, runs between the cut of a
	// truncate (the meta server's answer; the client's own for a file with
	// no name left) and the client's rewrite of the parity of the stripe
	// holding the new end.
	afterTruncateReply func(core.Ino)
	// stalled, set by tests only, makes the client ignore lease recalls
	// and its write-back flusher stand still, as a process stopped past
	// its leases' term would.
	stalled atomic.Bool
	// hooks let a test of another package hold the client between two
	// steps (SetReadStepHook); nil outside tests.
	hooks struct {
		readStep atomic.Pointer[func()] // a read took one view's bytes; it may ask again
		// refuseLease: true if a read lease on the key is to go as the
		// server's refusal would (no lease)
		refuseLease atomic.Pointer[func(LeaseKey) bool]
	}

	mu struct {
		sync.Mutex
		open map[core.Ino]*openInode // files with open handles
	}
	bg sync.WaitGroup // background chunk reclaims
	// life is the client's own context, for work no caller waits for
	// (write-back uploads, lease releases); Close cancels it.
	life context.Context
	stop context.CancelFunc

	locks  lockSession // file lock session (lock.go)
	leases leaseCache  // read leases (lease.go)
	pgs    pgState     // patchgroups engaged client-wide (patchgroup.go)
	wb     writeBack   // metadata write-back (writeback.go)
}

// New connects lazily to the cluster described by cfg: no server is contacted
// until the first request.
func New(cfg Config) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if cfg.Identity != "" {
		b, err := auth.LoadIdentity(cfg.Identity)
		if err != nil {
			return nil, err
		}
		b.DialOptions(&cfg.Dial)
	}
	ec, err := newStripes(cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, log: cfg.Logger, ec: ec, chunks: newChunkCache(cfg.ReadCache)}
	c.life, c.stop = context.WithCancel(context.Background())
	peer := func(addr string, mux *rpc.Mux) *rpc.Peer {
		opts := cfg.Dial
		opts.Logger, opts.Local, opts.Mux = cfg.Logger, cfg.Local[addr], mux
		return rpc.NewPeer(addr, opts)
	}
	for i, a := range cfg.MetaAddrs {
		// Meta servers call back with lease recalls (lease.go).
		c.metas = append(c.metas, peer(a, c.recallMux(i)))
	}
	for _, a := range cfg.StoreAddrs {
		c.stores = append(c.stores, peer(a, nil))
		c.same = append(c.same, &sameHost{addr: a})
	}
	c.suspects = newSuspects(len(c.stores))
	c.mu.open = make(map[core.Ino]*openInode)
	c.startParityFlusher()
	return c, nil
}

// Close waits for background work and closes the connections. Files still
// open are not flushed: close them first.
func (c *Client) Close() error {
	c.wbClose()
	c.closeEdgeHeld()
	c.endLocks()
	c.bg.Wait()
	c.closeParityCache()
	c.stop()
	c.wbWait()
	for _, h := range c.same {
		h.close()
	}
	var first error
	for _, p := range append(append([]*rpc.Peer(nil), c.metas...), c.stores...) {
		if err := p.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ChunkSize returns the cluster's chunk size.
func (c *Client) ChunkSize() int64 { return c.cfg.ChunkSize }

type credsKey struct{}

// WithCreds returns a context whose requests run as creds (the FUSE layer
// passes the calling process's identity this way).
func WithCreds(ctx context.Context, creds core.Creds) context.Context {
	return context.WithValue(ctx, credsKey{}, creds)
}

func (c *Client) creds(ctx context.Context) core.Creds {
	if cr, ok := ctx.Value(credsKey{}).(core.Creds); ok {
		return cr
	}
	return c.cfg.Creds
}

// call sends a mutating request once: a retry after a lost reply could apply
// it twice.
func call(ctx context.Context, p *rpc.Peer, method uint16, req, resp proto.Message) error {
	return p.Call(ctx, method, req, resp)
}

// callIdempotent retries a request that is safe to repeat while its server
// is unreachable, for up to Config.RetryFor.
func (c *Client) callIdempotent(ctx context.Context, p *rpc.Peer, method uint16, req, resp proto.Message) error {
	deadline := time.Now().Add(c.cfg.RetryFor)
	backoff := 20 * time.Millisecond
	for {
		err := p.Call(ctx, method, req, resp)
		if !errs.Is(err, errs.Unavailable) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctxError("retry", ctx) // a deadline is a timeout (ETIMEDOUT), a cancel a cancel
		case <-t.C:
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}
