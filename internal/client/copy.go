package client

import (
	"context"
	"io"
	"os"
)

// copyUnit is the buffer of WriteFrom and ReadTo: a whole default chunk, so
// write-back uploads full chunks and read-ahead streams.
const copyUnit = 4 << 20

// WriteFrom creates (or truncates) path with perm and copies r into it, then
// closes it: with SyncOnClose the data is durable when it returns.
func (c *Client) WriteFrom(ctx context.Context, path string, r io.Reader, perm uint32) (int64, error) {
	f, err := c.Create(ctx, path, perm)
	if err != nil {
		return 0, err
	}
	// Hide any WriterTo/ReaderFrom so CopyBuffer uses the large buffer.
	n, err := io.CopyBuffer(struct{ io.Writer }{f}, struct{ io.Reader }{r}, make([]byte, copyUnit))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// ReadTo copies the content of path to w.
func (c *Client) ReadTo(ctx context.Context, path string, w io.Writer) (int64, error) {
	f, err := c.Open(ctx, path, os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{f}, make([]byte, copyUnit))
}
