package client

import (
	"context"
	"io"
	"sync"
	"syscall"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	pb "github.com/weftfs/weft/proto/weftpb"
)

// Open flags, Linux values (as os.O_*).
const (
	oRDONLY    = syscall.O_RDONLY
	oWRONLY    = syscall.O_WRONLY
	oRDWR      = syscall.O_RDWR
	oACCMODE   = syscall.O_ACCMODE
	oCREAT     = syscall.O_CREAT
	oEXCL      = syscall.O_EXCL
	oTRUNC     = syscall.O_TRUNC
	oAPPEND    = syscall.O_APPEND
	oNOFOLLOW  = syscall.O_NOFOLLOW
	oDIRECTORY = syscall.O_DIRECTORY
)

// File is an open file: a handle with its own offset and access mode over
// the file's shared open state. Its methods implement io.Reader, io.ReaderAt,
// io.Writer, io.WriterAt, io.Seeker and io.Closer; each has a variant that
// takes the caller's context (ReadAtContext, ...).
type File struct {
	c     *Client
	n     *openInode
	flags int
	// opened is the context of the methods the io interfaces leave without
	// one: the opener's, without its cancellation (the open call has
	// returned), so they run with its identity. Their bound is that of each
	// call they make (Config.StoreTimeout per store call, rpc's call
	// timeout per meta call).
	opened context.Context

	mu struct {
		sync.Mutex
		pos     int64
		lastEnd int64 // where the previous read ended, to detect streams
		streak  int   // consecutive sequential reads
		closed  bool
	}
}

// OpenRef opens the file ref names with flags (O_RDONLY, O_WRONLY, O_RDWR,
// O_TRUNC, O_APPEND).
func (c *Client) OpenRef(ctx context.Context, ref Ref, flags int) (*File, error) {
	if f, ok, err := c.wbOpen(ctx, ref, flags); ok {
		return f, err
	}
	if flags&oTRUNC != 0 {
		c.flushBeforeCut(ref.Ino)
	}
	l := c.openLease(ctx, ref)
	var r pb.OpenReply
	req := &pb.OpenRequest{Creds: credsPB(c.creds(ctx)), Node: ref.pb(), Flags: uint32(flags),
		ChunkSize: c.cfg.ChunkSize, Replication: c.layoutReplication()}
	err := c.callRef(ByName(ctx), req.Node, req.Node.ToOwner, pb.MethodOpen, req, &r, false)
	if err != nil {
		return nil, err
	}
	if c.afterOpenReply != nil {
		c.afterOpenReply()
	}
	f, err := c.newFile(ctx, ref, &r, flags, flags&oTRUNC != 0)
	if err == nil {
		f.n.staleUnless(l, r.Attr)
	}
	return f, err
}

// newFile wraps an open (or create) reply in a handle. truncated says the
// server just cut the file to zero (and had the stores drop the old chunks
// before it answered): this client drops what it buffered, and the parity
// it caches of the file (dropCutParity).
func (c *Client) newFile(ctx context.Context, ref Ref, r *pb.OpenReply, flags int, truncated bool) (*File, error) {
	if core.IsDir(r.Attr.GetMode()) && flags&oACCMODE != oRDONLY {
		return nil, errs.New(errs.IsDir, "open", "%s is a directory", ref.Name)
	}
	n := c.acquireOpen(ref, r, c.creds(ctx))
	if truncated {
		n.mu.Lock()
		clear(n.mu.dirty)
		clear(n.mu.cache)
		n.mu.size, n.mu.inline, n.mu.data = 0, r.Attr.GetInline(), nil
		n.mu.Unlock()
		c.dropCutParity(ctx, n.ino)
	}
	f := &File{c: c, n: n, flags: flags, opened: context.WithoutCancel(ctx)}
	return f, nil
}

// Ino returns the file's inode number.
func (f *File) Ino() core.Ino { return f.n.ino }

// Ref returns how the meta server finds the file.
func (f *File) Ref() Ref {
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	return f.n.mu.ref
}

func (f *File) check(op string, write bool) error {
	if f.mu.closed {
		return errs.New(errs.BadHandle, op, "file is closed")
	}
	acc := f.flags & oACCMODE
	if write && acc == oRDONLY || !write && acc == oWRONLY {
		return errs.New(errs.BadHandle, op, "file not open for %s", op)
	}
	return nil
}

// ReadAt reads len(p) bytes at off; it returns io.EOF when fewer were there.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	return f.ReadAtContext(f.opened, p, off)
}

// ReadAtContext is ReadAt bounded by ctx: it returns when ctx ends, with
// errs.Canceled or errs.Timeout.
func (f *File) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	k, _, err := f.ReadAtLeased(ctx, p, off)
	return k, err
}

// ReadAtLeased is ReadAtContext that also reports whether what it read
// (the bytes, or where the file ended) came from a view of the file that
// no lease covered (the server refused the refresh its lease: a change
// waited for this client's release of the one it recalled). No recall
// will say when that change lands, so a caller that caches what it read
// must drop it. Asking Stale afterwards is no substitute: a refresh under
// a lease granted once the change landed (the same file read by another
// handle) clears the mark, and the bytes read before it were the old ones
// (linz: a reread from the kernel's pages after another mount's write and
// close returned).
func (f *File) ReadAtLeased(ctx context.Context, p []byte, off int64) (int, bool, error) {
	if off < 0 {
		return 0, false, errs.New(errs.Invalid, "read", "negative offset")
	}
	f.mu.Lock()
	if err := f.check("read", false); err != nil {
		f.mu.Unlock()
		return 0, false, err
	}
	seq := f.noteReadLocked(off, len(p))
	f.mu.Unlock()
	total, unleased := 0, false
	for total < len(p) {
		want := len(p) - total
		k, u, err := f.n.read(ctx, p[total:], off+int64(total), seq)
		total += k
		unleased = unleased || u
		if err != nil {
			return total, unleased, err
		}
		if h := f.c.hooks.readStep.Load(); h != nil {
			(*h)()
		}
		if k < want {
			// The end of the file as this view has it. Asking again
			// would refresh a stale view a second time, and a
			// change landing in between would make the bytes
			// already read the old content of a newer view.
			return total, unleased, io.EOF
		}
	}
	return total, unleased, nil
}

// noteReadLocked tracks whether reads follow each other and reports a stream
// after two in a row.
func (f *File) noteReadLocked(off int64, n int) bool {
	if off == f.mu.lastEnd {
		f.mu.streak++
	} else {
		f.mu.streak = 0
	}
	f.mu.lastEnd = off + int64(n)
	return f.mu.streak >= 1 || off == 0 && n >= 64<<10
}

// Read reads from the handle's offset.
func (f *File) Read(p []byte) (int, error) {
	return f.ReadContext(f.opened, p)
}

// ReadContext is Read bounded by ctx.
func (f *File) ReadContext(ctx context.Context, p []byte) (int, error) {
	f.mu.Lock()
	if err := f.check("read", false); err != nil {
		f.mu.Unlock()
		return 0, err
	}
	off := f.mu.pos
	seq := f.noteReadLocked(off, len(p))
	f.mu.Unlock()
	k, _, err := f.n.read(ctx, p, off, seq)
	f.mu.Lock()
	f.mu.pos = off + int64(k)
	f.mu.Unlock()
	return k, err
}

// WriteAt writes p at off (at the end of the file with O_APPEND).
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	return f.WriteAtContext(f.opened, p, off)
}

// WriteAtContext is WriteAt bounded by ctx: a write waits only when the
// file's write buffer is full, for uploads each bounded by
// Config.StoreTimeout, and gives up when ctx ends. A write by a caller
// other than root (ctx's identity, see WithCreds) clears the file's setuid
// and setgid bits at once, as on Linux.
func (f *File) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errs.New(errs.Invalid, "write", "negative offset")
	}
	f.mu.Lock()
	err := f.check("write", true)
	f.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if err := f.orderWrite(ctx); err != nil {
		return 0, err
	}
	if f.flags&oAPPEND != 0 {
		_, err := f.n.writeAppend(ctx, p)
		if err == nil {
			err = f.n.dropPrivileges(ctx)
		}
		return len(p), err
	}
	if err := f.n.write(ctx, p, off); err != nil {
		return 0, err
	}
	return len(p), f.n.dropPrivileges(ctx)
}

// Write writes at the handle's offset (or the end with O_APPEND).
func (f *File) Write(p []byte) (int, error) {
	return f.WriteContext(f.opened, p)
}

// WriteContext is Write bounded by ctx (see WriteAtContext).
func (f *File) WriteContext(ctx context.Context, p []byte) (int, error) {
	if err := f.orderWrite(ctx); err != nil {
		return 0, err
	}
	if err := f.writeAtPos(ctx, p); err != nil {
		return 0, err
	}
	return len(p), f.n.dropPrivileges(ctx) // not under f.mu: it may commit
}

// writeAtPos writes p at the handle's offset and moves the offset past it.
func (f *File) writeAtPos(ctx context.Context, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return err
	}
	off := f.mu.pos
	if f.flags&oAPPEND != 0 {
		var err error
		if off, err = f.n.writeAppend(ctx, p); err != nil {
			return err
		}
	} else if err := f.n.write(ctx, p, off); err != nil {
		return err
	}
	f.mu.pos = off + int64(len(p))
	return nil
}

// Seek sets the handle's offset.
func (f *File) Seek(offset int64, whence int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = f.mu.pos
	case io.SeekEnd:
		f.n.mu.Lock()
		base = int64(f.n.mu.size)
		f.n.mu.Unlock()
	default:
		return 0, errs.New(errs.Invalid, "seek", "bad whence %d", whence)
	}
	if base+offset < 0 {
		return 0, errs.New(errs.Invalid, "seek", "negative offset")
	}
	f.mu.pos = base + offset
	return f.mu.pos, nil
}

// Truncate sets the file's size (ftruncate: the handle must be writable).
func (f *File) Truncate(size int64) error {
	return f.TruncateContext(f.opened, size)
}

// TruncateContext is Truncate with the caller's context (and identity).
func (f *File) TruncateContext(ctx context.Context, size int64) error {
	f.mu.Lock()
	err := f.check("truncate", true)
	if err != nil && !f.mu.closed {
		// ftruncate(2) of a descriptor not open for writing is EINVAL.
		err = &errs.Error{Kind: errs.Invalid, Op: "truncate", Msg: "file not open for writing"}
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if size < 0 {
		return errs.New(errs.Invalid, "truncate", "negative size")
	}
	if _, ok := ctx.Value(credsKey{}).(core.Creds); !ok {
		f.n.mu.Lock()
		ctx = WithCreds(ctx, f.n.mu.creds)
		f.n.mu.Unlock()
	}
	return f.n.truncate(ctx, uint64(size), true)
}

// Flush makes this handle's writes visible to other clients (what close
// does, without closing). After a failed upload it returns that error, and
// so does every later Write, Flush, Sync and Close of the file: nothing is
// committed after it, and the file keeps its last committed state.
func (f *File) Flush() error {
	return f.FlushContext(f.opened)
}

// FlushContext is Flush bounded by ctx.
func (f *File) FlushContext(ctx context.Context) error {
	if err := f.n.flushClose(ctx); err != nil {
		return err
	}
	if err := f.c.sendAtClose(ctx, f); err != nil {
		return err
	}
	return f.c.wbTakeErr(f.Ref().Parent)
}

// Sync makes the file's data and size durable (fsync).
func (f *File) Sync() error {
	return f.SyncContext(f.opened)
}

// SyncContext is Sync bounded by ctx.
func (f *File) SyncContext(ctx context.Context) error {
	if err := f.n.flush(ctx, true); err != nil {
		return err
	}
	if err := f.c.syncCachedParity(ctx, f.n.ino); err != nil {
		return err
	}
	if err := f.c.syncEdgeHeld(ctx); err != nil {
		return err
	}
	// The file's name and attributes, if written back, are durable too.
	return f.c.SyncDir(ctx, f.Ref().Parent)
}

// Stat returns the file's attributes as this client sees them.
func (f *File) Stat() (core.Attr, error) {
	return f.c.GetAttr(f.opened, f.Ref())
}

// Close flushes (see Flush) and releases the handle. The handle is released
// even when the flush fails; the error says the writes may be lost.
func (f *File) Close() error {
	return f.CloseContext(f.opened)
}

// CloseContext is Close bounded by ctx: the handle is released whether or
// not the flush ends in time.
func (f *File) CloseContext(ctx context.Context) error {
	f.mu.Lock()
	if f.mu.closed {
		f.mu.Unlock()
		return errs.New(errs.BadHandle, "close", "file already closed")
	}
	f.mu.closed = true
	f.mu.Unlock()
	var err error
	if f.flags&oACCMODE != oRDONLY {
		err = f.n.flushClose(ctx)
	}
	if err == nil {
		// Read-only too: an O_CREAT open's create may wait for it.
		err = f.c.sendAtClose(ctx, f)
	}
	f.c.releaseOpen(f.n)
	return err
}
