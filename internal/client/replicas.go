package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Reading a chunk from its replicas (issue 12: no silent zeros, no hangs).
//
// A replica that answers found = false does not hold the chunk: it is asked
// no further and the read goes on to the next replica. When none holds it,
// the file's written ranges decide (core.Extents): a chunk some write
// reached is lost (EIO), any other is a hole. A replica that holds
// the chunk but has fewer bytes than its recorded size lost some (errs.Lost),
// and so does one that says so itself: the read fails over too. Only when
// every replica answered found = false is the range a hole (never written)
// and reads as zeros; bytes past a found chunk's recorded size were never
// written either. If some replica failed and none had the chunk, the read
// fails with EIO: lost data never reads as zeros.
//
// A replica that does not answer within Config.ReplicaTimeout does not stop
// the read: the next replica is asked as well (a hedged read), and the first
// that has the chunk answers. Each replica's call is bounded by
// Config.StoreTimeout, so a read whose every replica is stopped fails within
// it rather than waiting for ever. A replica that was slow or failed is
// suspect for suspectFor: reads ask it last, so that a stopped store costs
// one ReplicaTimeout per suspectFor, not one per chunk read.
//
// A chunk read that failed on every replica is answered with the same
// error for failedReadMemory: the kernel sends one read(2) as several
// READs (readahead, then each page again), and each would otherwise wait
// StoreTimeout for the same stopped store, so that the read(2) failed
// after three of them (TestMountReplicaLostAndStopped: 8.6 s).

const (
	// suspectFor is how long a replica that was slow or failed is asked
	// last.
	suspectFor = 30 * time.Second
	// failedReadMemory is how long a chunk read that failed on every
	// replica is not tried again.
	failedReadMemory = time.Second
	// maxFailedReads bounds how many such failures are remembered.
	maxFailedReads = 4096
)

// suspects remembers the stores that were slow or failed lately, and the
// chunk reads that failed on every replica.
type suspects struct {
	until  []atomic.Int64 // by store id: unix nanoseconds
	memory time.Duration  // failedReadMemory (tests set it)
	nfail  atomic.Int32   // len(failed), for the reads that find none
	mu     sync.Mutex
	failed map[stripeKey]failedRead // by ino and chunk index
}

type failedRead struct {
	err error
	at  time.Time
}

func newSuspects(n int) *suspects {
	return &suspects{until: make([]atomic.Int64, n), memory: failedReadMemory, failed: map[stripeKey]failedRead{}}
}

// recentFailure is the error of chunk k's last read if it failed on every
// replica within the memory; nil otherwise.
func (sp *suspects) recentFailure(k stripeKey) error {
	if sp.nfail.Load() == 0 {
		return nil
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	f, ok := sp.failed[k]
	if !ok {
		return nil
	}
	if time.Since(f.at) >= sp.memory {
		delete(sp.failed, k)
		sp.nfail.Store(int32(len(sp.failed)))
		return nil
	}
	return f.err
}

// readFailed remembers that chunk k's read failed on every replica with
// err.
func (sp *suspects) readFailed(k stripeKey, err error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.failed) >= maxFailedReads {
		clear(sp.failed)
	}
	sp.failed[k] = failedRead{err: err, at: time.Now()}
	sp.nfail.Store(int32(len(sp.failed)))
}

// mark makes store s suspect for suspectFor from now.
func (sp *suspects) mark(s int) { sp.until[s].Store(time.Now().Add(suspectFor).UnixNano()) }

// clear says store s answered well.
func (sp *suspects) clear(s int) { sp.until[s].Store(0) }

// order returns reps with the suspect stores last, in their order otherwise.
func (sp *suspects) order(reps []int) []int {
	now := time.Now().UnixNano()
	out := make([]int, 0, len(reps))
	var late []int
	for _, s := range reps {
		if sp.until[s].Load() > now {
			late = append(late, s)
		} else {
			out = append(out, s)
		}
	}
	return append(out, late...)
}

// replicaRead is one replica's answer to a chunk read.
type replicaRead struct {
	data  []byte // pooled (rpc.GetBuffer); nil when not found
	found bool
}

// checkReplica judges a store's answer to a read of n bytes at off: got
// bytes came back, and the store says whether it holds the chunk (found)
// and its recorded size. It returns how many of the bytes are the chunk's
// and whether the store holds it; a store that holds the chunk but
// returned fewer bytes than it recorded lost some (errs.Lost).
func checkReplica(store int, got int64, found bool, chunkSize, off, n int64) (int64, bool, error) {
	if !found && got > 0 {
		// A store from before the found field: bytes mean it has the
		// chunk, and it cannot say how long it should be.
		found, chunkSize = true, off+got
	}
	if !found {
		return 0, false, nil
	}
	want := min(max(chunkSize-off, 0), n)
	if got < want {
		return 0, false, errs.New(errs.Lost, "read chunk", "store %d returned %d of the %d bytes it recorded at offset %d", store, got, want, off)
	}
	return want, true, nil
}

// readChunk reads up to n bytes at off of chunk (ino, index) from its
// replicas (see above). The result may be short, or nil for a hole: the
// bytes past it were never written and read as zeros. It is a buffer from
// rpc.GetBuffer, owned by the caller, who may give it back with
// rpc.PutBuffer.
func (c *Client) readChunk(ctx context.Context, ino core.Ino, index uint64, off, n int64) ([]byte, error) {
	if c.ec != nil {
		return c.readStripeChunk(ctx, ino, index, off, n)
	}
	reps := replicas(ino, index, len(c.stores), c.cfg.Replication)
	return c.readReplicas(ctx, ino, index, reps, func(ctx context.Context, s int) (replicaRead, error) {
		var r pb.ReadChunkReply
		var data []byte
		read := func() error {
			return c.withCapability(ctx, ino, auth.Read, func(tok []byte) (err error) {
				req := &pb.ReadChunkRequest{Chunk: &pb.ChunkID{Ino: uint64(ino), Index: index}, Offset: off, Length: n, Capability: tok}
				data, err = c.stores[s].CallData(ctx, pb.MethodReadChunk, req, nil, &r)
				return err
			})
		}
		var err error
		if len(reps) > 1 {
			err = read() // once: other replicas can take over
		} else {
			err = c.retryUnavailable(ctx, read)
		}
		var k int64
		var found bool
		if err == nil {
			k, found, err = checkReplica(s, int64(len(data)), r.Found, r.ChunkSize, off, n)
		}
		if err != nil || !found {
			rpc.PutBuffer(data)
			return replicaRead{}, err
		}
		return replicaRead{data: data[:k], found: true}, nil
	})
}

// readReplicas runs try on the replicas reps in order, each bounded by
// StoreTimeout, starting the next one when the previous fails, answers
// found = false, or has not answered within ReplicaTimeout. It returns the
// first replica's data that has the chunk; nil if every replica answered
// found = false (a hole); and an EIO error if some failed and none had it.
func (c *Client) readReplicas(ctx context.Context, ino core.Ino, index uint64, reps []int, try func(context.Context, int) (replicaRead, error)) ([]byte, error) {
	type answer struct {
		store int
		r     replicaRead
		err   error
	}
	key := stripeKey{ino, index}
	if err := c.suspects.recentFailure(key); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the replicas still asked give up
	reps = c.suspects.order(reps)
	answers := make(chan answer, len(reps))
	next, pending := 0, 0
	start := func() {
		s := reps[next]
		next++
		pending++
		go func() {
			actx, acancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
			defer acancel()
			r, err := try(actx, s)
			answers <- answer{s, r, err}
		}()
	}
	hedge := time.NewTimer(c.cfg.ReplicaTimeout)
	defer hedge.Stop()
	var failed error
	for start(); pending > 0; {
		select {
		case a := <-answers:
			pending--
			switch {
			case a.err == nil && a.r.found:
				c.suspects.clear(a.store)
				return a.r.data, nil
			case a.err == nil:
				// Not on this replica: the next may have it.
			case ctx.Err() != nil || !failoverable(a.err):
				return nil, a.err
			default:
				c.log.Warn("chunk read failed over", "ino", ino, "index", index, "store", a.store, "err", a.err)
				c.suspects.mark(a.store)
				if failed == nil {
					failed = a.err
				}
			}
			if next < len(reps) {
				start()
				hedge.Reset(c.cfg.ReplicaTimeout)
			}
		case <-hedge.C:
			if next < len(reps) {
				c.log.Warn("chunk read hedged: replica slow", "ino", ino, "index", index, "store", reps[next-1], "after", c.cfg.ReplicaTimeout)
				c.suspects.mark(reps[next-1])
				start()
				hedge.Reset(c.cfg.ReplicaTimeout)
			}
		case <-ctx.Done():
			return nil, ctxError("read chunk", ctx)
		}
	}
	if failed != nil {
		err := errs.Wrap(errs.IO, "read chunk", chunkName(ino, index), failed)
		c.suspects.readFailed(key, err)
		return nil, err
	}
	if err := c.lostIfWritten(ino, index); err != nil {
		return nil, err
	}
	return nil, nil // no replica ever held it: a hole
}

// lostIfWritten is the error of chunk (ino, index) that no store holds: nil
// if it was never written (a hole, zeros), EIO if it was (core.Extents).
func (c *Client) lostIfWritten(ino core.Ino, index uint64) error {
	if !c.chunkWritten(ino, index) {
		return nil
	}
	return errs.New(errs.IO, "read chunk", "%s was written, and no store holds it: lost (weft repair restores it if a copy is left)", chunkName(ino, index))
}

// ctxError is the error of an operation whose context ended.
func ctxError(op string, ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return errs.Wrap(errs.Timeout, op, "", ctx.Err())
	}
	return errs.Wrap(errs.Canceled, op, "", ctx.Err())
}

func chunkName(ino core.Ino, index uint64) string { return fmt.Sprintf("chunk %d/%d", ino, index) }
