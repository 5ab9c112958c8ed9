package fusefs

import (
	"context"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// GETATTRs by path of a file open here. The kernel names a handle in a
// GETATTR (FUSE_GETATTR_FH) only when it asks about an open file it holds
// (fstat, a read past its cached size); a stat by path names none. go-fuse
// then hands Getattr the node's first open handle all the same, and the
// mount took a stat by path for an fstat: it answered from the open file,
// wherever the client followed it or with what it last knew of it, where a
// stat of a name another mount had moved or replaced must get ESTALE, so
// that the kernel looks the name up again (TestStatOfOpenFileThroughStaleDentry).
// lockReleasingFS.GetAttr notes the requests that name no handle, by their
// cancel channel (one per request in flight), and Getattr drops the handle
// go-fuse made up.

// pathGetattrs are the GETATTRs in flight that name no handle.
type pathGetattrs struct {
	mu sync.Mutex
	m  map[<-chan struct{}]struct{}
}

// start notes the request of cancel until the returned function is called.
func (p *pathGetattrs) start(cancel <-chan struct{}) (done func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[<-chan struct{}]struct{})
	}
	p.m[cancel] = struct{}{}
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.m, cancel)
	}
}

// byPath reports whether the request of ctx is a GETATTR that names no
// handle.
func (p *pathGetattrs) byPath(ctx context.Context) bool {
	c, ok := ctx.(*fuse.Context)
	if !ok || c.Cancel == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok = p.m[c.Cancel]
	return ok
}
