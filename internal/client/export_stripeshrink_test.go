package client

import "github.com/weftfs/weft/internal/core"

// SetAfterTruncateReply sets a hook that a truncate runs once the meta
// server answered it (the data cut) and before the client rewrites the
// parity of the stripe holding the new end: a test holds a truncate there.
func (c *Client) SetAfterTruncateReply(fn func(core.Ino)) { c.afterTruncateReply = fn }
