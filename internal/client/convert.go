package client

import (
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/proto/weftpb"
)

// Ref names a node for the meta server: a file with one link keeps its
// attributes in its directory entry, so the server finds it by parent and
// name and checks that the entry still holds Ino.
type Ref struct {
	Ino    core.Ino
	Parent core.Ino
	Name   string
}

func (r Ref) pb() *weftpb.NodeRef {
	return &weftpb.NodeRef{Ino: uint64(r.Ino), Parent: uint64(r.Parent), Name: r.Name}
}

func credsPB(c core.Creds) *weftpb.Creds {
	return &weftpb.Creds{Uid: c.UID, Gid: c.GID, Groups: c.Groups}
}

func attrFromPB(a *weftpb.Attr) core.Attr {
	if a == nil {
		return core.Attr{}
	}
	return core.Attr{
		Ino:   core.Ino(a.Ino),
		Mode:  a.Mode,
		Nlink: a.Nlink,
		UID:   a.Uid,
		GID:   a.Gid,
		Rdev:  a.Rdev,
		Size:  a.Size,
		Atime: time.Unix(0, a.AtimeNs),
		Mtime: time.Unix(0, a.MtimeNs),
		Ctime: time.Unix(0, a.CtimeNs),
	}
}

func entryFromPB(e *weftpb.DirEntryMsg) core.DirEntry {
	d := core.DirEntry{Name: e.Name, Ino: core.Ino(e.Ino), Mode: e.Mode}
	if e.Attr != nil {
		a := attrFromPB(e.Attr)
		d.Attr = &a
	}
	return d
}
