package client

import (
	"context"
	"io"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/rpc"
)

// fetch is one whole-chunk read of the read-ahead cache. Its data is a
// pooled buffer (rpc.GetBuffer) shared by the cache, the goroutine filling
// it and the readers copying out of it; refs counts them, under
// openInode.mu, and the last one gives the buffer back. A fetch dropped from
// the cache without unref (a plain clear of the map) is simply left to the
// garbage collector: never reused while someone may still read it.
type fetch struct {
	done chan struct{}
	data []byte
	err  error
	refs int
	// shared says data is the chunk cache's (chunkcache.go), not a pooled
	// buffer: it is never given back, nor written.
	shared bool
}

// streamReadAhead is how many chunks ahead ReadTo fetches, at least. Each
// fetch is one ReadChunk in flight, so this is also the pipeline depth
// between the store's disk reads, the wire and the local writes.
const streamReadAhead = 4

// read fills p from off; sequential says the handle is streaming, so whole
// chunks are fetched and the next ones prefetched. unleased says what it
// read (the bytes, or the end of file) came from a view of the file that no
// lease covered: the open state was still stale after its refresh (the
// server refused the lease, so a change may land without a recall).
func (n *openInode) read(ctx context.Context, p []byte, off int64, sequential bool) (k int, unleased bool, err error) {
	n.refreshIfStale(ctx)
	n.mu.Lock()
	unleased = n.staleLocked()
	k, err = n.readLocked(ctx, p, off, sequential)
	return k, unleased, err
}

// readLocked is read after the refresh, with n.mu held; it unlocks it.
func (n *openInode) readLocked(ctx context.Context, p []byte, off int64, sequential bool) (int, error) {
	size := int64(n.mu.size)
	if off >= size {
		n.mu.Unlock()
		return 0, io.EOF
	}
	want := min(int64(len(p)), size-off)
	p = p[:want]
	if n.mu.inline {
		k := 0
		if off < int64(len(n.mu.data)) {
			k = copy(p, n.mu.data[off:])
		}
		clear(p[k:])
		n.mu.Unlock()
		return int(want), nil
	}
	spans := core.Spans(off, want, n.c.cfg.ChunkSize)
	err := n.pushOutLocked(spans)
	n.mu.Unlock()
	if err != nil {
		return 0, err
	}
	for _, s := range spans {
		dst := p[s.FileOf-off : s.FileOf-off+s.Len]
		var k int
		if sequential {
			f, data, err := n.readCached(ctx, s, n.c.cfg.ReadAhead)
			if err != nil {
				return 0, err
			}
			k = copy(dst, data)
			n.unref(f)
		} else {
			var err error
			if k, err = n.readSpan(ctx, s, dst); err != nil {
				return 0, err
			}
		}
		clear(dst[k:]) // a hole or a chunk shorter than the file reads as zeros
	}
	return int(want), nil
}

// readSpan reads span s into dst, from the chunk cache if it holds the
// chunk, else from its stores (just the span: a random reader fetches no
// whole chunks). It returns the bytes there were.
func (n *openInode) readSpan(ctx context.Context, s core.ChunkSpan, dst []byte) (int, error) {
	n.mu.Lock()
	cached, ok := n.cachedChunkLocked(s.Index)
	n.mu.Unlock()
	if ok {
		if s.Offset >= int64(len(cached)) {
			return 0, nil
		}
		return copy(dst, cached[s.Offset:min(int64(len(cached)), s.Offset+s.Len)]), nil
	}
	data, err := n.c.readChunk(ctx, n.ino, s.Index, s.Offset, s.Len)
	if err != nil {
		return 0, err
	}
	k := copy(dst, data)
	rpc.PutBuffer(data)
	return k, nil
}

// pushOutLocked uploads the dirty ranges of the chunks that spans touch and
// waits for their uploads, so that a read sees this client's own writes. It
// unlocks n.mu while it waits, and returns the first upload error.
func (n *openInode) pushOutLocked(spans []core.ChunkSpan) error {
	var wait []chan struct{}
	for _, s := range spans {
		if d := n.mu.dirty[s.Index]; d != nil {
			n.startUploadLocked(s.Index, d)
		}
		if ch := n.mu.inflight[s.Index]; ch != nil {
			wait = append(wait, ch)
		}
	}
	if len(wait) > 0 {
		n.mu.Unlock()
		for _, ch := range wait {
			<-ch
		}
		n.mu.Lock()
	}
	return n.mu.err
}

// writeTo writes the file's content to w, chunk by chunk, straight from the
// read-ahead buffers (no copy on the way), with at least streamReadAhead
// chunks in flight. It returns the bytes written.
func (n *openInode) writeTo(ctx context.Context, w io.Writer, progress func(int64)) (int64, error) {
	cs := n.c.cfg.ChunkSize
	depth := max(n.c.cfg.ReadAhead, streamReadAhead)
	var off int64
	for {
		n.mu.Lock()
		size := int64(n.mu.size)
		if off >= size {
			n.mu.Unlock()
			return off, nil
		}
		if n.mu.inline {
			data := n.mu.data[min(off, int64(len(n.mu.data))):min(size, int64(len(n.mu.data)))]
			data = append([]byte(nil), data...) // w may be slow: not under the lock
			n.mu.Unlock()
			k, err := writeZeroPadded(w, data, size-off)
			report(progress, k)
			return off + k, err
		}
		s := core.ChunkSpan{Index: uint64(off / cs), Offset: off % cs, FileOf: off}
		s.Len = min(cs-s.Offset, size-off)
		err := n.pushOutLocked([]core.ChunkSpan{s})
		n.mu.Unlock()
		if err != nil {
			return off, err
		}
		f, data, err := n.readCached(ctx, s, depth)
		if err != nil {
			return off, err
		}
		k, err := writeZeroPadded(w, data, s.Len)
		n.unref(f)
		off += k
		report(progress, k)
		if err != nil {
			return off, err
		}
	}
}

// zeros is what holes are written from; never written itself.
var zeros [64 << 10]byte

// localWriteUnit bounds one Write of writeTo. Into a local file, a write of
// 2 MiB or more gets huge page-cache folios, which cost about five times the
// CPU of smaller ones on the machines measured (see the store's writeUnit);
// cp writes 64 KiB at a time.
const localWriteUnit = 1 << 20

// writeZeroPadded writes data and then zeros up to n bytes in all (a hole,
// or a chunk shorter than the file, reads as zeros).
func writeZeroPadded(w io.Writer, data []byte, n int64) (int64, error) {
	data = data[:min(int64(len(data)), n)]
	var total int64
	var err error
	for len(data) > 0 && err == nil {
		var k int
		k, err = w.Write(data[:min(len(data), localWriteUnit)])
		total += int64(k)
		data = data[k:]
	}
	for err == nil && total < n {
		var k int
		k, err = w.Write(zeros[:min(n-total, int64(len(zeros)))])
		total += int64(k)
	}
	return total, err
}

// readCached returns span s from a whole-chunk fetch, and starts fetching
// the next depth chunks so a streaming reader finds them ready. The data
// belongs to the returned fetch: the caller holds a reference on it and
// must unref it once done with the data.
func (n *openInode) readCached(ctx context.Context, s core.ChunkSpan, depth int) (*fetch, []byte, error) {
	n.mu.Lock()
	if n.mu.dirty[s.Index] != nil || n.mu.inflight[s.Index] != nil {
		// A write raced this read since it pushed the chunk out: a fetch
		// now would be cached without the write's bytes and served so
		// after they land. Read past the cache.
		n.mu.Unlock()
		data, err := n.c.readChunk(ctx, n.ino, s.Index, s.Offset, s.Len)
		if err != nil {
			return nil, nil, err
		}
		return &fetch{data: data, refs: 1}, data, nil
	}
	f := n.startFetchLocked(ctx, s.Index)
	f.refs++
	last := core.ChunkCount(n.mu.size, n.c.cfg.ChunkSize)
	for i := s.Index + 1; i <= s.Index+uint64(depth) && i < last; i++ {
		// A chunk with writes not yet on its stores would be cached
		// without them, and served so after they land.
		if n.mu.dirty[i] == nil && n.mu.inflight[i] == nil {
			n.startFetchLocked(ctx, i)
		}
	}
	// Keep the window small: drop chunks behind the reader.
	for i := range n.mu.cache {
		if i < s.Index {
			n.evictLocked(i)
		}
	}
	n.mu.Unlock()
	select {
	case <-f.done:
	case <-ctx.Done():
		n.unref(f)
		return nil, nil, ctxError("read", ctx)
	}
	if f.err != nil {
		n.mu.Lock()
		if n.mu.cache[s.Index] == f {
			n.evictLocked(s.Index)
		}
		n.mu.Unlock()
		err := f.err
		n.unref(f)
		return nil, nil, err
	}
	if s.Offset >= int64(len(f.data)) {
		return f, nil, nil
	}
	return f, f.data[s.Offset:min(int64(len(f.data)), s.Offset+s.Len)], nil
}

// startFetchLocked returns the fetch of chunk idx, starting it if needed.
// Fetches run detached from any caller: a reader that gives up does not
// spoil the prefetched chunk for the next. They keep the caller's identity,
// which a renewed capability is asked for with.
func (n *openInode) startFetchLocked(caller context.Context, idx uint64) *fetch {
	if f := n.mu.cache[idx]; f != nil {
		return f
	}
	if data, ok := n.cachedChunkLocked(idx); ok {
		f := &fetch{done: make(chan struct{}), data: data, refs: 1, shared: true} // the read-ahead cache's
		close(f.done)
		n.mu.cache[idx] = f
		return f
	}
	version, keep := n.cacheVersionLocked()
	gen := n.mu.gen
	f := &fetch{done: make(chan struct{}), refs: 2} // the read-ahead cache's and the goroutine's
	n.mu.cache[idx] = f
	go func() {
		// readReplicas bounds each replica by StoreTimeout; this bounds
		// the fetch as a whole.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(caller), n.c.cfg.StoreTimeout+n.c.cfg.ReplicaTimeout)
		f.data, f.err = n.c.readChunk(ctx, n.ino, idx, 0, n.c.cfg.ChunkSize)
		cancel()
		if keep && f.err == nil {
			n.mu.Lock()
			n.keepChunkLocked(idx, version, gen, f.data)
			n.mu.Unlock()
		}
		close(f.done)
		n.unref(f)
	}()
	return f
}

// evictLocked drops chunk idx from the read-ahead cache.
func (n *openInode) evictLocked(idx uint64) {
	if f := n.mu.cache[idx]; f != nil {
		delete(n.mu.cache, idx)
		n.unrefLocked(f)
	}
}

// dropCacheLocked empties the read-ahead cache.
func (n *openInode) dropCacheLocked() {
	for idx := range n.mu.cache {
		n.evictLocked(idx)
	}
}

func (n *openInode) unref(f *fetch) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.unrefLocked(f)
}

// unrefLocked drops a reference to f; the last one gives its buffer back.
func (n *openInode) unrefLocked(f *fetch) {
	f.refs--
	if f.refs == 0 {
		if !f.shared {
			rpc.PutBuffer(f.data)
		}
		f.data = nil
	}
}
