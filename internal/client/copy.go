package client

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/weftfs/weft/internal/rpc"
)

// WriteFrom and ReadTo are what weft put and weft get run, so they take the
// shortest path through the client: WriteFrom reads r straight into pooled
// chunk-sized buffers that become the write-back ranges as they are (one
// user-space copy fewer than Write), and ReadTo writes the read-ahead
// buffers straight to w (one fewer than Read).

// WriteFrom creates (or truncates) path with perm and copies r into it, then
// closes it: with SyncOnClose the data is durable when it returns.
func (c *Client) WriteFrom(ctx context.Context, path string, r io.Reader, perm uint32) (int64, error) {
	f, err := c.Create(ctx, path, perm)
	if err != nil {
		return 0, err
	}
	n, err := copyIn(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// copyIn writes all of r into the new file f from offset 0, one chunk per
// buffer so that each buffer is a whole chunk's dirty range.
func copyIn(f *File, r io.Reader) (int64, error) {
	unit := int(f.c.cfg.ChunkSize)
	var off int64
	for {
		buf := rpc.GetBuffer(unit)
		k, rerr := io.ReadFull(r, buf)
		if k > 0 {
			if err := f.n.writeOwned(buf[:k], off); err != nil {
				return off, err
			}
			off += int64(k)
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

// ReadTo copies the content of path to w.
func (c *Client) ReadTo(ctx context.Context, path string, w io.Writer) (int64, error) {
	f, err := c.Open(ctx, path, os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.n.writeTo(ctx, w)
}
