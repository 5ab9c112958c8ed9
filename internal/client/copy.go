package client

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/rpc"
)

// WriteFrom and ReadTo are what weft put and weft get run, so they take the
// shortest path through the client. Between a local file and store servers
// on the same machine, the stores copy between the file and their chunks
// themselves (samehost.go). Otherwise WriteFrom reads r straight into pooled
// chunk-sized buffers that become the write-back ranges as they are (one
// user-space copy fewer than Write), and ReadTo writes the read-ahead
// buffers straight to w (one fewer than Read). progress, if set, is told
// each number of bytes copied (from one goroutine at a time).

// WriteFrom creates (or truncates) path with perm and copies r into it, then
// closes it: with SyncOnClose the data is durable when it returns.
func (c *Client) WriteFrom(ctx context.Context, path string, r io.Reader, perm uint32, progress func(int64)) (int64, error) {
	f, err := c.Create(ctx, path, perm)
	if err != nil {
		return 0, err
	}
	n, err := copyIn(ctx, f, r, progress)
	if cerr := f.CloseContext(ctx); err == nil {
		err = cerr
	}
	return n, err
}

// copyIn writes all of r into the new file f from offset 0, one chunk per
// buffer so that each buffer is a whole chunk's dirty range.
func copyIn(ctx context.Context, f *File, r io.Reader, progress func(int64)) (int64, error) {
	var off int64
	if src, ok := r.(*os.File); ok {
		var err error
		if off, err = copyInSameHost(ctx, f, src, progress); err != nil {
			return off, err
		}
	}
	unit := int(f.c.cfg.ChunkSize)
	for {
		buf := rpc.GetBuffer(unit)
		k, rerr := io.ReadFull(r, buf)
		if k > 0 {
			if err := f.n.writeOwned(ctx, buf[:k], off); err != nil {
				return off, err
			}
			off += int64(k)
			report(progress, int64(k))
		} else {
			rpc.PutBuffer(buf)
		}
		switch {
		case errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF):
			return off, nil
		case rerr != nil:
			return off, rerr
		}
	}
}

// copyInSameHost uploads src from its offset, chunk by chunk, by the stores'
// same-host paths, up to src's size when it starts and for as long as every
// replica of the next chunk has such a path. It returns how far it got and
// leaves src's offset there, for r.Read to go on with the rest (or what src
// grew by). Files that stay inline are left to the buffered path. If src
// shrinks meanwhile, the stores' reads fail and so does the copy (at close).
func copyInSameHost(ctx context.Context, f *File, src *os.File, progress func(int64)) (int64, error) {
	c := f.c
	if c.cfg.NoSameHost || !usableLocalFile(src, false) {
		return 0, nil
	}
	base, err := src.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, nil
	}
	fi, err := src.Stat()
	if err != nil || fi.Size()-base <= int64(c.cfg.InlineLimit) {
		return 0, nil
	}
	size, cs := fi.Size()-base, c.cfg.ChunkSize
	var off int64
	for off < size {
		idx := uint64(off / cs)
		if !c.sameHostAll(ctx, replicas(f.n.ino, idx, len(c.stores), c.cfg.Replication)) {
			break
		}
		k := min(cs, size-off)
		f.n.mu.Lock()
		err := f.n.uploadFromLocked(ctx, idx, src, base+off, k)
		f.n.mu.Unlock()
		if err != nil {
			return off, err
		}
		off += k
		report(progress, k)
	}
	if _, err := src.Seek(base+off, io.SeekStart); err != nil {
		return off, err
	}
	return off, nil
}

func report(progress func(int64), n int64) {
	if progress != nil {
		progress(n)
	}
}

// ReadTo copies the content of path to w. When the same-host path did the
// copy and failed, how much of w was written is unknown and the count is 0.
func (c *Client) ReadTo(ctx context.Context, path string, w io.Writer, progress func(int64)) (int64, error) {
	f, err := c.Open(ctx, path, os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if dst, ok := w.(*os.File); ok && !c.cfg.NoSameHost && usableLocalFile(dst, true) {
		if n, done, err := f.n.copyOutSameHost(ctx, dst, progress); done {
			return n, err
		}
	}
	return f.n.writeTo(ctx, w, progress)
}

// copyOutSameHost writes the file's content into dst at dst's offset, by the
// stores' same-host paths, a few chunks at a time, and leaves dst's offset
// after it. done is false (and nothing happened) when it does not apply: an
// inline file, a store without a same-host path, a dst without an offset.
func (n *openInode) copyOutSameHost(ctx context.Context, dst *os.File, progress func(int64)) (_ int64, done bool, _ error) {
	c := n.c
	cs := c.cfg.ChunkSize
	n.mu.Lock()
	size := int64(n.mu.size)
	if n.mu.inline || size == 0 {
		n.mu.Unlock()
		return 0, false, nil
	}
	err := n.pushOutLocked(core.Spans(0, size, cs))
	n.mu.Unlock()
	if err != nil {
		return 0, true, err
	}
	if !c.sameHostAll(ctx, allStores(len(c.stores))) {
		return 0, false, nil
	}
	base, err := dst.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, false, nil
	}
	chunks := (size + cs - 1) / cs
	var next atomic.Int64
	var mu sync.Mutex // guards first and progress
	var first error
	var wg sync.WaitGroup
	for range min(int64(max(c.cfg.ReadAhead, streamReadAhead)), chunks) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				mu.Lock()
				stop := first != nil
				mu.Unlock()
				if i >= chunks || stop {
					return
				}
				k := min(cs, size-i*cs)
				err := c.readChunkTo(ctx, n.ino, uint64(i), 0, k, dst, base+i*cs)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if err == nil {
					report(progress, k)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return 0, true, first
	}
	if _, err := dst.Seek(base+size, io.SeekStart); err != nil {
		return 0, true, err
	}
	return size, true, nil
}
