package client

import (
	"context"
	"io"
	"os"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// The same-host path (rpc.DialSameHost, docs/wire.md): when a store server
// runs on this machine, WriteFrom and ReadTo hand it the local file and let
// it copy between that file and the chunk, instead of sending the bytes
// through loopback TCP. It is used per store, found on first use, and left
// for the wire whenever it fails.

// sameHost is the same-host path to one store server.
type sameHost struct {
	addr string

	mu struct {
		sync.Mutex
		idle    []*rpc.SameHostConn
		retryAt time.Time // no path until then: the last dial failed
	}
}

const (
	// sameHostRetry is how long a store without a same-host path (another
	// machine, an older server) is left alone before the next try.
	sameHostRetry = 10 * time.Second
	// maxIdleSameHost bounds the idle connections kept per store.
	maxIdleSameHost = 8
)

// get returns an idle connection or a new one; nil if there is no path.
func (h *sameHost) get(ctx context.Context) *rpc.SameHostConn {
	h.mu.Lock()
	if k := len(h.mu.idle); k > 0 {
		c := h.mu.idle[k-1]
		h.mu.idle = h.mu.idle[:k-1]
		h.mu.Unlock()
		return c
	}
	if time.Now().Before(h.mu.retryAt) {
		h.mu.Unlock()
		return nil
	}
	h.mu.Unlock()
	c, err := rpc.DialSameHost(ctx, h.addr)
	if err != nil {
		h.mu.Lock()
		h.mu.retryAt = time.Now().Add(sameHostRetry)
		h.mu.Unlock()
		return nil
	}
	return c
}

func (h *sameHost) put(c *rpc.SameHostConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.mu.idle) < maxIdleSameHost {
		h.mu.idle = append(h.mu.idle, c)
		return
	}
	c.Close()
}

func (h *sameHost) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.mu.idle {
		c.Close()
	}
	h.mu.idle = nil
}

// available reports whether the store has a same-host path (dialling it if
// none is known yet).
func (h *sameHost) available(ctx context.Context) bool {
	c := h.get(ctx)
	if c == nil {
		return false
	}
	h.put(c)
	return true
}

// errNoPath says a same-host call found no path or lost it; the caller uses
// the wire instead.
var errNoPath = errs.New(errs.Unavailable, "same-host call", "no same-host path")

// call runs req on the store with file f and returns the store's reply. It
// returns errNoPath if there is no path or the connection failed, and the
// store's error otherwise.
func (h *sameHost) call(ctx context.Context, req *pb.LocalIORequest, f *os.File) (*pb.LocalIOReply, error) {
	c := h.get(ctx)
	if c == nil {
		return nil, errNoPath
	}
	raw, err := f.SyscallConn()
	if err != nil {
		h.put(c)
		return nil, errs.Wrap(errs.BadHandle, "same-host call", f.Name(), err)
	}
	var r pb.LocalIOReply
	var cerr error
	if err := raw.Control(func(fd uintptr) { cerr = c.Call(ctx, req, fd, &r) }); err != nil {
		h.put(c)
		return nil, errs.Wrap(errs.BadHandle, "same-host call", f.Name(), err)
	}
	if cerr != nil {
		c.Close()
		if k := errs.KindOf(cerr); k == errs.Timeout || k == errs.Canceled {
			return nil, cerr
		}
		return nil, errNoPath
	}
	h.put(c)
	if r.Error != "" {
		k := errs.Kind(r.ErrorKind)
		if !k.Valid() {
			k = errs.Protocol
		}
		return nil, &errs.Error{Kind: k, Msg: r.Error}
	}
	return &r, nil
}

// usableLocalFile reports whether the store may do I/O on f for this
// client (rpc.CheckSameHostFile, which the store checks too); dst says f is
// the destination.
func usableLocalFile(f *os.File, dst bool) bool {
	raw, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var cerr error
	if err := raw.Control(func(fd uintptr) { cerr = rpc.CheckSameHostFile("same-host call", int(fd), !dst) }); err != nil {
		return false
	}
	return cerr == nil
}

// sameHostAll reports whether every store in list has a same-host path.
func (c *Client) sameHostAll(ctx context.Context, list []int) bool {
	if c.cfg.NoSameHost || c.ec != nil { // erasure-coded units go through readChunk and writeChunk
		return false
	}
	for _, s := range list {
		if !c.same[s].available(ctx) {
			return false
		}
	}
	return true
}

// writeChunkFrom writes the local file's bytes [foff, foff+n) at off within
// chunk (ino, index) on every replica, each by its same-host path or, where
// there is none, over the wire.
func (c *Client) writeChunkFrom(ctx context.Context, ino core.Ino, index uint64, off int64, src *os.File, foff, n int64) ([]int, error) {
	reps := replicas(ino, index, len(c.stores), c.cfg.Replication)
	req := &pb.LocalIORequest{
		Write: true, Chunk: &pb.ChunkID{Ino: uint64(ino), Index: index}, Offset: off,
		Length: n, FileOffset: foff, WriteBehind: c.cfg.SyncOnClose,
	}
	var buf []byte // read once for the replicas that take it over the wire
	var bufOnce sync.Once
	var bufErr error
	defer func() {
		if buf != nil {
			rpc.PutBuffer(buf)
		}
	}()
	err := c.onStores(reps, func(s int) error {
		err := c.withCapability(ctx, ino, auth.Write, func(tok []byte) error {
			sreq := &pb.LocalIORequest{Write: true, Chunk: req.Chunk, Offset: off, Length: n, FileOffset: foff,
				WriteBehind: req.WriteBehind, Capability: tok}
			_, err := c.same[s].call(ctx, sreq, src)
			return err
		})
		if err != errNoPath {
			return err
		}
		bufOnce.Do(func() {
			buf = rpc.GetBuffer(int(n))
			if _, err := src.ReadAt(buf, foff); err != nil {
				bufErr = errs.Wrap(errs.IO, "write back", src.Name(), err)
			}
		})
		if bufErr != nil {
			return bufErr
		}
		return c.withCapability(ctx, ino, auth.Write, func(tok []byte) error {
			wreq := &pb.WriteChunkRequest{Chunk: req.Chunk, Offset: off, WriteBehind: req.WriteBehind, Capability: tok}
			_, err := c.stores[s].CallData(ctx, pb.MethodWriteChunk, wreq, buf, &pb.WriteChunkReply{})
			return err
		})
	})
	return reps, err
}

// readChunkTo writes n bytes at off of chunk (ino, index) into the local
// file at foff, by the replicas' same-host paths where there are, with the
// rules of readChunk (replicas.go). Where the chunk ends short (or is a
// hole) the file gets zeros. A same-host replica slower than ReplicaTimeout
// is left for the next one: the store writes into the file itself, so two
// cannot be asked at once. When some replicas have no same-host path and
// none of the others had the chunk, the wire read (readChunk) asks every
// replica, hedged.
func (c *Client) readChunkTo(ctx context.Context, ino core.Ino, index uint64, off, n int64, dst *os.File, foff int64) error {
	req := &pb.LocalIORequest{Chunk: &pb.ChunkID{Ino: uint64(ino), Index: index}, Offset: off, Length: n, FileOffset: foff}
	reps := c.suspects.order(replicas(ino, index, len(c.stores), c.cfg.Replication))
	notFound, noPath := 0, 0
	var failed error
	for i, s := range reps {
		timeout := c.cfg.ReplicaTimeout
		if i == len(reps)-1 {
			timeout = c.cfg.StoreTimeout
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		var r *pb.LocalIOReply
		err := c.withCapability(actx, ino, auth.Read, func(tok []byte) (err error) {
			req.Capability = tok // one replica at a time
			r, err = c.same[s].call(actx, req, dst)
			return err
		})
		cancel()
		if err == errNoPath {
			noPath++
			continue
		}
		var k int64
		var found bool
		if err == nil {
			k, found, err = checkReplica(s, r.Length, r.Found, r.ChunkSize, off, n)
		}
		switch {
		case err == nil && found:
			c.suspects.clear(s)
			_, err = writeZeroPadded(io.NewOffsetWriter(dst, foff+k), nil, n-k)
			return err
		case err == nil:
			notFound++
			continue
		case ctx.Err() != nil:
			return ctxError("read chunk", ctx)
		case !failoverable(err):
			return err
		}
		c.log.Warn("chunk read failed over", "ino", ino, "index", index, "store", s, "err", err)
		c.suspects.mark(s)
		if failed == nil {
			failed = err
		}
	}
	switch {
	case notFound == len(reps):
		if err := c.lostIfWritten(ino, index); err != nil {
			return err
		}
		_, err := writeZeroPadded(io.NewOffsetWriter(dst, foff), nil, n) // a hole
		return err
	case noPath == 0:
		// Every replica answered here: the wire would hear the same.
		return errs.Wrap(errs.IO, "read chunk", chunkName(ino, index), failed)
	}
	data, err := c.readChunk(ctx, ino, index, off, n)
	if err != nil {
		return err
	}
	defer rpc.PutBuffer(data)
	_, err = writeZeroPadded(io.NewOffsetWriter(dst, foff), data, n)
	return err
}
