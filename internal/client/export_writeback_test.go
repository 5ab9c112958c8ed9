package client

import "github.com/weftfs/weft/internal/core"

// WriteBackHeld reports whether the client keeps write-back state of dir
// (it forgets a directory once its lease ran out with nothing queued).
func (c *Client) WriteBackHeld(dir core.Ino) bool { return c.wbLookupDir(dir) != nil }

// SetAfterOpenReply makes fn run between an open's reply and the open
// state it makes.
func (c *Client) SetAfterOpenReply(fn func()) { c.afterOpenReply = fn }

// Stall makes the client ignore lease recalls and stops its write-back
// flusher (on), or resumes them: a process stopped past its leases' term.
func (c *Client) Stall(on bool) { c.stalled.Store(on) }
