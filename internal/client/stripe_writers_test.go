package client_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/rpc"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// TestErasureTwoWriters: two clients write different data units of one
// stripe at once, with small flushed writes, and with and without the
// parity cache. Each computes the stripe's parity from the other units it
// reads; unless the stripe's writers are serialised across clients, one
// writes parity made from the other's old bytes, and a degraded read of
// any unit of the stripe then rebuilds wrong bytes. Every data unit's
// store is stopped in turn (disk stores, which come back with their
// units) and the file must read back whole each time.
func TestErasureTwoWriters(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames int
	}{{"cache", 0}, {"no cache", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			ec := newECClusterBackend(t, "ec:4+1", 5, config.BackendDisk)
			adjust := func(cc *client.Config) { cc.ParityFrames = tc.frames }
			a, b := ec.clientWith(ecChunk, adjust), ec.clientWith(ecChunk, adjust)
			model := bytes.Repeat([]byte("base"), 4*ecChunk/4)
			writeFile(t, a, "/f", model)

			// Writer w writes 4 KiB pieces into data unit w of the stripe.
			var wg sync.WaitGroup
			errc := make(chan error, 2)
			for w, c := range []*client.Client{a, b} {
				wg.Go(func() {
					f, err := c.Open(context.Background(), "/f", os.O_RDWR, 0)
					if err != nil {
						errc <- err
						return
					}
					defer f.Close()
					p := make([]byte, 4096)
					for i := range 60 {
						off := int64(w)*ecChunk + int64(i*7919%15)*4096
						for j := range p {
							p[j] = byte(w*101 + i + j)
						}
						if _, err := f.WriteAt(p, off); err != nil {
							errc <- err
							return
						}
						copy(model[off:], p) // the writers' ranges are disjoint
						if err := f.Flush(); err != nil {
							errc <- err
							return
						}
					}
					if err := f.Close(); err != nil {
						errc <- err
					}
				})
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			a.FlushParity(0)
			b.FlushParity(0)

			reader := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrames = -1 })
			if got, err := readAll(t, reader, "/f"); err != nil || !bytes.Equal(got, model) {
				t.Fatalf("all stores up: err %v, bytes equal %v", err, bytes.Equal(got, model))
			}
			for index := range uint64(4) {
				s := ec.storeOf(t, reader, "/f", index)
				ec.stopStore(s)
				got, err := readAll(t, reader, "/f")
				ec.startStore(s)
				if err != nil {
					t.Fatalf("unit %d's store down: %v", index, err)
				}
				wantSame(t, fmt.Sprintf("unit %d's store down", index), got, model)
			}
		})
	}
}

// TestErasureHedgedReadLeavesNoLock: a read of a unit whose store is
// suspect (it failed lately) is hedged at once by a rebuild, which takes
// the stripe's lock at its store first. When the unit's own store answers
// first, the rebuild is canceled, sometimes just after its lock request
// was granted and before the grant came back. The lock must not stay
// behind: another client, or weft repair, would wait for its term (5 s;
// a repair pass gives up after 2 s and leaves the stripe, which is how
// TestErasureModelNoCache's second repair came out raced).
func TestErasureHedgedReadLeavesNoLock(t *testing.T) {
	const stripes = 8
	ec := newECCluster(t, "ec:3+2", 5)
	c := ec.client(ecChunk)
	ctx := context.Background()
	data := make([]byte, stripes*3*ecChunk)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	writeFile(t, c, "/f", data)
	f, err := c.Open(ctx, "/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := ec.cfg.Erasure()
	peers := make([]*rpc.Peer, len(ec.cfg.Store))
	for i, s := range ec.cfg.Store {
		peers[i] = rpc.NewPeer(s.Addr, rpc.DialOptions{})
		defer peers[i].Close()
	}
	buf := make([]byte, 4096)
	for i := range 200 {
		st := uint64(i % stripes)
		stores := sc.Stores(f.Ino(), st, len(peers))
		c.MarkStoreSuspect(stores[0])
		if _, err := f.ReadAt(buf, int64(st)*3*ecChunk); err != nil {
			t.Fatal(err)
		}
		// Another owner asks for the lock, waiting a little for a holder
		// still busy with the read to let go; a lock left behind lasts
		// seconds.
		lock := &pb.ChunkID{Ino: uint64(f.Ino()), Index: sc.ParityIndex(st, 0)}
		req := &pb.LockStripeRequest{Chunk: lock, Owner: 1, Seq: uint64(i + 1), TermMs: 1000, WaitMs: 500}
		if err := peers[stores[sc.K]].Call(ctx, pb.MethodLockStripe, req, &pb.LockStripeReply{}); err != nil {
			t.Fatalf("read %d (stripe %d) hedged by a rebuild: the stripe's lock is still held afterwards: %v", i, st, err)
		}
		if err := peers[stores[sc.K]].Send(ctx, pb.MethodUnlockStripe, &pb.UnlockStripe{Chunk: lock, Owner: 1, Seq: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
}
