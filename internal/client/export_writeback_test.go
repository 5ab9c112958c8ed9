package client

import "github.com/weftfs/weft/internal/core"

// WriteBackHeld reports whether the client keeps write-back state of dir
// (it forgets a directory once its lease ran out with nothing queued).
func (c *Client) WriteBackHeld(dir core.Ino) bool { return c.wbLookupDir(dir) != nil }
