package repair

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/waitfor"
	"github.com/weftfs/weft/proto/weftpb"
	"google.golang.org/protobuf/proto"
)

// lockStore is one stripe lock as a store keeps it, for the pass's side
// of it: a request waits at the store while another owner holds the lock
// (up to its WaitMs), whatever becomes of its caller, as a real store's
// handler does; a release frees the lock only if it names the latest
// grant.
type lockStore struct {
	mu       sync.Mutex
	owner    uint64 // 0: free
	seq      uint64
	freed    chan struct{} // closed when the lock is freed
	asked    chan struct{} // a request arrived
	answered chan struct{} // a request was answered at the store
}

func newLockStore(holder uint64) *lockStore {
	return &lockStore{owner: holder, seq: 1, freed: make(chan struct{}), asked: make(chan struct{}, 16), answered: make(chan struct{}, 16)}
}

func (l *lockStore) holder() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owner
}

func (l *lockStore) release(owner, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.owner == owner && l.seq == seq {
		l.owner = 0
		close(l.freed)
		l.freed = make(chan struct{})
	}
}

func (l *lockStore) Call(ctx context.Context, method uint16, req, _ proto.Message) error {
	if method != weftpb.MethodLockStripe {
		return errs.New(errs.NotSupported, "call", "method %d", method)
	}
	r := req.(*weftpb.LockStripeRequest)
	l.asked <- struct{}{}
	answer := make(chan error, 1)
	go func() { // the store's handler: it does not see the caller give up
		defer func() { l.answered <- struct{}{} }()
		wait := time.NewTimer(time.Duration(r.WaitMs) * time.Millisecond)
		defer wait.Stop()
		for {
			l.mu.Lock()
			if l.owner == 0 || l.owner == r.Owner {
				l.owner, l.seq = r.Owner, r.Seq
				l.mu.Unlock()
				answer <- nil
				return
			}
			freed := l.freed
			l.mu.Unlock()
			select {
			case <-freed:
			case <-wait.C:
				answer <- errs.New(errs.Busy, "lock stripe", "held")
				return
			}
		}
	}()
	select {
	case err := <-answer:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *lockStore) Send(_ context.Context, method uint16, req proto.Message) error {
	if r, ok := req.(*weftpb.UnlockStripe); ok && method == weftpb.MethodUnlockStripe {
		l.release(r.Owner, r.Seq)
	}
	return nil
}

func (l *lockStore) CallData(context.Context, uint16, proto.Message, []byte, proto.Message) ([]byte, error) {
	return nil, errs.New(errs.NotSupported, "call", "data")
}

// TestCanceledRepairLeavesNoLock: a pass stopped while its lock request
// waits at the store for a client's release leaves no lock behind once
// the store grants that request (before, the stripe stayed locked for the
// pass's 15 s term, and every writer of it waited).
func TestCanceledRepairLeavesNoLock(t *testing.T) {
	const client = 7
	ls := newLockStore(client)
	p := &pass{cfg: Config{Stores: []Store{ls}, CallTimeout: 10 * time.Second}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool, 1)
	go func() {
		_, ok := p.lockStripe(ctx, 1, 4, 0)
		done <- ok
	}()
	<-ls.asked
	cancel()
	ls.release(client, 1) // the store grants the waiting request now
	<-ls.answered
	select {
	case ok := <-done:
		if ok {
			t.Errorf("a stopped pass says it holds the lock")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stopped pass's lockStripe did not return")
	}
	waitfor.Until(t, 5*time.Second, "the stripe's lock free again", func() bool { return ls.holder() == 0 })
}
