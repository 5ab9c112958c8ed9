package store

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

const (
	// DefaultMaxChunkSize bounds a chunk: offset+length of a write beyond it
	// is invalid.
	DefaultMaxChunkSize = 64 << 20
	// MaxReadLength caps one ReadChunk reply; a longer request reads short.
	MaxReadLength = 64 << 20
	// maxMaxChunkSize keeps a disk chunk's checksum table small (128 KiB).
	maxMaxChunkSize = 1 << 30
)

// Config configures a store server.
type Config struct {
	ID           int    // the store's index in the cluster file; a metric label
	Dir          string // data directory of the disk backend
	Backend      string // "disk" or "mem"
	MemLimit     int64  // bytes the mem backend may hold; required > 0 for mem
	MaxChunkSize int64  // default DefaultMaxChunkSize
	// Replacement says the cluster already holds data, so a store that
	// Open finds empty (it formats the directory, or the RAM backend
	// starts) replaces a store that held chunks: it starts incomplete and
	// serves no reads (errs.Lost, so that clients read another replica)
	// until a full repair pass calls MarkComplete. It has no effect on a
	// directory that Open finds formatted.
	Replacement bool
	Logger      *slog.Logger
	FS          FS                   // the disk backend's file system; nil: OSFS()
	Registry    *prometheus.Registry // nil: a private registry
	// Capabilities, when set, checks the capability of every chunk
	// request (capability.go); nil admits every request.
	Capabilities *auth.Verifier

	blockSize int64 // CRC block size; tests shrink it
	noFsync   bool  // skip fsync system calls (model tests; they cost ms each)
}

func (c *Config) setDefaults() {
	if c.MaxChunkSize == 0 {
		c.MaxChunkSize = DefaultMaxChunkSize
	}
	if c.blockSize == 0 {
		c.blockSize = DefaultBlockSize
	}
	if c.FS == nil {
		c.FS = OSFS()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
}

// Validate reports the first problem of a Config with defaults applied.
func (c *Config) Validate() error {
	const op = "store config"
	switch {
	case c.Backend != "disk" && c.Backend != "mem":
		return errs.New(errs.Invalid, op, "backend %q: want disk or mem", c.Backend)
	case c.Backend == "disk" && c.Dir == "":
		return errs.New(errs.Invalid, op, "the disk backend needs a directory")
	case c.Backend == "mem" && c.MemLimit <= 0:
		return errs.New(errs.Invalid, op, "the mem backend needs a memory limit > 0")
	case c.MaxChunkSize <= 0 || c.MaxChunkSize > maxMaxChunkSize:
		return errs.New(errs.Invalid, op, "max chunk size %d: want 1..%d", c.MaxChunkSize, maxMaxChunkSize)
	case c.blockSize <= 0 || c.blockSize > 1<<24:
		return errs.New(errs.Invalid, op, "block size %d", c.blockSize)
	case c.ID < 0:
		return errs.New(errs.Invalid, op, "store id %d < 0", c.ID)
	}
	return nil
}

// Server is one store server: a Backend behind validation, locks and metrics.
type Server struct {
	cfg     Config
	backend Backend
	locks   lockTable
	undo    *undoTable   // bytes keep_old writes replaced (undo.go)
	stripes *stripeLocks // erasure-coded stripes' write locks (stripelock.go)
	m       *metrics
	log     *slog.Logger

	// incomplete mirrors the backend's Identity, read by every read.
	incomplete atomic.Bool

	mu struct {
		sync.RWMutex // held shared by every operation, exclusively by Close
		closed       bool
	}
}

// Open opens (or, for disk, creates) a store.
func Open(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var b Backend
	switch cfg.Backend {
	case "mem":
		b = newMemBackend(cfg.MemLimit, cfg.blockSize, cfg.Replacement, time.Now)
	case "disk":
		d, err := openDiskBackend(cfg.Dir, newLayout(cfg.blockSize, cfg.MaxChunkSize), cfg.Replacement, cfg.noFsync, cfg.FS, cfg.Logger)
		if err != nil {
			return nil, err
		}
		b = d
	}
	undo := newUndoTable(time.Now, undoLimit)
	m, err := newMetrics(cfg.Registry, cfg.ID, b, cfg.Capabilities, undo)
	if err != nil {
		b.Close()
		return nil, errs.Wrap(errs.Invalid, "open store", "metrics", err)
	}
	s := &Server{cfg: cfg, backend: b, undo: undo, stripes: newStripeLocks(time.Now), m: m, log: cfg.Logger.With("component", "store", "store_id", cfg.ID)}
	id, incomplete := b.Identity()
	s.incomplete.Store(incomplete)
	s.log.Info("store open", "backend", cfg.Backend, "dir", cfg.Dir, "chunks", b.ChunkCount(), "id", id, "incomplete", incomplete)
	return s, nil
}

// Close waits for operations in flight, then closes the backend. Later
// requests fail with errs.Unavailable.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil
	}
	s.mu.closed = true
	s.m.unregister()
	return s.backend.Close()
}

// begin admits an operation; the returned func ends it.
func (s *Server) begin(ctx context.Context, op string) (func(), error) {
	if err := ctx.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, errs.Wrap(errs.Timeout, op, "", err)
		}
		return nil, errs.Wrap(errs.Canceled, op, "", err)
	}
	s.mu.RLock()
	if s.mu.closed {
		s.mu.RUnlock()
		return nil, errs.New(errs.Unavailable, op, "store closed")
	}
	return s.mu.RUnlock, nil
}

// failed counts and logs what deserves it and passes err on.
func (s *Server) failed(op string, k ChunkKey, err error) error {
	if errs.Is(err, errs.Corrupt) {
		s.m.corruptReads.Inc()
		s.log.Warn("corrupt chunk", "op", op, "chunk", k.String(), "err", err)
	} else if errs.Is(err, errs.IO) {
		s.log.Error("chunk i/o failed", "op", op, "chunk", k.String(), "err", err)
	}
	return err
}

func chunkKey(op string, id *weftpb.ChunkID) (ChunkKey, error) {
	if id == nil {
		return ChunkKey{}, errs.New(errs.Invalid, op, "no chunk id")
	}
	return ChunkKey{Ino: id.GetIno(), Index: id.GetIndex()}, nil
}
