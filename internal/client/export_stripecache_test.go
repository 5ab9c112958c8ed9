package client

import "github.com/weftfs/weft/internal/core"

// CrashParityCache stands for a crash of the client as far as its parity
// cache goes: the flusher stops and every frame is forgotten unwritten, so
// the marks it set stay on the stores. The frames' stripe locks are let
// go, as if the crash were a lock term ago (they would lapse by then).
func (c *Client) CrashParityCache() {
	pc := c.ec.cache
	pc.closed.Do(func() {
		close(pc.stop)
		<-pc.done
	})
	pc.mu.Lock()
	clear(pc.mu.frames)
	pc.mu.Unlock()
	c.ec.mu.Lock()
	var held []stripeKey
	for k := range c.ec.mu.holds {
		held = append(held, k)
	}
	c.ec.mu.Unlock()
	for _, k := range held {
		c.letGoStripe(k)
	}
}

// OnFrameFlushWriting sets a hook that a flush of a frame runs just before
// it writes the frame's parity (the cache's flusher, FlushParity, a
// rebuild's flush), with the stripe's lock held: a test holds a flush
// there to run something alongside it.
func (c *Client) OnFrameFlushWriting(hook func(ino core.Ino, stripe uint64)) {
	pc := c.ec.cache
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.mu.writing = func(k stripeKey) { hook(k.ino, k.stripe) }
}
