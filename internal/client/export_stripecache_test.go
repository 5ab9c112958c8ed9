package client

// CrashParityCache stands for a crash of the client as far as its parity
// cache goes: the flusher stops and every frame is forgotten unwritten, so
// the marks it set stay on the stores.
func (c *Client) CrashParityCache() {
	pc := c.ec.cache
	pc.closed.Do(func() {
		close(pc.stop)
		<-pc.done
	})
	pc.mu.Lock()
	clear(pc.mu.frames)
	pc.mu.Unlock()
}
