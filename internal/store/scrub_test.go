package store

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/errs"
)

// TestScrubFindsBadChunks: a scrub reads every chunk, finds the one that
// rotted and (disk) the one cut short, counts them, and leaves the good
// ones alone.
func TestScrubFindsBadChunks(t *testing.T) {
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			cfg := bc.cfg(t)
			reg := prometheus.NewRegistry()
			cfg.Registry = reg
			s := openStore(t, cfg)
			data := randBytes(rand.New(rand.NewPCG(21, 22)), 5<<20+77) // two pieces
			for i := range uint64(4) {
				mustWrite(t, s, 10+i, 0, 0, data)
			}
			want := map[ChunkKey]errs.Kind{{11, 0}: errs.Corrupt}
			if mb, ok := s.backend.(*memBackend); ok {
				mb.flipByte(ChunkKey{11, 0}, 4<<20+5) // in the second piece
			} else {
				flipOnDisk(t, s, ChunkKey{11, 0}, 4<<20+5)
				d := s.backend.(*diskBackend)
				if err := os.Truncate(d.chunkPath(ChunkKey{13, 0}), d.layout.dataOff+DefaultBlockSize); err != nil {
					t.Fatal(err)
				}
				want[ChunkKey{13, 0}] = errs.Lost
			}
			rep, err := s.Scrub(context.Background(), ScrubOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Chunks != 4 || len(rep.Bad) != len(want) {
				t.Fatalf("scrub report %+v, want 4 chunks, bad %v", rep, want)
			}
			for _, f := range rep.Bad {
				wantKind(t, "scrub finding "+f.Key.String(), f.Err, want[f.Key])
			}
			if n := metricValue(t, reg, "weft_store_scrub_bad_chunks_total"); n != float64(len(want)) {
				t.Fatalf("bad chunks counter = %v, want %d", n, len(want))
			}
			if rep.Bytes < 2*int64(len(data)) {
				t.Fatalf("scrub read %d bytes, want at least the two good chunks' %d", rep.Bytes, 2*len(data))
			}
		})
	}
}

// TestScrubRate: with a limit, the pass sleeps so that the bytes it read
// took at least bytes/rate on the (fake) clock, and it stops when its
// context ends.
func TestScrubRate(t *testing.T) {
	s := openStore(t, Config{Backend: "mem", MemLimit: 64 << 20})
	data := randBytes(rand.New(rand.NewPCG(1, 1)), 3<<20)
	mustWrite(t, s, 1, 0, 0, data)
	mustWrite(t, s, 2, 0, 0, data)
	clock := time.Unix(1000, 0)
	var slept time.Duration
	opts := ScrubOptions{
		BytesPerSecond: 1 << 20,
		Now:            func() time.Time { return clock },
		Sleep: func(ctx context.Context, d time.Duration) error {
			slept += d
			clock = clock.Add(d)
			return ctx.Err()
		},
	}
	rep, err := s.Scrub(context.Background(), opts)
	if err != nil || rep.Bytes != 6<<20 {
		t.Fatalf("scrub: %+v, %v", rep, err)
	}
	if slept < 6*time.Second-time.Millisecond || slept > 6*time.Second+time.Millisecond {
		t.Fatalf("6 MiB at 1 MiB/s slept %v, want 6s", slept)
	}
	ctx, cancel := context.WithCancel(context.Background())
	opts.Sleep = func(context.Context, time.Duration) error { cancel(); return context.Canceled }
	rep, err = s.Scrub(ctx, opts)
	wantKind(t, "canceled scrub", err, errs.Canceled)
	if rep.Chunks > 1 {
		t.Fatalf("a canceled scrub went on: %+v", rep)
	}
}
