package edge

// IgnoreRecalls makes the edge started with cfg answer every upstream
// recall by releasing at once, without dropping its cache or recalling
// its clients: a broken edge, to show that the two-site history check
// fails on one.
func IgnoreRecalls(cfg *Config) { cfg.ignoreRecalls = true }
