package bench

// micro's "mixed (dsl)" column (an edge meta server next to the client,
// the authoritative one across a dsl link) and its lease rows (get_read,
// end_read, get_write, end_write), timed as the wire calls themselves.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/linksim"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

const (
	// mixedColumn: client → edge on loopback, edge → meta over link.
	mixedColumn = "mixed (dsl)"

	opGetRnodeMiss = "get_rnode() — getattr, first access"
	opGetRead      = "get_read() — read lease"
	opEndRead      = "end_read()"
	opGetWrite     = "get_write() — write lease"
	opEndWrite     = "end_write()"
	// The first acquire of each series, timed apart: through the edge it
	// takes the upstream lease across the link (a miss), which the
	// series' acquires then find held.
	opGetReadFirst  = "get_read(), first of the series"
	opGetWriteFirst = "get_write(), first of the series"
)

// microTarget is one column's client, and where its lease calls go.
type microTarget struct {
	*linkedClient
	metaAddr string
}

// microClient returns the column's client: direct, through link, or (the
// mixed column) through an edge whose upstream traffic crosses link.
func microClient(ctx context.Context, lc *libCluster, column string, link *linksim.Profile) (*microTarget, error) {
	if column != mixedColumn {
		c, err := lc.client(link, false)
		if err != nil {
			return nil, err
		}
		addr := lc.cfg.Meta[0].Addr
		if len(c.links) > 0 {
			addr = c.links[0].Addr()
		}
		return &microTarget{linkedClient: c, metaAddr: addr}, nil
	}
	// In write-back mode: the seed's mixed column has the local server
	// complete metadata writes and send them upstream later. Data is not
	// what micro measures: the stores stay on loopback.
	c, err := lc.edgeClient(ctx, *link, true, false, nil)
	if err != nil {
		return nil, err
	}
	return &microTarget{linkedClient: c, metaAddr: c.edge.Addrs()[0]}, nil
}

// microFiles creates n files under dir for the first-access row.
func microFiles(ctx context.Context, c *client.Client, dir core.Ino, n int) ([]client.Ref, error) {
	refs := make([]client.Ref, n)
	for i := range refs {
		f, err := c.CreateAt(ctx, dir, fmt.Sprintf("miss%d", i), os.O_RDWR|os.O_EXCL, 0o644)
		if err != nil {
			return nil, err
		}
		refs[i] = f.Ref()
		if err := f.Close(); err != nil {
			return nil, err
		}
	}
	return refs, nil
}

// missSeries times one getattr of each of refs, none read before.
func missSeries(ctx context.Context, c *client.Client, refs []client.Ref) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, len(refs))
	for _, ref := range refs {
		start := time.Now()
		if _, err := c.GetAttr(ctx, ref); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

// acquireReleaseSeries times n+1 pairs of a lease acquire on ino (a call)
// and its release (a one-way message, timed until it is handed to the
// connection), on a connection of its own to addr, under a session of its
// own. The first pair's acquire is returned apart (first), and its release
// not at all.
func acquireReleaseSeries(ctx context.Context, addr string, ino core.Ino, mode weftpb.LeaseMode, n int) (first time.Duration, get, end []time.Duration, err error) {
	p := rpc.NewPeer(addr, rpc.DialOptions{})
	defer p.Close()
	var b [8]byte
	_, _ = rand.Read(b[:])
	session := binary.LittleEndian.Uint64(b[:]) | 1
	defer func() {
		var reply weftpb.Empty
		_ = p.Call(ctx, weftpb.MethodEndLockSession, &weftpb.EndLockSessionRequest{Session: session}, &reply)
	}()
	for i := range n + 1 {
		start := time.Now()
		var reply weftpb.LeaseAcquireReply
		if err := p.Call(ctx, weftpb.MethodLeaseAcquire, &weftpb.LeaseAcquireRequest{
			Session: session, Mode: mode, Keys: []uint64{uint64(ino)}}, &reply); err != nil {
			return 0, nil, nil, err
		}
		took := time.Since(start)
		if len(reply.Granted) == 0 {
			return 0, nil, nil, fmt.Errorf("lease on %d not granted", ino)
		}
		start = time.Now()
		if err := p.Send(ctx, weftpb.MethodLeaseRelease, &weftpb.LeaseReleaseRequest{
			Session: session, Keys: reply.Granted, Seqs: []uint64{reply.Seq}}); err != nil {
			return 0, nil, nil, err
		}
		if i == 0 {
			first = took
			continue
		}
		get = append(get, took)
		end = append(end, time.Since(start))
	}
	return first, get, end, nil
}

// microLeaseRows runs one series of the first-access getattr and of the
// lease rows for column, adding their mean and p99 to res.
func microLeaseRows(ctx context.Context, c *microTarget, ref client.Ref, missRefs []client.Ref, column string, res map[string]*Result) error {
	add := func(op string, lat []time.Duration) {
		mean, p99 := meanP99(lat)
		res[op+column+" mean"].Samples = append(res[op+column+" mean"].Samples, mean)
		res[op+column+" p99"].Samples = append(res[op+column+" p99"].Samples, p99)
	}
	lat, err := missSeries(ctx, c.Client, missRefs)
	if err != nil {
		return fmt.Errorf("%s over %s: %w", opGetRnodeMiss, column, err)
	}
	add(opGetRnodeMiss, lat)
	for _, mode := range []weftpb.LeaseMode{weftpb.LeaseMode_LEASE_READ, weftpb.LeaseMode_LEASE_WRITE} {
		first, get, end, err := acquireReleaseSeries(ctx, c.metaAddr, ref.Ino, mode, len(missRefs))
		if err != nil {
			return fmt.Errorf("%v lease over %s: %w", mode, column, err)
		}
		if mode == weftpb.LeaseMode_LEASE_READ {
			add(opGetReadFirst, []time.Duration{first})
			add(opGetRead, get)
			add(opEndRead, end)
		} else {
			add(opGetWriteFirst, []time.Duration{first})
			add(opGetWrite, get)
			add(opEndWrite, end)
		}
	}
	return nil
}
