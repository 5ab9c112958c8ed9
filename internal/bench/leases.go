package bench

// leases: what leases cost a writer (the part of seed 000's lease design
// its evaluation leaves open): how long a change waits while other clients
// hold read leases on what it changes, and how long while a holder does not
// answer (its lease is reclaimed when its term ends).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/lease"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// The leases rows.
const (
	leaseNoHolder = "setattr, no other client holds a lease"
	leaseReaders  = "setattr while 3 other clients hold read leases (each recalled)"
	leaseDead     = "setattr while a holder does not answer (reclaimed at its term's end)"
)

func leasesBenchmark() Benchmark {
	return Benchmark{
		Name: "leases",
		Doc: "How long a change waits for the read leases other clients hold on what it changes: " +
			"none, three live holders (recalled and released), a holder that does not answer",
		Notes: []string{
			"One in-process cluster (one meta, one store; sync durability) reached over loopback TCP. " +
				"The change is a chmod through the library of a file whose attributes live in its directory " +
				"entry, so the lease recalled is the directory's. Live holders are library clients that take a " +
				"read lease before every change and release it when recalled. The silent holder is a " +
				"connection that took a lease and never answers recalls: the change waits for the lease's " +
				"term (" + lease.DefaultTerm.String() + ") from its grant. Mean and p99 of each series, µs.",
		},
		Run: runLeases,
	}
}

func runLeases(ctx context.Context, env *Env) ([]Result, error) {
	n, dead := 300, 3
	if env.Quick {
		n, dead = 50, 1
	}
	reps := env.repeats()
	env.progress(reps * 3)
	lc, err := startLib(ctx, env.Dir, libOptions{})
	if err != nil {
		return nil, err
	}
	defer lc.Close()
	writer, err := lc.client(nil, false)
	if err != nil {
		return nil, err
	}
	defer writer.Close()
	d, err := writer.MkdirAt(ctx, core.RootIno, "leases", 0o755)
	if err != nil {
		return nil, err
	}
	f, err := writer.CreateAt(ctx, d.Ino, "file", os.O_RDWR|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	ref := f.Ref()
	if err := f.Close(); err != nil {
		return nil, err
	}
	var readers []*client.Client
	for range 3 {
		r, err := lc.client(nil, false)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		r.OnRecall(func([]client.LeaseKey) {})
		readers = append(readers, r.Client)
	}
	res := map[string]*Result{}
	for _, row := range []string{leaseNoHolder, leaseReaders, leaseDead} {
		for _, stat := range []string{"mean", "p99"} {
			res[row+stat] = &Result{Bench: "leases", Case: row, Target: stat, Unit: "µs"}
		}
	}
	add := func(row string, lat []time.Duration) {
		mean, p99 := meanP99(lat)
		res[row+"mean"].Samples = append(res[row+"mean"].Samples, mean)
		res[row+"p99"].Samples = append(res[row+"p99"].Samples, p99)
	}
	chmod := func(i int) (time.Duration, error) {
		mode := uint32(0o600 | i%2*0o044)
		start := time.Now()
		_, err := writer.SetAttr(ctx, ref, client.SetAttr{Mode: &mode})
		return time.Since(start), err
	}
	for r := range reps {
		env.step(fmt.Sprintf("no holder, series %d", r+1))
		lat, err := leaseSeries(n, chmod, nil)
		if err != nil {
			return nil, err
		}
		add(leaseNoHolder, lat)

		env.step(fmt.Sprintf("live holders, series %d", r+1))
		lat, err = leaseSeries(n, chmod, func() error {
			for _, rd := range readers {
				if l := rd.ReadLease(ctx, rd.EntryLease(d.Ino, "file")); l.Remaining() == 0 {
					return fmt.Errorf("a reader got no lease")
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		add(leaseReaders, lat)

		env.step(fmt.Sprintf("silent holder, series %d", r+1))
		silent := rpc.NewPeer(lc.cfg.Meta[0].Addr, rpc.DialOptions{})
		lat, err = leaseSeries(dead, chmod, func() error {
			var reply weftpb.LeaseAcquireReply
			err := silent.Call(ctx, weftpb.MethodLeaseAcquire, &weftpb.LeaseAcquireRequest{
				Session: rand.Uint64() | 1, Mode: weftpb.LeaseMode_LEASE_READ, Keys: []uint64{uint64(d.Ino)}}, &reply)
			if err == nil && len(reply.Granted) == 0 {
				err = fmt.Errorf("the silent holder got no lease")
			}
			return err
		})
		silent.Close()
		if err != nil {
			return nil, err
		}
		add(leaseDead, lat)
	}
	var out []Result
	for _, row := range []string{leaseNoHolder, leaseReaders, leaseDead} {
		out = append(out, *res[row+"mean"], *res[row+"p99"])
	}
	return out, nil
}

// leaseSeries times n changes, each after before (if any) set the stage.
func leaseSeries(n int, change func(int) (time.Duration, error), before func() error) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for i := range n {
		if before != nil {
			if err := before(); err != nil {
				return nil, err
			}
		}
		d, err := change(i)
		if err != nil {
			return nil, err
		}
		lat = append(lat, d)
	}
	return lat, nil
}
