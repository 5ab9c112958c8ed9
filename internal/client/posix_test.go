package client_test

import (
	"context"
	"path"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/posixtest"
)

// TestPOSIX runs the conformance suite against the client library talking
// to a real meta and store server (Pebble on disk, loopback TCP), one
// cluster per case.
func TestPOSIX(t *testing.T) {
	posixtest.Run(t, newPosixFS)
}

// posixKnownBugs lists the cases where weft disagrees with Linux, with the
// disagreement: each is skipped here until the server is fixed, and listed
// so that the skip is never silent.
var posixKnownBugs = map[string]string{}

func newPosixFS(t *testing.T) posixtest.FS {
	if reason, ok := posixKnownBugs[path.Base(t.Name())]; ok {
		t.Skip("known disagreement with Linux: " + reason)
	}
	e, err := cluster.StartEmbedded(context.Background(), cluster.EmbeddedOptions{
		Dir:        t.TempDir(),
		Durability: "async", // the suite checks semantics, not durability; fsync per op is slow
		Backend:    "disk",
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	// The cluster's own client settings (its admin identity), with the
	// suite's chunk and inline sizes.
	cc := cluster.ClientConfig(e.Config(), core.Root, nil)
	cc.ChunkSize, cc.InlineLimit, cc.RetryFor = posixtest.TestChunkSize, posixtest.TestInlineLimit, 2*time.Second
	c, err := client.New(cc)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close client: %v", err)
		}
	})
	return &posixFS{c: c, ctx: context.Background()}
}

// posixFS adapts *client.Client to posixtest.FS; ctx carries the identity.
type posixFS struct {
	c   *client.Client
	ctx context.Context
}

var _ posixtest.FS = (*posixFS)(nil)

func (p *posixFS) Stat(path string) (core.Attr, error)  { return p.c.Stat(p.ctx, path) }
func (p *posixFS) Lstat(path string) (core.Attr, error) { return p.c.Lstat(p.ctx, path) }

func (p *posixFS) Open(path string, flags int, perm uint32) (posixtest.File, error) {
	f, err := p.c.Open(p.ctx, path, flags, perm)
	if err != nil {
		return nil, err
	}
	return &posixFile{File: f, ctx: p.ctx}, nil
}

func (p *posixFS) Mkdir(path string, perm uint32) error { return p.c.Mkdir(p.ctx, path, perm) }
func (p *posixFS) Mknod(path string, mode, rdev uint32) error {
	return p.c.Mknod(p.ctx, path, mode, rdev)
}
func (p *posixFS) Symlink(target, path string) error { return p.c.Symlink(p.ctx, target, path) }
func (p *posixFS) Readlink(path string) (string, error) {
	return p.c.ReadlinkPath(p.ctx, path)
}
func (p *posixFS) Link(oldPath, newPath string) error { return p.c.Link(p.ctx, oldPath, newPath) }
func (p *posixFS) Unlink(path string) error           { return p.c.Unlink(p.ctx, path) }
func (p *posixFS) Rmdir(path string) error            { return p.c.Rmdir(p.ctx, path) }
func (p *posixFS) Rename(oldPath, newPath string, flags uint32) error {
	return p.c.Rename(p.ctx, oldPath, newPath, flags)
}
func (p *posixFS) ReadDir(path string) ([]core.DirEntry, error) { return p.c.ReadDir(p.ctx, path) }
func (p *posixFS) Chmod(path string, mode uint32) error         { return p.c.Chmod(p.ctx, path, mode) }
func (p *posixFS) Chown(path string, uid, gid int) error        { return p.c.Chown(p.ctx, path, uid, gid) }
func (p *posixFS) Lchown(path string, uid, gid int) error {
	return p.c.Lchown(p.ctx, path, uid, gid)
}
func (p *posixFS) Chtimes(path string, atime, mtime time.Time) error {
	return p.c.Chtimes(p.ctx, path, atime, mtime)
}
func (p *posixFS) Truncate(path string, size int64) error { return p.c.Truncate(p.ctx, path, size) }
func (p *posixFS) GetXattr(path, name string) ([]byte, error) {
	return p.c.GetXattrPath(p.ctx, path, name)
}
func (p *posixFS) SetXattr(path, name string, value []byte, flags uint32) error {
	return p.c.SetXattrPath(p.ctx, path, name, value, flags)
}
func (p *posixFS) ListXattr(path string) ([]string, error) { return p.c.ListXattrPath(p.ctx, path) }
func (p *posixFS) RemoveXattr(path, name string) error {
	return p.c.RemoveXattrPath(p.ctx, path, name)
}
func (p *posixFS) Access(path string, mask uint32) error { return p.c.AccessPath(p.ctx, path, mask) }

func (p *posixFS) StatFS() (posixtest.StatFS, error) {
	s, err := p.c.StatFS(p.ctx)
	return posixtest.StatFS{
		Capacity: s.Capacity, Used: s.Used, Files: s.Files, FilesFree: s.FilesFree, NameMax: s.NameMax,
	}, err
}

func (p *posixFS) As(creds core.Creds) posixtest.FS {
	return &posixFS{c: p.c, ctx: client.WithCreds(context.Background(), creds)}
}

// posixFile is a *client.File whose ftruncate runs with the identity of the
// view that opened it.
type posixFile struct {
	*client.File
	ctx context.Context
}

func (f *posixFile) Truncate(size int64) error { return f.TruncateContext(f.ctx, size) }
