package client

import "github.com/weftfs/weft/internal/core"

// SetBeforeLocate makes fn run after a request about an open file was
// refused (NotExist or Stale) and before the client asks the meta servers
// where the file is now.
func (c *Client) SetBeforeLocate(fn func(core.Ino)) { c.beforeLocate = fn }
