package client_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/erasure"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/internal/waitfor"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// TestStripeParityModel: random partial writes, holes and truncates on
// ec:4+1 and ec:3+2 without the parity cache (every write a reconstruct-
// write, with its parity from SendParity and its data unit's old bytes
// kept by the store), then every stripe's parity as stored equals a full
// re-encode of its data units (cut at the end of file), every byte reads
// back with each store down in turn, and the stores hold no undo bytes
// once the writes are done (each successful write released its own).
func TestStripeParityModel(t *testing.T) {
	for _, red := range []string{"ec:4+1", "ec:3+2"} {
		t.Run(red, func(t *testing.T) {
			ec := newECCluster(t, red, 5)
			c := ec.clientWith(ecChunk, func(cc *client.Config) { cc.ParityFrames = -1 })
			sc := ec.cfg.Erasure()
			ctx := context.Background()
			files := map[string][]byte{}
			inos := map[string]core.Ino{}
			rapid.Check(t, func(rt *rapid.T) {
				if len(files) >= 40 {
					return // enough files (the checks below cost per file)
				}
				path := fmt.Sprintf("/f%d", len(files))
				f, err := c.Create(ctx, path, 0o644)
				if err != nil {
					rt.Fatal(err)
				}
				var model []byte
				limit := 2 * sc.K * ecChunk
				for range rapid.IntRange(1, 10).Draw(rt, "ops") {
					switch rapid.IntRange(0, 5).Draw(rt, "op") {
					case 0:
						size := rapid.IntRange(0, len(model)).Draw(rt, "size")
						if err := f.Truncate(int64(size)); err != nil {
							rt.Fatalf("truncate %d: %v", size, err)
						}
						model = model[:size]
						continue
					case 1:
						// Flush now and then: the next writes then rewrite
						// stored ranges instead of merging in the buffer.
						if err := f.Sync(); err != nil {
							rt.Fatalf("sync: %v", err)
						}
						continue
					}
					off := rapid.IntRange(0, limit).Draw(rt, "off")
					n := rapid.IntRange(1, 2*ecChunk).Draw(rt, "n")
					p := bytes.Repeat([]byte{byte(rapid.IntRange(1, 255).Draw(rt, "b"))}, n)
					p[0] = byte(off)
					if _, err := f.WriteAt(p, int64(off)); err != nil {
						rt.Fatalf("write %d at %d: %v", n, off, err)
					}
					if len(model) < off+n {
						model = append(model, make([]byte, off+n-len(model))...)
					}
					copy(model[off:], p)
				}
				if err := f.Close(); err != nil {
					rt.Fatal(err)
				}
				files[path], inos[path] = model, f.Ino()
			})
			for path, want := range files {
				checkStripeParity(t, ec, inos[path], int64(len(want)))
			}
			waitfor.Until(t, 30*time.Second, "the stores released every write's kept bytes", func() bool {
				return ec.undoBytes(t) == 0
			})
			for i := range ec.stores {
				ec.stopStore(i)
				for path, want := range files {
					got, err := readAll(t, c, path)
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("store %d down: %s: err %v, equal %v (%d bytes, want %d)", i, path, err, bytes.Equal(got, want), len(got), len(want))
					}
				}
				ec.startStore(i) // empty: its units read by rebuilding, until repaired
				if rep := ec.repair(t); !rep.Clean() {
					t.Fatalf("repair of store %d: %v", i, rep)
				}
			}
		})
	}
}

// checkStripeParity reads every unit of the stripes of a file of size
// bytes from the stores and checks that the parity units are the code of
// the data units cut at size (bytes past the end read as zeros).
func checkStripeParity(t *testing.T, ec *ecCluster, ino core.Ino, size int64) {
	t.Helper()
	sc := ec.cfg.Erasure()
	codec, err := erasure.NewCodec(sc)
	if err != nil {
		t.Fatal(err)
	}
	peers := make([]*rpc.Peer, len(ec.cfg.Store))
	for i, s := range ec.cfg.Store {
		peers[i] = rpc.NewPeer(s.Addr, rpc.DialOptions{})
		defer peers[i].Close()
	}
	stripeBytes := int64(sc.K) * ecChunk
	for st := uint64(0); int64(st)*stripeBytes < size; st++ {
		stores := sc.Stores(ino, st, len(peers))
		units := make([][]byte, sc.Width())
		for pos := range units {
			var r pb.ReadChunkReply
			req := &pb.ReadChunkRequest{Chunk: &pb.ChunkID{Ino: uint64(ino), Index: sc.UnitIndex(st, pos)}, Length: ecChunk}
			d, err := peers[stores[pos]].CallData(context.Background(), pb.MethodReadChunk, req, nil, &r)
			if err != nil {
				t.Fatalf("ino %d stripe %d: read unit %d: %v", ino, st, pos, err)
			}
			u := make([]byte, ecChunk)
			copy(u, d)
			if pos < sc.K {
				start := int64(st)*stripeBytes + int64(pos)*ecChunk
				clear(u[max(0, min(ecChunk, size-start)):])
			}
			units[pos] = u
		}
		ok, err := codec.Verify(units, ecChunk)
		if err != nil || !ok {
			t.Fatalf("ino %d (size %d) stripe %d: parity is not the code of the data (err %v)", ino, size, st, err)
		}
	}
}

// undoBytes sums the bytes the stores keep to undo writes.
func (ec *ecCluster) undoBytes(t testing.TB) float64 {
	t.Helper()
	sum := 0.0
	for _, s := range ec.stores {
		mfs, err := s.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "weft_store_undo_bytes" {
				for _, m := range mf.GetMetric() {
					sum += m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}
