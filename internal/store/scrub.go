package store

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// The scrub reads every chunk back and checks every block's CRC, at a
// bounded rate, so that a replica which rotted, lost its tail or its
// header is found before a reader needs it. It reports what it found;
// rewriting a bad chunk from a good replica is repair's work.

// scrubPiece is how much of a chunk the scrub reads under one lock: a
// writer of the chunk waits for at most one piece.
const scrubPiece = 4 << 20

// ScrubOptions configures one scrub pass.
type ScrubOptions struct {
	// BytesPerSecond bounds the rate at which the pass reads chunk bytes;
	// 0 reads as fast as the disk goes.
	BytesPerSecond int64
	// Now and Sleep replace the clock (tests); nil: the real one.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// ScrubFinding is a chunk that failed its check.
type ScrubFinding struct {
	Key ChunkKey
	Err error // kind errs.Corrupt, errs.Lost or errs.IO
}

// ScrubReport is what a pass checked and found.
type ScrubReport struct {
	Chunks int64 // chunks checked
	Bytes  int64 // bytes read
	Bad    []ScrubFinding
}

// Scrub checks every chunk of the store once and returns what it found;
// each bad chunk also counts in weft_store_scrub_bad_chunks_total. It
// stops early, with the report so far, when ctx ends.
func (s *Server) Scrub(ctx context.Context, opts ScrubOptions) (ScrubReport, error) {
	const op = "scrub"
	var rep ScrubReport
	lim := newRateLimit(opts)
	buf := make([]byte, scrubPiece+2*s.cfg.blockSize)
	q := ListQuery{Limit: DefaultListLimit}
	for {
		keys, more, err := s.scrubKeys(ctx, q)
		if err != nil {
			return rep, err
		}
		for _, k := range keys {
			n, err := s.scrubChunk(ctx, k, buf, lim)
			rep.Bytes += n
			switch {
			case ctx.Err() != nil:
				return rep, errs.Wrap(errs.Canceled, op, "", ctx.Err())
			case err != nil:
				rep.Bad = append(rep.Bad, ScrubFinding{Key: k, Err: err})
				s.m.scrubBad.Inc()
				s.log.Warn("scrub found a bad chunk", "chunk", k.String(), "err", err)
			}
			rep.Chunks++
			s.m.scrubbed.Add(float64(n))
		}
		if !more || len(keys) == 0 {
			return rep, nil
		}
		q.After = &keys[len(keys)-1]
	}
}

func (s *Server) scrubKeys(ctx context.Context, q ListQuery) ([]ChunkKey, bool, error) {
	done, err := s.begin(ctx, "scrub")
	if err != nil {
		return nil, false, err
	}
	defer done()
	return s.backend.Keys(q)
}

// scrubChunk reads chunk k piece by piece, each under the chunk's lock,
// and returns how many bytes it read. A chunk deleted meanwhile is fine.
func (s *Server) scrubChunk(ctx context.Context, k ChunkKey, buf []byte, lim *rateLimit) (int64, error) {
	var off int64
	for {
		n, size, err := s.scrubPieceAt(ctx, k, off, buf)
		if err != nil {
			return off, err
		}
		off += n
		if err := lim.wait(ctx, n); err != nil {
			return off, nil // the caller sees ctx's end
		}
		if n == 0 || off >= size {
			return off, nil
		}
	}
}

func (s *Server) scrubPieceAt(ctx context.Context, k ChunkKey, off int64, buf []byte) (n, size int64, err error) {
	done, err := s.begin(ctx, "scrub")
	if err != nil {
		return 0, 0, err
	}
	defer done()
	unlock := s.locks.lockChunk(k, false)
	defer unlock()
	alloc := func(m int) []byte {
		if m > len(buf) { // a chunk file of a larger block size
			return make([]byte, m)
		}
		return buf[:m]
	}
	data, info, found, err := s.backend.Read(k, off, scrubPiece, alloc)
	if !found || err != nil {
		return 0, 0, err
	}
	return int64(len(data)), info.Size, nil
}

// rateLimit paces a stream of bytes to a rate from its start.
type rateLimit struct {
	rate  float64 // bytes per second; 0: none
	start time.Time
	total int64
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

func newRateLimit(o ScrubOptions) *rateLimit {
	l := &rateLimit{rate: float64(o.BytesPerSecond), now: o.Now, sleep: o.Sleep}
	if l.now == nil {
		l.now = time.Now
	}
	if l.sleep == nil {
		l.sleep = sleepCtx
	}
	l.start = l.now()
	return l
}

// wait accounts n more bytes and sleeps until they are within the rate.
func (l *rateLimit) wait(ctx context.Context, n int64) error {
	if l.rate <= 0 {
		return ctx.Err()
	}
	l.total += n
	due := l.start.Add(time.Duration(float64(l.total) / l.rate * float64(time.Second)))
	if d := due.Sub(l.now()); d > 0 {
		return l.sleep(ctx, d)
	}
	return ctx.Err()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ScrubLoop runs a pass every interval (measured from a pass's start, and
// at least one interval after the last one began) until ctx ends: the
// background scrubber a store process runs.
func (s *Server) ScrubLoop(ctx context.Context, every time.Duration, opts ScrubOptions) {
	for {
		start := time.Now()
		rep, err := s.Scrub(ctx, opts)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Warn("scrub failed", "err", err)
		} else {
			s.log.Info("scrub done", "chunks", rep.Chunks, "bytes", rep.Bytes, "bad", len(rep.Bad), "took", time.Since(start))
		}
		if sleepCtx(ctx, time.Until(start.Add(every))) != nil {
			return
		}
	}
}
