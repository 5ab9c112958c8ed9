package meta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weftfs/weft/internal/errs"
	"google.golang.org/protobuf/proto"
)

// formatMajorVersion is pinned rather than left to pebble's default (the
// oldest it supports) or FormatNewest (which would move with a pebble
// upgrade): format ratchets are one-way, so they happen on purpose.
const formatMajorVersion = pebble.FormatValueSeparation

// storeOptions say how openPebble opens a store.
type storeOptions struct {
	fs       vfs.FS
	log      *slog.Logger
	now      func() time.Time // for the error log's rate limit; nil: time.Now
	readOnly bool             // a server whose storage failed (health.go) writes nothing
	failed   func(error)      // if not nil, hears of the errors that mean the disk failed
}

// openPebble opens or creates the store under dir.
func openPebble(dir string, o storeOptions) (*pebble.DB, error) {
	log, failed := o.log, o.failed
	cache := pebble.NewCache(64 << 20)
	defer cache.Unref() // the DB holds its own reference
	opts := &pebble.Options{
		FormatMajorVersion: formatMajorVersion,
		Cache:              cache,
		// A create inserts three small keys; inserts slow down as the
		// memtable's skiplist grows out of the CPU caches. Measured on a
		// million creates in one directory (4 servers): 8 MiB made 12-15%
		// more creates/s than 64 MiB, and kept the rate to the end (docs/
		// decisions.md).
		MemTableSize: 8 << 20,
		Merger:       counterMerger,
		Logger:       &pebbleLogger{log: log, fatal: failed, limit: newLogLimiter(o.now)},
		FS:           o.fs,
		ReadOnly:     o.readOnly,
	}
	if failed != nil {
		opts.FS = watchWrites(o.fs, failed)
		opts.EventListener = &pebble.EventListener{BackgroundError: func(err error) {
			if isStorageError(err) {
				failed(err) // logs the first one
				return
			}
			opts.Logger.Errorf("pebble background error: %v", err)
		}}
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, errs.Wrap(storageKind(err), "meta open", dir, err)
	}
	return db, nil
}

// pebbleLogger routes pebble's messages to slog. Fatalf must not exit the
// process from library code; pebble calls it when it cannot continue (a
// commit whose WAL write failed, corruption), so it reports the failure to
// the server (fatal, which marks it failed: see health.go) and panics, as
// pebble's own contract expects Fatalf not to return. The server recovers
// that panic around its own calls into pebble.
//
// Errorf is rate-limited: a store on a failing disk can make pebble report
// the same error thousands of times a second.
type pebbleLogger struct {
	log   *slog.Logger
	fatal func(error) // nil: nothing to tell
	limit *logLimiter
}

func (l *pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l *pebbleLogger) Errorf(format string, args ...any) {
	ok, suppressed := l.limit.allow()
	if suppressed > 0 {
		l.log.Error("pebble: errors suppressed by the rate limit", "component", "pebble", "suppressed", suppressed)
	}
	if ok {
		l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
	}
}

func (l *pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error(msg, "component", "pebble", "fatal", true)
	if l.fatal != nil {
		l.fatal(errors.New(msg))
	}
	panic("pebble: " + msg)
}

// counterMerger sums little-endian int64 merge operands. Only the counter keys
// (keyInodes, keyDirs) are ever merged, so every create or remove adds its
// delta in its own batch without a read-modify-write on a hot key.
var counterMerger = &pebble.Merger{
	Name: "weft.counter.v1",
	Merge: func(_, value []byte) (pebble.ValueMerger, error) {
		m := &counterSum{}
		return m, m.add(value)
	},
}

type counterSum struct{ sum int64 }

func (c *counterSum) add(v []byte) error {
	if len(v) != 8 {
		return errors.New("weft counter: operand is not 8 bytes")
	}
	c.sum += int64(binary.LittleEndian.Uint64(v))
	return nil
}

func (c *counterSum) MergeNewer(v []byte) error { return c.add(v) }
func (c *counterSum) MergeOlder(v []byte) error { return c.add(v) }
func (c *counterSum) Finish(bool) ([]byte, io.Closer, error) {
	return binary.LittleEndian.AppendUint64(nil, uint64(c.sum)), nil, nil
}

func counterDelta(d int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(d)) }

// getValue reads key; found is false when it is absent.
func getValue(db *pebble.DB, key []byte) (val []byte, found bool, err error) {
	v, closer, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, errs.Wrap(errs.IO, "meta get", "", err)
	}
	val = append([]byte(nil), v...) // v is valid only until Close
	closer.Close()
	return val, true, nil
}

// getRecord reads and decodes a record; found is false when it is absent.
func getRecord(db *pebble.DB, key []byte, m proto.Message) (found bool, err error) {
	v, found, err := getValue(db, key)
	if err != nil || !found {
		return false, err
	}
	return true, decodeRecord(key, v, m)
}

// decodeRecord decodes v, the value of key, into m.
func decodeRecord(key, v []byte, m proto.Message) error {
	if err := proto.Unmarshal(v, m); err != nil {
		return errs.Wrap(errs.Corrupt, "meta decode", fmt.Sprintf("%q", key), err)
	}
	return nil
}

func readCounter(db *pebble.DB, key []byte) (int64, error) {
	v, found, err := getValue(db, key)
	if err != nil || !found {
		return 0, err
	}
	if len(v) != 8 {
		return 0, errs.New(errs.Corrupt, "meta open", "counter %q has %d bytes", key, len(v))
	}
	return int64(binary.LittleEndian.Uint64(v)), nil
}

// syncLoop makes async mode's loss window bounded: pebble's NoSync commits sit
// in a process buffer until something syncs the WAL, so every interval an
// empty synced LogData record forces the WAL (and every commit before it) to
// disk.
func (s *Server) syncLoop(interval time.Duration) {
	defer close(s.syncDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.syncStop:
			return
		case <-t.C:
			if s.failed.Load() != nil {
				continue // the failure was logged once
			}
			if err := s.syncWAL("meta sync"); err != nil {
				s.log.Error("meta: background WAL sync failed", "err", err)
			}
		}
	}
}

// Pebble's error log allows errorBurst lines per errorWindow.
const (
	errorBurst  = 10
	errorWindow = 10 * time.Second
)

// logLimiter lets errorBurst messages through per errorWindow and counts
// the rest.
type logLimiter struct {
	now func() time.Time
	mu  struct {
		sync.Mutex
		start      time.Time
		n          int
		suppressed int
	}
}

func newLogLimiter(now func() time.Time) *logLimiter {
	if now == nil {
		now = time.Now
	}
	return &logLimiter{now: now}
}

// allow says whether a message may be logged now, and how many were
// suppressed in the window that just ended (to be reported once).
func (l *logLimiter) allow() (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.mu.start) >= errorWindow {
		suppressed = l.mu.suppressed
		l.mu.start, l.mu.n, l.mu.suppressed = now, 0, 0
	}
	if l.mu.n < errorBurst {
		l.mu.n++
		return true, suppressed
	}
	l.mu.suppressed++
	return false, suppressed
}
