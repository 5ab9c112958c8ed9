package edge

import (
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/proto/weftpb"
)

// An unlink or link may write a file's own record, which its request does
// not always name (delegate.go): it goes upstream under the edge's write
// leases only while they are all on directories (a write-back client asks
// for no other). A key is known to be a directory once a reply that
// passed through the edge said so (a write-back client reads the
// directory's attributes before it asks for the lease); inode numbers are
// never reused, so it stays one.

// maxDirs bounds the directories the edge remembers; past it, it forgets
// them all (an unlink under a delegated lease then goes on fwd until the
// directories' attributes pass again).
const maxDirs = 1 << 20

// dirSet is the inode numbers of directories seen in replies.
type dirSet struct {
	mu   sync.Mutex
	inos map[core.Ino]struct{}
}

func (d *dirSet) add(ino core.Ino) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inos == nil || len(d.inos) >= maxDirs {
		d.inos = make(map[core.Ino]struct{})
	}
	d.inos[ino] = struct{}{}
}

func (d *dirSet) has(ino core.Ino) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.inos[ino]
	return ok
}

// noteDirs records the directories a getattr, lookup or readdir reply
// describes.
func (d *dirSet) noteDirs(method uint16, resp []byte) {
	note := func(a *weftpb.Attr) {
		if a != nil && a.Mode&core.ModeType == core.ModeDir {
			d.add(core.Ino(a.Ino))
		}
	}
	switch method {
	case weftpb.MethodGetAttr:
		var r weftpb.GetAttrReply
		if proto.Unmarshal(resp, &r) == nil {
			note(r.Attr)
		}
	case weftpb.MethodLookup:
		var r weftpb.LookupReply
		if proto.Unmarshal(resp, &r) == nil {
			note(r.Attr)
		}
	case weftpb.MethodReadDir:
		var r weftpb.ReadDirReply
		if proto.Unmarshal(resp, &r) == nil {
			for _, e := range r.Entries {
				note(e.Attr)
			}
		}
	}
}
