package client

import (
	"context"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/rpc"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// openInode is this client's state of a file with open handles: every handle
// of one file shares it, so they agree on size and see each other's writes.
//
// Writes are buffered per chunk as one contiguous dirty range; a range is
// uploaded when its chunk is full, when a write does not touch it, when the
// buffer limit is reached, or on flush. Uploads of one chunk are chained, so
// a later range never lands before an earlier one. Reads first push out the
// dirty ranges they overlap, so a handle reads its own writes.
type openInode struct {
	c   *Client
	ino core.Ino
	// flushTurn lets one flush at a time sync and commit (flush.go), so
	// an older size never lands after a newer one. It is not a lock held
	// across the calls: a waiter gives up when its context ends.
	flushTurn chan struct{}
	// written is what readers check a missing chunk against: a snapshot
	// of mu.extents (publishExtentsLocked); nil when nothing is known.
	written atomic.Pointer[writtenView]
	// caps holds the file's capabilities (capability.go); a lock of its
	// own, taken by store calls made while mu is held.
	caps struct {
		sync.Mutex
		held fileCaps
	}

	mu struct {
		sync.Mutex
		ref      Ref
		creds    core.Creds // identity that commits (the first opener's)
		mode     uint32     // type and permission bits, as last seen from the server
		refs     int
		size     uint64
		mtime    time.Time
		inline   bool
		data     []byte // the whole content while inline
		modified bool   // size, mtime or content not yet committed
		gen      uint64 // counts changes, so a commit knows whether it saw the last
		dirty    map[uint64]*dirtyRange
		buffered int64                    // bytes dirty or uploading
		inflight map[uint64]chan struct{} // newest upload per chunk, closed when done
		// err is the first failed upload or sync. It is sticky: every later
		// write, flush, sync and close reports it, and nothing is committed
		// after it (the file keeps its last committed state).
		err     error
		written map[int]bool      // stores written since the last sync
		cache   map[uint64]*fetch // read-ahead, by chunk
		drained sync.Cond         // broadcast when an upload ends
		// extents are the byte ranges of the file known written (the
		// server's view at open, and this client's uploads): a chunk in
		// them that no store holds is lost, not a hole (core.Extents).
		// untracked: the server keeps no ranges for this file.
		extents   core.Extents
		untracked bool
		uploaded  core.Extents // ranges uploaded since the last commit, for the next one
		overflow  bool         // more runs written than a record keeps: the next commit says so
		freed     bool         // no link left: nothing to commit; chunks go at the last release (orphan.go)
		stale     bool         // another client may have changed the file: the next read asks (refresh.go)
		// lease is the read lease the state was last read under (its
		// open, a refresh), if leased: once it is no longer trusted, a
		// change may land with no recall, and the state is stale too
		// (staleLocked).
		lease  Lease
		leased bool
		// cacheVer is the file's version as the server last said (open,
		// refresh), taken at change count cacheVerGen: what the chunk
		// cache is used under (chunkcache.go).
		cacheVer    cacheVersion
		cacheVerGen uint64
		cacheVerOK  bool
	}
}

type dirtyRange struct {
	off    int64 // within the chunk
	buf    []byte
	pooled bool // buf came from rpc.GetBuffer and goes back after its upload
}

func (d *dirtyRange) end() int64 { return d.off + int64(len(d.buf)) }

// release gives a pooled buffer back. d must be out of every map first: no
// one may touch its bytes afterwards.
func (d *dirtyRange) release() {
	if d.pooled {
		rpc.PutBuffer(d.buf)
	}
	d.buf, d.pooled = nil, false
}

// acquireOpen returns the shared state of the file an open reply describes,
// creating it on first open. A file already open here keeps its unflushed
// writes; if it has none, it takes the server's newer view (close-to-open).
func (c *Client) acquireOpen(ref Ref, r *pb.OpenReply, creds core.Creds) *openInode {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.mu.open[ref.Ino]
	if n == nil {
		n = &openInode{c: c, ino: ref.Ino, flushTurn: make(chan struct{}, 1)}
		n.mu.drained.L = &n.mu.Mutex
		n.mu.dirty = make(map[uint64]*dirtyRange)
		n.mu.inflight = make(map[uint64]chan struct{})
		n.mu.written = make(map[int]bool)
		n.mu.cache = make(map[uint64]*fetch)
		c.mu.open[ref.Ino] = n
	}
	n.setCapability(r.Capability)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.refs == 0 {
		n.mu.creds = creds
	}
	n.mu.refs++
	n.mu.ref = ref
	n.mu.mode = r.Attr.GetMode()
	if !n.mu.modified && n.mu.buffered == 0 {
		n.mu.size = r.Attr.GetSize()
		n.mu.mtime = time.Unix(0, r.Attr.GetMtimeNs())
		n.mu.inline = r.Attr.GetInline()
		n.mu.data = append([]byte(nil), r.InlineData...)
		n.takeExtentsLocked(r.Attr)
		n.takeVersionLocked(r.Attr)
		n.dropCacheLocked()
	}
	return n
}

// takeExtentsLocked takes the server's written ranges of the file, when
// this client has no write of its own pending.
func (n *openInode) takeExtentsLocked(a *pb.Attr) {
	n.mu.extents = slices.Clone(core.Extents(a.GetExtents()))
	n.mu.untracked = a.GetExtentsUntracked()
	n.publishExtentsLocked()
}

// trimExtentsLocked forgets the written ranges at and past size (a
// truncate).
func (n *openInode) trimExtentsLocked(size uint64) {
	n.mu.extents = n.mu.extents.Trim(size)
	n.mu.uploaded = n.mu.uploaded.Trim(size)
	if size == 0 {
		n.mu.untracked = false // the server starts the file over; overflow stays for the commit to say
	}
	n.publishExtentsLocked()
}

// addExtentsLocked records that chunks idxs were uploaded. Past
// core.MaxExtents separate runs the file is untracked, as its record will
// be, and this client stops keeping ranges for it.
func (n *openInode) addExtentsLocked(idxs []uint64) {
	if n.mu.overflow {
		return
	}
	for _, idx := range idxs {
		start, end := core.ChunkExtent(idx, n.c.cfg.ChunkSize)
		n.mu.extents = n.mu.extents.Add(start, end)
		n.mu.uploaded = n.mu.uploaded.Add(start, end)
	}
	if n.mu.extents.Len() > core.MaxExtents || n.mu.uploaded.Len() > core.MaxExtents {
		n.mu.overflow, n.mu.untracked = true, true
		n.mu.extents, n.mu.uploaded = nil, nil
	}
	n.publishExtentsLocked()
}

// publishExtentsLocked makes n.mu.extents what readers of the file see
// (n.written): readers run under no lock of the file, and some under its
// stores' calls made while n.mu is held.
func (n *openInode) publishExtentsLocked() {
	if n.mu.untracked || len(n.mu.extents) == 0 {
		n.written.Store(nil)
		return
	}
	n.written.Store(&writtenView{ext: slices.Clone(n.mu.extents), chunkSize: n.c.cfg.ChunkSize})
}

// writtenView is a snapshot of a file's written ranges.
type writtenView struct {
	ext       core.Extents
	chunkSize int64
}

// chunkWritten reports whether chunk index of ino is known written, so that
// no store holding it is a loss (EIO), not a hole. A file not open here, or
// untracked, has nothing known.
func (c *Client) chunkWritten(ino core.Ino, index uint64) bool {
	c.mu.Lock()
	n := c.mu.open[ino]
	c.mu.Unlock()
	if n == nil {
		return false
	}
	v := n.written.Load()
	return v != nil && v.ext.Overlaps(core.ChunkExtent(index, v.chunkSize))
}

// lookupOpen returns the open state of ino with a reference taken, or nil.
func (c *Client) lookupOpen(ino core.Ino) *openInode {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.mu.open[ino]
	if n != nil {
		n.mu.Lock()
		n.mu.refs++
		n.mu.Unlock()
	}
	return n
}

// releaseOpen drops a reference; the last one forgets the state.
func (c *Client) releaseOpen(n *openInode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.refs--
	if n.mu.refs == 0 && c.mu.open[n.ino] == n {
		delete(c.mu.open, n.ino)
		if n.mu.freed {
			c.releaseReclaim(n.ino)
		}
	}
}

// overlayOpen replaces size and mtime with this client's uncommitted ones.
func (c *Client) overlayOpen(a core.Attr) core.Attr {
	c.mu.Lock()
	n := c.mu.open[a.Ino]
	c.mu.Unlock()
	if n == nil {
		return a
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.modified {
		a.Size = n.mu.size
		a.Mtime = n.mu.mtime
	}
	return a
}

// write buffers p at off.
func (n *openInode) write(ctx context.Context, p []byte, off int64) error {
	_, err := n.writeBuffer(ctx, p, off, false)
	return err
}

// atEnd as a write offset means the end of the file as it is when the write
// takes the lock (O_APPEND).
const atEnd = -1

// writeAppend writes p at the end of the file, choosing the offset under the
// same lock as the write, so appenders in this client never overwrite each
// other. It returns where p went.
func (n *openInode) writeAppend(ctx context.Context, p []byte) (int64, error) {
	return n.writeBuffer(ctx, p, atEnd, false)
}

// writeOwned is write for a buffer from rpc.GetBuffer that the caller hands
// over: when it lies within one chunk that has nothing buffered, it becomes
// that chunk's dirty range as it is (no copy) and goes back to the pool
// after its upload; otherwise it is copied and given back at once. Either
// way the caller must not touch buf afterwards.
func (n *openInode) writeOwned(ctx context.Context, buf []byte, off int64) error {
	_, err := n.writeBuffer(ctx, buf, off, true)
	return err
}

// writeBuffer writes p at off (atEnd: the end of the file) and returns the
// offset it wrote at.
func (n *openInode) writeBuffer(ctx context.Context, p []byte, off int64, owned bool) (int64, error) {
	if owned {
		// Unless adopted below, p goes back to the pool when we are done.
		defer func() {
			if p != nil {
				rpc.PutBuffer(p)
			}
		}()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if off == atEnd {
		off = int64(n.mu.size)
	}
	if len(p) == 0 {
		return off, nil // POSIX: a zero-length write changes nothing
	}
	if err := n.mu.err; err != nil {
		return off, err
	}
	end := off + int64(len(p))
	if end < off || uint64(end) > maxFileSize {
		return off, errs.New(errs.TooBig, "write", "offset %d + %d bytes is past the largest file", off, len(p))
	}
	n.wroteLocked(end)
	if n.mu.inline {
		if end <= int64(n.c.cfg.InlineLimit) {
			if int64(len(n.mu.data)) < end {
				n.mu.data = append(n.mu.data, make([]byte, end-int64(len(n.mu.data)))...)
			}
			copy(n.mu.data[off:], p)
			return off, nil
		}
		n.uninlineLocked()
	}
	spans := core.Spans(off, int64(len(p)), n.c.cfg.ChunkSize)
	if s := spans[0]; owned && len(spans) == 1 && n.mu.dirty[s.Index] == nil {
		n.adoptLocked(s.Index, s.Offset, p)
		p = nil
	} else {
		for _, s := range spans {
			n.bufferLocked(s.Index, s.Offset, p[s.FileOf-off:s.FileOf-off+s.Len])
		}
	}
	return off, n.throttleLocked(ctx)
}

// wroteLocked notes a write that ends at end: the file is modified now and
// at least that long.
func (n *openInode) wroteLocked(end int64) {
	n.mu.modified = true
	n.mu.gen++
	n.mu.mtime = time.Now()
	n.mu.size = max(n.mu.size, uint64(end))
}

// throttleLocked waits while more than WriteBuffer bytes are buffered or
// uploading, and returns the first upload error. Each upload is bounded by
// StoreTimeout, so the wait is too; it also ends with ctx.
func (n *openInode) throttleLocked(ctx context.Context) error {
	if n.mu.buffered <= n.c.cfg.WriteBuffer || n.mu.err != nil {
		return n.mu.err
	}
	stop := n.wakeOnDone(ctx)
	defer stop()
	for n.mu.buffered > n.c.cfg.WriteBuffer && n.mu.err == nil {
		if ctx.Err() != nil {
			return ctxError("write", ctx)
		}
		if n.c.ec == nil || len(n.mu.inflight) == 0 {
			// Under erasure coding, uploads in flight free room soon
			// enough: pushing out the chunks still filling would cost
			// each a read of its stripe (stripefull.go).
			n.uploadAllLocked()
		}
		n.mu.drained.Wait()
	}
	return n.mu.err
}

// adoptLocked makes buf, a pooled buffer, the dirty range at off of chunk
// idx, which has none.
func (n *openInode) adoptLocked(idx uint64, off int64, buf []byte) {
	n.evictLocked(idx)
	d := &dirtyRange{off: off, buf: buf, pooled: true}
	n.mu.dirty[idx] = d
	n.mu.buffered += int64(len(buf))
	n.uploadIfFullLocked(idx, d)
}

// bufferLocked merges piece at off of chunk idx into its dirty range, or
// uploads that range and starts a new one when the two do not touch.
// Ranges live in pooled buffers that grow by whole size classes, so a stream
// of writes into one chunk copies each byte about once more, however small
// the writes.
func (n *openInode) bufferLocked(idx uint64, off int64, piece []byte) {
	n.evictLocked(idx)
	end := off + int64(len(piece))
	d := n.mu.dirty[idx]
	if d != nil && off <= d.end() && end >= d.off {
		// piece overlaps or touches d: every byte of the grown range is
		// either d's or piece's, so no stale byte of a reused buffer shows.
		lo, hi := min(d.off, off), max(d.end(), end)
		if lo == d.off && hi-lo <= int64(cap(d.buf)) {
			n.mu.buffered += hi - d.end()
			d.buf = d.buf[:hi-lo]
		} else {
			// Grow fourfold at least: streams reach the chunk size in a
			// few steps, small appenders keep small buffers.
			c := min(max(hi-lo, 4*int64(cap(d.buf))), max(hi-lo, n.c.cfg.ChunkSize))
			buf := rpc.GetBuffer(int(c))[:hi-lo]
			copy(buf[d.off-lo:], d.buf)
			n.mu.buffered += (hi - lo) - int64(len(d.buf))
			d.release()
			d.buf, d.off, d.pooled = buf, lo, true
		}
		copy(d.buf[off-d.off:], piece)
	} else {
		if d != nil {
			n.startUploadLocked(idx, d)
		}
		buf := rpc.GetBuffer(len(piece))
		copy(buf, piece)
		d = &dirtyRange{off: off, buf: buf, pooled: true}
		n.mu.dirty[idx] = d
		n.mu.buffered += int64(len(piece))
	}
	n.uploadIfFullLocked(idx, d)
}

// uploadIfFullLocked starts the upload of d, chunk idx's dirty range, if it
// covers the whole chunk: no later write can add to it.
func (n *openInode) uploadIfFullLocked(idx uint64, d *dirtyRange) {
	if d.off == 0 && int64(len(d.buf)) == n.c.cfg.ChunkSize {
		n.uploadFullLocked(idx, d) // stripefull.go
	}
}

// uninlineLocked turns an inline file into a chunked one: its content
// becomes the first dirty range of chunk 0, uploaded before the commit that
// tells the meta server the file is chunked.
func (n *openInode) uninlineLocked() {
	n.mu.inline = false
	n.mu.modified = true
	n.mu.gen++
	if len(n.mu.data) > 0 {
		n.mu.dirty[0] = &dirtyRange{buf: n.mu.data}
		n.mu.buffered += int64(len(n.mu.data))
	}
	n.mu.data = nil
}

// startUploadLocked sends d to chunk idx's replicas in the background,
// after any earlier upload of the same chunk.
func (n *openInode) startUploadLocked(idx uint64, d *dirtyRange) {
	if n.mu.dirty[idx] == d {
		delete(n.mu.dirty, idx)
	}
	n.chainUploadLocked(idx, int64(len(d.buf)), func(ctx context.Context) ([]int, error) {
		return n.c.writeChunk(ctx, n.ino, idx, d.off, d.buf, false)
	}, d.release)
}

// uploadFromLocked uploads the local file's bytes [foff, foff+size) into
// chunk idx from its start, as if they had been written there: the store
// reads them from the file itself where it can (writeChunkFrom). The bytes
// count as buffered until the upload ends, so that WriteBuffer bounds the
// uploads in flight as it bounds the buffered ones.
func (n *openInode) uploadFromLocked(ctx context.Context, idx uint64, src *os.File, foff, size int64) error {
	if err := n.mu.err; err != nil {
		return err
	}
	n.wroteLocked(int64(idx)*n.c.cfg.ChunkSize + size)
	if n.mu.inline {
		n.uninlineLocked()
	}
	n.evictLocked(idx)
	if d := n.mu.dirty[idx]; d != nil {
		n.startUploadLocked(idx, d) // what was buffered before lands first
	}
	n.mu.buffered += size
	n.chainUploadLocked(idx, size, func(ctx context.Context) ([]int, error) {
		return n.c.writeChunkFrom(ctx, n.ino, idx, 0, src, foff, size)
	}, nil)
	return n.throttleLocked(ctx)
}

// chainUploadLocked runs upload, which moves size buffered bytes to chunk
// idx's replicas, in the background after any earlier upload of the same
// chunk; release, if set, runs under the lock once it is done.
func (n *openInode) chainUploadLocked(idx uint64, size int64, upload func(context.Context) ([]int, error), release func()) {
	n.chainUploadsLocked([]uint64{idx}, size, upload, release)
}

// chainUploadsLocked is chainUploadLocked for one upload of several chunks
// (a full stripe, stripefull.go): it runs after the earlier uploads of each.
func (n *openInode) chainUploadsLocked(idxs []uint64, size int64, upload func(context.Context) ([]int, error), release func()) {
	var prevs []chan struct{}
	done := make(chan struct{})
	for _, idx := range idxs {
		if prev := n.mu.inflight[idx]; prev != nil {
			prevs = append(prevs, prev)
		}
		n.mu.inflight[idx] = done
	}
	go func() {
		defer close(done)
		for _, prev := range prevs {
			<-prev
		}
		reps, finished, err := n.c.boundedUpload(upload)
		n.mu.Lock()
		defer n.mu.Unlock()
		if err != nil && n.mu.err == nil {
			n.mu.err = uploadError(err)
		}
		for _, s := range reps {
			n.mu.written[s] = true
		}
		if err == nil {
			n.addExtentsLocked(idxs)
		}
		n.mu.buffered -= size
		switch {
		case release == nil:
		case finished == nil:
			release() // the upload is done with the bytes
		default:
			// Given up on, the upload may still read the bytes.
			go func() {
				<-finished
				n.mu.Lock()
				release()
				n.mu.Unlock()
			}()
		}
		for _, idx := range idxs {
			if n.mu.inflight[idx] == done {
				delete(n.mu.inflight, idx)
			}
		}
		n.mu.drained.Broadcast()
	}()
}

// uploadGrace is how long past StoreTimeout an upload is waited for: its
// calls have StoreTimeout as their context's deadline and end by then
// unless the transport fails to honour it.
const uploadGrace = time.Second

// boundedUpload runs upload under the client's own context (the bytes were
// accepted, so no caller's cancel may abort them) bounded by StoreTimeout,
// and waits for it at most uploadGrace longer, so that a write, flush or
// close waiting for uploads is bounded whatever the transport does. If it gave up, it
// returns a Timeout and finished, closed when upload has returned: only
// then may its bytes be reused. Otherwise finished is nil.
func (c *Client) boundedUpload(upload func(context.Context) ([]int, error)) (reps []int, finished chan struct{}, err error) {
	type result struct {
		reps []int
		err  error
	}
	ctx, cancel := context.WithTimeout(c.life, c.cfg.StoreTimeout)
	res := make(chan result, 1)
	finished = make(chan struct{})
	go func() {
		defer close(finished)
		defer cancel()
		r, err := upload(ctx)
		res <- result{r, err}
	}()
	grace := time.NewTimer(c.cfg.StoreTimeout + uploadGrace)
	defer grace.Stop()
	select {
	case r := <-res:
		return r.reps, nil, r.err
	case <-grace.C:
		return nil, finished, errs.New(errs.Timeout, "write back", "no answer from the stores within %v", c.cfg.StoreTimeout)
	}
}

// maxFileSize bounds offsets so that chunk arithmetic never overflows.
const maxFileSize = 1 << 50

// truncate sets the file's size through the meta server, after pushing out
// buffered writes so none lands past the new end afterwards.
func (n *openInode) truncate(ctx context.Context, size uint64, byHandle bool) error {
	if size > maxFileSize {
		return errs.New(errs.TooBig, "truncate", "size %d is past the largest file", size)
	}
	n.mu.Lock()
	if n.mu.inline && size > uint64(n.c.cfg.InlineLimit) {
		n.uninlineLocked()
	}
	n.mu.Unlock()
	if err := n.flush(ctx, false); err != nil {
		return err
	}
	// The size changes under the lock, so that no write buffered meanwhile
	// is lost to it; the setattr call is the one RPC made under it.
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropCacheLocked()
	// The content changes with no write counted (a shrink, zeros past
	// the old end): the chunk cache waits for the server's next version.
	n.mu.cacheVerOK = false
	if n.mu.freed {
		return n.truncateFreedLocked(ctx, size)
	}
	ref := n.mu.ref
	sz := size
	// The size this client knows, unless another client may have changed
	// it since: whether the truncate shrinks the file decides whether its
	// parity needs a guard (stripeguard.go).
	before := n.mu.size
	if n.staleLocked() {
		before = sizeUnknown
	}
	a, err := n.c.setAttrFrom(ctx, ref, SetAttr{Size: &sz}, byHandle, before)
	if err != nil {
		return err
	}
	n.mu.size = a.Size
	n.mu.mtime = a.Mtime
	n.mu.mode = a.Mode
	n.trimExtentsLocked(a.Size)
	if n.mu.inline {
		if uint64(len(n.mu.data)) > size {
			n.mu.data = n.mu.data[:size]
		}
	}
	return nil
}
