package rpc

import (
	"context"
	"encoding/binary"
	"net"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

const (
	// writeBufSize is the write buffer of a connection: frames that fit
	// wait there for the last writer of a burst to flush them.
	writeBufSize = 32 << 10
	// cutGrace is how long a write goes on after its caller's context
	// ended before it is cut. Cutting closes the connection, which every
	// caller of the peer shares, so only a write that is stuck (the peer
	// stopped reading) is worth it: one merely under way when its caller
	// gave up (the loser of a hedged read, canceled as the winner
	// answers; the frame often not yet begun) ends within microseconds
	// (TestEndedContextKeepsAFlowingWrite).
	cutGrace = 100 * time.Millisecond
)

// lockWriter takes the write lock, giving up when ctx ends (Background
// waits for ever: the connection's close releases a stuck writer). The lock
// is a channel so that a caller stuck behind a write to a peer that stopped
// reading can still return when its context ends.
func (c *Conn) lockWriter(ctx context.Context) bool {
	select {
	case c.w.sem <- struct{}{}:
		return true
	default:
	}
	select {
	case c.w.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *Conn) unlockWriter() { <-c.w.sem }

// writeFrame writes one frame: h, then msg, then data as the attachment if
// it is not empty. It sets h's body length and attachment flag. When it
// returns, msg and data have been written (or the write failed) and are the
// caller's again. A write error closes the connection.
//
// ctx (Background for frames that no caller waits on: responses, cancels,
// pings) bounds the write. If it ends while the frame waits for the write
// lock, the frame is not sent; if it ends during a system call that
// writes and that write is still going cutGrace later, the write is cut
// and the connection closed, since the peer may have half a frame. Either
// way writeFrame returns the context's error (errs.Canceled or
// errs.Timeout); a write that ended within the grace returns its own
// result.
func (c *Conn) writeFrame(ctx context.Context, h *header, msg, data []byte) error {
	h.bodyLen = bodyLen(msg, data)
	if len(data) > 0 {
		h.flags |= flagData
	}
	if h.typ != framePing {
		c.ka.writes.Add(1)
	}
	c.writers.Add(1)
	if !c.lockWriter(ctx) {
		// The count added above must come down under the lock, where
		// the last writer of a burst flushes what others buffered.
		go func() {
			c.lockWriter(context.Background())
			err := c.finishWriteLocked(nil)
			c.unlockWriter()
			if err != nil {
				c.closeWithError(errs.Wrap(errs.Unavailable, "rpc", "write to "+c.nc.RemoteAddr().String(), err))
			}
		}()
		return ctxError(ctx, "rpc write to "+c.nc.RemoteAddr().String())
	}
	// While this writer holds the lock, the end of its context cuts the
	// system call that writes (its own frame, or a flush of others'), if
	// it is still going cutGrace later.
	stop, fired := func() bool { return true }, (chan struct{})(nil)
	if ctx.Done() != nil {
		fired = make(chan struct{})
		stop = context.AfterFunc(ctx, func() {
			c.nc.SetWriteDeadline(time.Now().Add(cutGrace))
			close(fired)
		})
	}
	err := c.w.err
	if err == nil {
		err = c.appendFrameLocked(h, msg, data)
	}
	err = c.finishWriteLocked(err)
	cut := false
	if !stop() {
		<-fired
		if err == nil {
			// The context ended once the writing was done: nothing
			// was cut, and the connection writes on.
			c.nc.SetWriteDeadline(time.Time{})
		} else {
			cut = true
		}
	}
	c.unlockWriter()
	if err != nil {
		err = errs.Wrap(errs.Unavailable, "rpc", "write to "+c.nc.RemoteAddr().String(), err)
		if cut {
			// The peer may have half a frame: the stream is lost.
			err = errs.New(errs.Unavailable, "rpc", "write to %s cut: the caller's context ended", c.nc.RemoteAddr())
		}
		c.closeWithError(err)
		if cut {
			return ctxError(ctx, "rpc write to "+c.nc.RemoteAddr().String())
		}
	}
	return err
}

// finishWriteLocked ends a writer's turn: the one that brings the writers
// count to zero has the last frame of the burst in the buffer and flushes
// it (anyone who came later will flush after it). A write error becomes the
// connection's sticky error.
func (c *Conn) finishWriteLocked(err error) error {
	if c.writers.Add(-1) == 0 && err == nil && c.w.err == nil && len(c.w.buf) > 0 {
		_, err = c.nc.Write(c.w.buf)
		c.w.buf = c.w.buf[:0]
	}
	if err != nil && c.w.err == nil {
		c.w.err = err
	}
	return err
}

// appendFrameLocked puts a frame in the write buffer. Parts too large for
// it are written at once, behind what is buffered, in one writev: they are
// never copied.
func (c *Conn) appendFrameLocked(h *header, msg, data []byte) error {
	fixed := headerLen
	if h.hasData() {
		fixed += attachLenSize
	}
	if len(c.w.buf)+fixed > cap(c.w.buf) {
		if _, err := c.nc.Write(c.w.buf); err != nil {
			return err
		}
		c.w.buf = c.w.buf[:0]
	}
	var hb [headerLen]byte
	encodeHeader(&hb, h)
	c.w.buf = append(c.w.buf, hb[:]...)
	if h.hasData() {
		c.w.buf = binary.BigEndian.AppendUint32(c.w.buf, uint32(len(data)))
	}
	vec := c.w.vec[:0]
	for _, p := range [2][]byte{msg, data} {
		switch {
		case len(p) == 0:
		case len(vec) == 0 && len(c.w.buf)+len(p) <= cap(c.w.buf):
			c.w.buf = append(c.w.buf, p...)
		case len(vec) == 0:
			vec = append(vec, c.w.buf, p)
		default:
			vec = append(vec, p)
		}
	}
	if len(vec) == 0 {
		return nil
	}
	bufs := net.Buffers(vec)
	_, err := bufs.WriteTo(c.nc)
	clear(c.w.vec[:])
	c.w.buf = c.w.buf[:0]
	return err
}
