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

// DropWriteBack stands for a crash of the client as far as its metadata
// write-back goes: every queued change is dropped unsent, and nothing is
// queued from now on. Close then sends nothing.
func (c *Client) DropWriteBack() {
	for _, w := range c.wbDirs() {
		w.mu.Lock()
		w.mu.sealed, w.mu.open, w.mu.used, w.mu.creates, w.mu.moves = nil, nil, nil, nil, nil
		w.mu.after, w.mu.afterMove = nil, nil
		w.mu.lost, w.mu.retired = true, true
		w.mu.Unlock()
	}
	c.wb.mu.Lock()
	c.wb.mu.dirs = nil
	c.wb.mu.Unlock()
	c.cfg.WriteBack = false
}
