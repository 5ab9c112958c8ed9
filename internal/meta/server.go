package meta

import (
	"encoding/binary"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// Durability modes (DESIGN: namespace).
const (
	DurabilitySync  = "sync"
	DurabilityAsync = "async"
)

// Config configures one meta server.
type Config struct {
	ID            int           // meta server id, 0..core.MaxServers-1; server 0 owns the root
	Dir           string        // directory of the Pebble store
	Durability    string        // "sync" (default) or "async"
	AsyncInterval time.Duration // async mode: how often the WAL is synced; default 100ms
	InlineLimit   int           // largest file content kept in the record; default 64 KiB
	Logger        *slog.Logger  // default: discard
	Registry      *prometheus.Registry
	Now           func() time.Time // default time.Now
	// Peers lists every meta server's address, index = server id, this one
	// included; empty means a single-server cluster.
	Peers []string
	// SplitThreshold is how many entries a directory partition holds before
	// this server splits it (GIGA+); default 4000.
	SplitThreshold int
	// SplitBits is how many binary splits one split does at once: a
	// partition splits into up to 2^SplitBits (CephFS's
	// mds_bal_split_bits); default 3.
	SplitBits int
	// FS is the file system the Pebble store lives on; default vfs.Default.
	// Tests pass vfs.NewCrashableMem or an errorfs wrapper to crash the
	// server or fail its disk inside the process.
	FS vfs.FS
	// Failpoint, if set, is called at each named step of the multi-step
	// operations (failpoint.go); an error stops the operation there as a
	// crash would. Tests only.
	Failpoint func(name string) error
	// NoSearchIndex runs the server without the search index (weft find
	// is then refused), to measure what the index costs.
	NoSearchIndex bool

	// lockLease replaces the participant lock lease (dist.go); tests only.
	lockLease time.Duration

	// Stores lists every store server's address, in the cluster file's
	// order (chunk placement depends on it). The reclaimer (reclaimer.go)
	// drops freed chunks there; empty leaves reclaim records pending.
	Stores []string
	// ChunkSize and Replication are the cluster's chunk layout, used for
	// records whose client did not say its own; defaults 4 MiB and 1.
	ChunkSize   int64
	Replication int
	// ReclaimTimeout bounds each reclaim call to a store; default 5s. A
	// truncate waits up to about this long for its drop before it answers.
	ReclaimTimeout time.Duration
	// ReclaimRetryMax caps the backoff between attempts of a failed
	// reclaim; default 30s.
	ReclaimRetryMax time.Duration
	// ReclaimConcurrency bounds the records worked at once; default 4.
	ReclaimConcurrency int
	// Dial is the template of the connections the server dials (other
	// meta servers, the stores): its cluster identity, zero for
	// plaintext.
	Dial rpc.DialOptions
	// Capabilities mints the capabilities of open, create and lookup
	// replies (capability.go); nil: none (security mode none).
	Capabilities *auth.Minter

	// LeaseTerm is how long a client's lease lasts (default
	// lease.DefaultTerm). LeaseGrace is how long a restarted server lets
	// no change through, for the leases clients may hold from before
	// (default LeaseTerm; negative: none). A new store has no grace.
	LeaseTerm, LeaseGrace time.Duration
}

const (
	defaultAsyncInterval = 100 * time.Millisecond
	defaultInlineLimit   = 64 << 10
	// maxInlineLimit keeps records small enough for the memtable and the wire.
	maxInlineLimit = 1 << 20
	// defaultSplitThreshold and defaultSplitBits match the cluster file's
	// defaults.
	defaultSplitThreshold = 4000
	defaultSplitBits      = 3
	// maxSplitBits bounds a split to 64 partitions.
	maxSplitBits = 6

	defaultChunkSize          = 4 << 20
	defaultReclaimTimeout     = 5 * time.Second
	defaultReclaimRetryMax    = 30 * time.Second
	defaultReclaimConcurrency = 4
)

// Validate fills in defaults and checks the configuration.
func (c *Config) Validate() error {
	const op = "meta config"
	if c.ID < 0 || c.ID >= core.MaxServers {
		return errs.New(errs.Invalid, op, "server id %d out of range 0..%d", c.ID, core.MaxServers-1)
	}
	if c.Dir == "" {
		return errs.New(errs.Invalid, op, "no store directory")
	}
	switch c.Durability {
	case "":
		c.Durability = DurabilitySync
	case DurabilitySync, DurabilityAsync:
	default:
		return errs.New(errs.Invalid, op, "durability %q is neither sync nor async", c.Durability)
	}
	if c.AsyncInterval == 0 {
		c.AsyncInterval = defaultAsyncInterval
	}
	if c.AsyncInterval < 0 {
		return errs.New(errs.Invalid, op, "negative async interval")
	}
	if c.InlineLimit == 0 {
		c.InlineLimit = defaultInlineLimit
	}
	if c.InlineLimit < 0 || c.InlineLimit > maxInlineLimit {
		return errs.New(errs.Invalid, op, "inline limit %d out of range 0..%d", c.InlineLimit, maxInlineLimit)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.lockLease == 0 {
		c.lockLease = lockLease
	}
	if len(c.Peers) > core.MaxServers {
		return errs.New(errs.Invalid, op, "%d meta servers, at most %d", len(c.Peers), core.MaxServers)
	}
	if len(c.Peers) > 0 && c.ID >= len(c.Peers) {
		return errs.New(errs.Invalid, op, "server id %d but only %d meta servers", c.ID, len(c.Peers))
	}
	if c.SplitThreshold == 0 {
		c.SplitThreshold = defaultSplitThreshold
	}
	if c.SplitThreshold < 2 {
		return errs.New(errs.Invalid, op, "split threshold %d is less than 2", c.SplitThreshold)
	}
	if c.SplitBits == 0 {
		c.SplitBits = defaultSplitBits
	}
	if c.SplitBits < 1 || c.SplitBits > maxSplitBits {
		return errs.New(errs.Invalid, op, "split bits %d not in 1..%d", c.SplitBits, maxSplitBits)
	}
	return c.validateReclaim()
}

// validateReclaim fills in and checks the store list and reclaim settings.
func (c *Config) validateReclaim() error {
	const op = "meta config"
	if c.ChunkSize == 0 {
		c.ChunkSize = defaultChunkSize
	}
	if c.Replication == 0 {
		c.Replication = 1
	}
	if c.ReclaimTimeout == 0 {
		c.ReclaimTimeout = defaultReclaimTimeout
	}
	if c.ReclaimRetryMax == 0 {
		c.ReclaimRetryMax = defaultReclaimRetryMax
	}
	if c.ReclaimConcurrency == 0 {
		c.ReclaimConcurrency = defaultReclaimConcurrency
	}
	switch {
	case c.ChunkSize < 0:
		return errs.New(errs.Invalid, op, "negative chunk size")
	case c.Replication < 0 || len(c.Stores) > 0 && c.Replication > len(c.Stores):
		return errs.New(errs.Invalid, op, "replication %d with %d stores", c.Replication, len(c.Stores))
	case c.ReclaimTimeout < 0 || c.ReclaimRetryMax < 0 || c.ReclaimConcurrency < 0:
		return errs.New(errs.Invalid, op, "negative reclaim setting")
	}
	return nil
}

// Server is one meta server: a namespace in a Pebble store.
type Server struct {
	cfg  Config
	log  *slog.Logger
	db   *pebble.DB
	sync bool

	// hints hold, per batch being built, what the entry keys its txn read
	// under its locks held (index_hint.go).
	hints readHints

	// closeMu is held shared by every operation and exclusively by Close, so
	// that no operation touches the database after it is closed (pebble
	// panics on that).
	closeMu sync.RWMutex
	closed  bool

	locks    stripes
	renameMu sync.Mutex
	alloc    inoAllocator

	inodes, dirs atomic.Int64 // mirrors of the persisted counters of this server's inodes
	// write-back batches (ops_batch.go) since start: applied, their
	// operations, and the ones refused whole
	wbBatches, wbOps, wbRefused atomic.Uint64
	others                      []ownerCounts // this server's shares of other servers' counts, by id (counters.go)

	n     int         // meta servers in the cluster
	peers []*rpc.Peer // the other meta servers, by id (nil for this one)
	giga  gigaState   // splits and cross-server operations (split.go, dist.go)

	reclaim reclaimer // drops freed chunks on the stores (reclaimer.go)

	// leases are the clients' sessions, leases and file locks (leases.go);
	// nil until Open has loaded the store.
	leases *lease.Service
	// created says this Open made the store: no client can hold a lease
	// from before.
	created bool

	syncStop, syncDone chan struct{}

	// What happens when the storage fails (health.go). health is the gate
	// around pebble's commit pipeline.
	health     sync.Mutex
	failed     atomic.Pointer[failure] // set once, at the first storage error
	wedged     atomic.Bool             // pebble panicked inside its commit pipeline
	unreadable atomic.Bool             // failed, and the store could not be reopened for reads
	serving    atomic.Bool             // Open has returned the server

	// hookAncestryChecked, when set by a test, runs after a directory move
	// passed its ancestry check, to widen the window a race would need.
	hookAncestryChecked func()
}

// Open opens or creates the store under cfg.Dir. Server 0 creates the root
// directory on first start.
func Open(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, sync: cfg.Durability == DurabilitySync, n: max(1, len(cfg.Peers))}
	db, err := openPebble(cfg.Dir, storeOptions{fs: cfg.FS, log: cfg.Logger, now: cfg.Now,
		failed: func(err error) { s.storageFailed("pebble", err) }})
	if err != nil {
		return nil, err
	}
	s.db = db
	if err := s.load(); err != nil {
		s.abandonOrClose()
		return nil, err
	}
	if err := s.openIndex(); err != nil {
		s.abandonOrClose()
		return nil, err
	}
	// A store on a full or failing disk opens (pebble replays the WAL in
	// memory) and would then fail on every write and in the background:
	// one synced write now turns that into one error.
	if err := s.syncWAL("meta open"); err != nil {
		s.abandonOrClose()
		return nil, errs.Wrap(errs.KindOf(err), "meta open", cfg.Dir, err)
	}
	if f := s.failed.Load(); f != nil {
		s.abandonOrClose()
		return nil, errs.Wrap(f.kind, "meta open", cfg.Dir, f.cause)
	}
	// Leases first: the reclaimer and the intent replay, started next,
	// commit, and every commit recalls leases.
	s.initLeases()
	if err := s.initReclaim(); err != nil {
		s.abandonOrClose()
		return nil, err
	}
	crashed, err := s.openRecovery()
	if err != nil {
		s.abandonOrClose()
		return nil, err
	}
	s.initGiga(crashed)
	s.registerMetrics()
	if !s.sync {
		s.syncStop, s.syncDone = make(chan struct{}), make(chan struct{})
		go s.syncLoop(cfg.AsyncInterval)
	}
	s.serving.Store(true)
	s.log.Info("meta server open", "id", cfg.ID, "dir", cfg.Dir, "durability", cfg.Durability,
		"inodes", s.inodes.Load(), "ino_hwm", s.alloc.next)
	return s, nil
}

// load checks the store's format and identity, creates it if it is new, and
// loads the allocator and counters.
func (s *Server) load() error {
	const op = "meta open"
	v, found, err := getValue(s.db, keyFormat)
	if err != nil {
		return err
	}
	if !found {
		return s.initStore()
	}
	if len(v) != 8 || binary.BigEndian.Uint64(v) != formatVersion {
		return errs.New(errs.Corrupt, op, "store format %x is not version %d", v, formatVersion)
	}
	id, _, err := getValue(s.db, keyServerID)
	if err != nil {
		return err
	}
	if len(id) != 8 || binary.BigEndian.Uint64(id) != uint64(s.cfg.ID) {
		return errs.New(errs.Invalid, op, "store in %s belongs to another meta server (id %x, want %d)", s.cfg.Dir, id, s.cfg.ID)
	}
	if err := s.checkServers(); err != nil {
		return err
	}
	hwm, _, err := getValue(s.db, keyInoHWM)
	if err != nil {
		return err
	}
	if len(hwm) != 8 {
		return errs.New(errs.Corrupt, op, "ino high-water mark missing")
	}
	s.alloc.init(binary.BigEndian.Uint64(hwm))
	return s.loadCounts()
}

// checkServers refuses a store made for another number of meta servers:
// partition placement depends on it, so a cluster keeps its meta servers.
// A store from before the key existed (one server) gets it now.
func (s *Server) checkServers() error {
	v, found, err := getValue(s.db, keyServers)
	if err != nil {
		return err
	}
	if !found {
		b := s.db.NewBatch()
		defer s.release(b)
		b.Set(keyServers, binary.BigEndian.AppendUint64(nil, uint64(s.n)), nil)
		return s.commit("meta open", b, true)
	}
	if len(v) != 8 || binary.BigEndian.Uint64(v) != uint64(s.n) {
		return errs.New(errs.Invalid, "meta open", "store in %s belongs to a cluster of %x meta servers, the cluster file lists %d: "+
			"the number of meta servers cannot change", s.cfg.Dir, v, s.n)
	}
	return nil
}

// initStore writes a new store's identity, allocator state and, on server 0,
// the root directory, in one synced batch: a store is either new or complete.
func (s *Server) initStore() error {
	s.created = true
	b := s.db.NewBatch()
	defer s.release(b)
	b.Set(keyServerID, binary.BigEndian.AppendUint64(nil, uint64(s.cfg.ID)), nil)
	b.Set(keyServers, binary.BigEndian.AppendUint64(nil, uint64(s.n)), nil)
	b.Set(keyInoHWM, binary.BigEndian.AppendUint64(nil, firstSeq), nil)
	s.alloc.init(firstSeq)
	if s.cfg.ID == 0 {
		now := s.nowNs()
		root := &weftpb.InodeRecord{
			Mode: core.ModeDir | 0o755, Nlink: 2, Size: dirSize,
			AtimeNs: now, MtimeNs: now, CtimeNs: now,
			Parent: uint64(core.RootIno), Bitmap: []byte{1},
		}
		b.Set(inodeKey(core.RootIno), mustMarshal(root), nil)
		b.Merge(keyInodes, counterDelta(1), nil)
		b.Merge(keyDirs, counterDelta(1), nil)
		s.inodes.Store(1)
		s.dirs.Store(1)
	}
	s.others = make([]ownerCounts, s.n)
	// The format key goes last in the batch only for readability: the batch
	// is atomic.
	b.Set(keyFormat, binary.BigEndian.AppendUint64(nil, formatVersion), nil)
	return s.commit("meta open", b, true)
}

// Close stops the server after the operations in progress finish, syncs the
// WAL and closes the store.
func (s *Server) Close() error {
	s.closeGiga() // background splits and replays first: they enter like operations
	s.reclaim.close()
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.syncStop != nil {
		close(s.syncStop)
		<-s.syncDone
	}
	var first error
	if !s.sync && s.failed.Load() == nil {
		// Async commits acknowledged since the last background sync.
		first = s.syncWAL("meta close")
	}
	if err := s.closeRecovery(); err != nil && first == nil {
		first = err
	}
	if err := s.abandonOrClose(); err != nil && first == nil {
		first = err
	}
	return errs.Wrap(errs.IO, "meta close", s.cfg.Dir, first)
}

// abandonOrClose closes the store, unless a panic inside pebble's commit
// pipeline left it locked: its Close would then block for ever, so it is
// left open (the process is expected to exit).
func (s *Server) abandonOrClose() error {
	switch {
	case s.db == nil:
		return nil
	case s.wedged.Load():
		s.log.Error("meta server leaves its failed store open: pebble is wedged", "id", s.cfg.ID)
		return nil
	}
	return s.db.Close()
}

// enter admits an operation unless the server is closed or, after a storage
// failure, cannot serve it (health.go); on success the caller holds closeMu
// shared and must release it.
func (s *Server) enter(op string) error {
	if err := s.readable(op); err != nil {
		return err
	}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return errs.New(errs.Unavailable, op, "meta server is closed")
	}
	return nil
}

func (s *Server) nowNs() int64 { return s.cfg.Now().UnixNano() }

func (s *Server) registerMetrics() {
	reg := s.cfg.Registry
	if reg == nil {
		return
	}
	labels := prometheus.Labels{"server": itoa(s.cfg.ID)}
	s.reclaim.registerMetrics(reg, labels)
	reg.MustRegister(
		metaCounter(labels, "wal_syncs_total",
			"fsyncs of the WAL (group commits share one): the meta server's durable writes.",
			s.walSyncs),
		metaGauge(labels, "inodes",
			"Inodes in use on this meta server.",
			func() float64 { return float64(s.inodes.Load()) }),
		metaGauge(labels, "directories",
			"Directories whose inode this meta server holds.",
			func() float64 { return float64(s.dirs.Load()) }),
		metaCounter(labels, "writeback_batches_total",
			"Write-back batches applied (apply_batch; weft_meta_rpc_request_duration_seconds{method=\"apply_batch\"} has their latency).",
			func() float64 { return float64(s.wbBatches.Load()) }),
		metaCounter(labels, "writeback_ops_total",
			"Operations applied in write-back batches.",
			func() float64 { return float64(s.wbOps.Load()) }),
		metaCounter(labels, "writeback_refused_total",
			"Write-back batches refused whole (an op no longer applied: the writer lost its lease).",
			func() float64 { return float64(s.wbRefused.Load()) }),
		metaGauge(labels, "ino_reserved",
			"Inode sequence numbers reserved on disk (high-water mark).",
			func() float64 { return float64(s.alloc.reserved()) }),
	)
}
