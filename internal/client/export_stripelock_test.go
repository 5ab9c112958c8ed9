package client

// MarkStoreSuspect makes store s suspect, as a failed or slow call to it
// does: a read of a unit there is hedged at once by a rebuild.
func (c *Client) MarkStoreSuspect(s int) { c.suspects.mark(s) }
