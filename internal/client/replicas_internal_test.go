package client

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/waitfor"
)

func TestCheckReplica(t *testing.T) {
	for _, tc := range []struct {
		name              string
		got               int64
		found             bool
		chunkSize, off, n int64
		wantLen           int64
		wantFound         bool
		wantKind          errs.Kind
	}{
		{"not held", 0, false, 0, 0, 100, 0, false, 0},
		{"whole", 100, true, 100, 0, 100, 100, true, 0},
		{"past the recorded size reads as a hole", 40, true, 40, 0, 100, 40, true, 0},
		{"range wholly past the recorded size", 0, true, 40, 50, 100, 0, true, 0},
		{"short of the recorded size is lost", 30, true, 100, 0, 100, 0, false, errs.Lost},
		{"short in the middle", 10, true, 100, 50, 40, 0, false, errs.Lost},
		{"a store before found: bytes mean held", 60, false, 0, 0, 100, 60, true, 0},
	} {
		k, found, err := checkReplica(1, tc.got, tc.found, tc.chunkSize, tc.off, tc.n)
		if tc.wantKind != 0 {
			if !errs.Is(err, tc.wantKind) {
				t.Errorf("%s: error %v, want %v", tc.name, err, tc.wantKind)
			}
			continue
		}
		if err != nil || k != tc.wantLen || found != tc.wantFound {
			t.Errorf("%s: %d, %v, %v; want %d, %v", tc.name, k, found, err, tc.wantLen, tc.wantFound)
		}
	}
}

// fakeReplica is one replica's behaviour in TestReadReplicas.
type fakeReplica struct {
	data  []byte
	found bool
	err   error
	hang  bool // answer only when the context ends
}

func TestReadReplicas(t *testing.T) {
	lost := errs.New(errs.Lost, "read", "lost")
	held := fakeReplica{data: []byte("data"), found: true}
	none := fakeReplica{}
	for _, tc := range []struct {
		name     string
		reps     []fakeReplica
		want     string
		wantKind errs.Kind // 0: no error
	}{
		{"first holds it", []fakeReplica{held, none}, "data", 0},
		{"not found fails over", []fakeReplica{none, held}, "data", 0},
		{"lost fails over", []fakeReplica{{err: lost}, held}, "data", 0},
		{"a hung replica is hedged", []fakeReplica{{hang: true}, held}, "data", 0},
		{"every replica without it: a hole", []fakeReplica{none, none}, "", 0},
		{"lost and not found: EIO, not zeros", []fakeReplica{{err: lost}, none}, "", errs.IO},
		{"not found and unavailable: EIO", []fakeReplica{none, {err: errs.E(errs.Unavailable, "dial")}}, "", errs.IO},
		{"all hung: EIO within StoreTimeout", []fakeReplica{{hang: true}, {hang: true}}, "", errs.IO},
		{"a refusal is final", []fakeReplica{{err: errs.E(errs.Permission, "read")}, held}, "", errs.Permission},
	} {
		c := &Client{cfg: Config{ReplicaTimeout: 20 * time.Millisecond, StoreTimeout: 200 * time.Millisecond}, log: slog.New(slog.DiscardHandler)}
		c.suspects = newSuspects(len(tc.reps))
		reps := make([]int, len(tc.reps))
		for i := range reps {
			reps[i] = i
		}
		start := time.Now()
		data, err := c.readReplicas(context.Background(), 1, 0, reps, func(ctx context.Context, s int) (replicaRead, error) {
			r := tc.reps[s]
			if r.hang {
				<-ctx.Done()
				return replicaRead{}, errs.Wrap(errs.Timeout, "read", "", ctx.Err())
			}
			return replicaRead{data: r.data, found: r.found}, r.err
		})
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: took %v", tc.name, took)
		}
		if tc.wantKind != 0 {
			if !errs.Is(err, tc.wantKind) {
				t.Errorf("%s: error %v, want kind %v", tc.name, err, tc.wantKind)
			}
			continue
		}
		if err != nil || string(data) != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, data, err, tc.want)
		}
	}
}

func TestReadReplicasHonoursCancel(t *testing.T) {
	c := &Client{cfg: Config{ReplicaTimeout: time.Hour, StoreTimeout: time.Hour}, log: slog.New(slog.DiscardHandler)}
	c.suspects = newSuspects(1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.readReplicas(ctx, 1, 0, []int{0}, func(ctx context.Context, s int) (replicaRead, error) {
		<-ctx.Done()
		return replicaRead{}, errs.Wrap(errs.Timeout, "read", "", ctx.Err())
	})
	if !errs.Is(err, errs.Timeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read past the caller's deadline: %v, want Timeout", err)
	}
}

// TestReadReplicasRemembersAFailure: a chunk read that failed on every
// replica fails again at once for failedReadMemory, without asking the
// stores (the kernel's next READs of the same read(2) would each wait
// StoreTimeout), and asks them again after it.
func TestReadReplicasRemembersAFailure(t *testing.T) {
	c := &Client{cfg: Config{ReplicaTimeout: 20 * time.Millisecond, StoreTimeout: 200 * time.Millisecond}, log: slog.New(slog.DiscardHandler)}
	c.suspects = newSuspects(2)
	c.suspects.memory = 300 * time.Millisecond
	var asked atomic.Int32
	read := func(index uint64) error {
		_, err := c.readReplicas(context.Background(), 1, index, []int{0, 1}, func(ctx context.Context, s int) (replicaRead, error) {
			asked.Add(1)
			return replicaRead{}, errs.E(errs.Unavailable, "dial")
		})
		return err
	}
	if err := read(0); !errs.Is(err, errs.IO) || asked.Load() != 2 {
		t.Fatalf("first read: %v after asking %d stores, want EIO after 2", err, asked.Load())
	}
	if err := read(0); !errs.Is(err, errs.IO) || asked.Load() != 2 {
		t.Fatalf("read again at once: %v after asking %d stores in all, want EIO and no store asked", err, asked.Load())
	}
	if err := read(1); !errs.Is(err, errs.IO) || asked.Load() != 4 {
		t.Fatalf("another chunk: %v after asking %d stores in all, want its own stores asked", err, asked.Load())
	}
	waitfor.Until(t, 5*time.Second, "the failure forgotten and the stores asked again", func() bool {
		_ = read(0)
		return asked.Load() > 4
	})
}
