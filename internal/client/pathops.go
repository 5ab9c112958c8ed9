package client

import (
	"context"
	"time"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// Stat returns the attributes of path, following a final symlink.
func (c *Client) Stat(ctx context.Context, path string) (core.Attr, error) {
	return c.stat(ctx, "stat", path, true)
}

// Lstat returns the attributes of path itself, even if it is a symlink.
func (c *Client) Lstat(ctx context.Context, path string) (core.Attr, error) {
	return c.stat(ctx, "lstat", path, false)
}

func (c *Client) stat(ctx context.Context, op, path string, follow bool) (core.Attr, error) {
	n, err := c.resolve(ctx, op, path, follow)
	if err != nil {
		return core.Attr{}, err
	}
	if n.ref.Ino == core.RootIno {
		return c.GetAttr(ctx, n.ref)
	}
	return n.attr, nil
}

// Open opens path with flags (os.O_* values) and, with O_CREAT, creates it
// with perm (the caller applies its umask).
func (c *Client) Open(ctx context.Context, path string, flags int, perm uint32) (*File, error) {
	if flags&oCREAT == 0 {
		n, err := c.resolve(ctx, "open", path, flags&oNOFOLLOW == 0)
		if err != nil {
			return nil, err
		}
		return c.openNode(ctx, "open", path, n, flags)
	}
	dir, name, err := c.resolveParent(ctx, "open", path)
	if err != nil {
		if errs.Is(err, errs.Busy) || errs.Is(err, errs.Invalid) && name != "" {
			return nil, &errs.Error{Kind: errs.IsDir, Op: "open", Path: path}
		}
		return nil, err
	}
	if flags&oEXCL == 0 {
		// O_CREAT follows a symlink that already exists at the name.
		if a, err := c.LookupAt(ctx, dir.ref.Ino, name); err == nil && (core.IsSymlink(a.Mode) || a.IsDir()) {
			if a.IsDir() {
				return nil, &errs.Error{Kind: errs.IsDir, Op: "open", Path: path}
			}
			if flags&oNOFOLLOW != 0 {
				n := node{ref: Ref{Ino: a.Ino, Parent: dir.ref.Ino, Name: name}, attr: a}
				return c.openNode(ctx, "open", path, n, flags)
			}
			n, err := c.resolve(ctx, "open", path, true)
			if errs.Is(err, errs.NotExist) {
				return c.createDangling(ctx, path, flags, perm)
			}
			if err != nil {
				return nil, err
			}
			return c.openNode(ctx, "open", path, n, flags)
		}
	}
	f, err := c.CreateAt(ctx, dir.ref.Ino, name, flags, perm)
	return f, errs.WithPath(err, "open", path)
}

// createDangling creates the file a dangling symlink points at, as
// open(O_CREAT) does.
func (c *Client) createDangling(ctx context.Context, path string, flags int, perm uint32) (*File, error) {
	link, err := c.resolve(ctx, "open", path, false)
	if err != nil {
		return nil, err
	}
	target, err := c.Readlink(ctx, link.ref)
	if err != nil {
		return nil, err
	}
	if target != "" && target[0] != '/' {
		target = parentPath(path) + "/" + target
	}
	return c.Open(ctx, target, flags|oEXCL, perm)
}

func parentPath(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			return path[:i]
		}
	}
	return ""
}

func (c *Client) openNode(ctx context.Context, op, path string, n node, flags int) (*File, error) {
	switch {
	case core.IsSymlink(n.attr.Mode):
		return nil, &errs.Error{Kind: errs.Loop, Op: op, Path: path, Msg: "is a symlink (O_NOFOLLOW)"}
	case flags&oDIRECTORY != 0 && !n.attr.IsDir():
		return nil, &errs.Error{Kind: errs.NotDir, Op: op, Path: path}
	}
	f, err := c.OpenRef(ctx, n.ref, flags)
	return f, errs.WithPath(err, op, path)
}

// Create creates or truncates path for writing, like os.Create.
func (c *Client) Create(ctx context.Context, path string, perm uint32) (*File, error) {
	return c.Open(ctx, path, oRDWR|oCREAT|oTRUNC, perm)
}

// Mkdir creates directory path.
func (c *Client) Mkdir(ctx context.Context, path string, perm uint32) error {
	dir, name, err := c.resolveParent(ctx, "mkdir", path)
	if err != nil {
		if errs.Is(err, errs.Busy) || errs.Is(err, errs.Invalid) && name != "" {
			return &errs.Error{Kind: errs.Exist, Op: "mkdir", Path: path}
		}
		return err
	}
	_, err = c.MkdirAt(ctx, dir.ref.Ino, name, perm)
	return errs.WithPath(err, "mkdir", path)
}

// MkdirAll creates path and every missing parent, like os.MkdirAll.
func (c *Client) MkdirAll(ctx context.Context, path string, perm uint32) error {
	parts, _, err := splitPath("mkdir", path)
	if err != nil {
		return err
	}
	cur := ""
	for _, p := range parts {
		cur += "/" + p
		err := c.Mkdir(ctx, cur, perm)
		if err == nil || !errs.Is(err, errs.Exist) {
			if err != nil {
				return err
			}
			continue
		}
		a, serr := c.Stat(ctx, cur)
		if serr != nil {
			return serr
		}
		if !a.IsDir() {
			return &errs.Error{Kind: errs.NotDir, Op: "mkdir", Path: cur}
		}
	}
	return nil
}

// Mknod creates a fifo, socket or device node at path.
func (c *Client) Mknod(ctx context.Context, path string, mode, rdev uint32) error {
	dir, name, err := c.resolveParent(ctx, "mknod", path)
	if err != nil {
		return err
	}
	_, err = c.MknodAt(ctx, dir.ref.Ino, name, mode, rdev)
	return errs.WithPath(err, "mknod", path)
}

// Symlink creates a symlink at path pointing at target.
func (c *Client) Symlink(ctx context.Context, target, path string) error {
	dir, name, err := c.resolveParent(ctx, "symlink", path)
	if err != nil {
		if errs.Is(err, errs.Busy) {
			return &errs.Error{Kind: errs.Exist, Op: "symlink", Path: path}
		}
		return err
	}
	_, err = c.SymlinkAt(ctx, dir.ref.Ino, name, target)
	return errs.WithPath(err, "symlink", path)
}

// ReadlinkPath returns the target of the symlink at path.
func (c *Client) ReadlinkPath(ctx context.Context, path string) (string, error) {
	n, err := c.resolve(ctx, "readlink", path, false)
	if err != nil {
		return "", err
	}
	t, err := c.Readlink(ctx, n.ref)
	return t, errs.WithPath(err, "readlink", path)
}

// Link makes newPath a hard link to oldPath (oldPath's symlink is not
// followed, as linkat without AT_SYMLINK_FOLLOW).
func (c *Client) Link(ctx context.Context, oldPath, newPath string) error {
	n, err := c.resolve(ctx, "link", oldPath, false)
	if err != nil {
		return err
	}
	dir, name, err := c.resolveParent(ctx, "link", newPath)
	if err != nil {
		if errs.Is(err, errs.Busy) {
			return &errs.Error{Kind: errs.Exist, Op: "link", Path: newPath}
		}
		return err
	}
	_, err = c.LinkAt(ctx, n.ref, dir.ref.Ino, name)
	return errs.WithPath(err, "link", newPath)
}

// Unlink removes the file (not directory) at path.
func (c *Client) Unlink(ctx context.Context, path string) error {
	dir, name, err := c.resolveParent(ctx, "unlink", path)
	if err != nil {
		if errs.Is(err, errs.Busy) {
			return &errs.Error{Kind: errs.IsDir, Op: "unlink", Path: path}
		}
		return err
	}
	return errs.WithPath(c.UnlinkAt(ctx, dir.ref.Ino, name), "unlink", path)
}

// Rmdir removes the empty directory at path.
func (c *Client) Rmdir(ctx context.Context, path string) error {
	dir, name, err := c.resolveParent(ctx, "rmdir", path)
	if err != nil {
		if name == ".." {
			return &errs.Error{Kind: errs.NotEmpty, Op: "rmdir", Path: path}
		}
		return err
	}
	return errs.WithPath(c.RmdirAt(ctx, dir.ref.Ino, name), "rmdir", path)
}

// Remove removes a file or an empty directory, like os.Remove.
func (c *Client) Remove(ctx context.Context, path string) error {
	a, err := c.Lstat(ctx, path)
	if err != nil {
		return err
	}
	if a.IsDir() {
		return c.Rmdir(ctx, path)
	}
	return c.Unlink(ctx, path)
}

// RemoveAll removes path and everything below it, like os.RemoveAll; a
// missing path is not an error.
func (c *Client) RemoveAll(ctx context.Context, path string) error {
	a, err := c.Lstat(ctx, path)
	if errs.Is(err, errs.NotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !a.IsDir() {
		return c.Unlink(ctx, path)
	}
	for {
		// Remove in rounds: listing whole pages first keeps the cookie walk
		// independent of the removals.
		ents, err := c.ReadDir(ctx, path)
		if err != nil {
			return err
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			if err := c.RemoveAll(ctx, path+"/"+e.Name); err != nil {
				return err
			}
		}
	}
	return c.Rmdir(ctx, path)
}

// Rename moves oldPath to newPath (flags: RenameNoReplace, RenameExchange).
func (c *Client) Rename(ctx context.Context, oldPath, newPath string, flags uint32) error {
	src, sname, err := c.resolveParent(ctx, "rename", oldPath)
	if err != nil {
		return err
	}
	dst, dname, err := c.resolveParent(ctx, "rename", newPath)
	if err != nil {
		return err
	}
	err = c.RenameAt(ctx, src.ref.Ino, sname, dst.ref.Ino, dname, flags)
	return errs.WithPath(err, "rename", oldPath)
}

// ReadDir lists directory path, "." and ".." excluded, in the server's
// order. Use ReadDirAt to stream a huge directory.
func (c *Client) ReadDir(ctx context.Context, path string) ([]core.DirEntry, error) {
	n, err := c.resolve(ctx, "readdir", path, true)
	if err != nil {
		return nil, err
	}
	if !n.attr.IsDir() {
		return nil, &errs.Error{Kind: errs.NotDir, Op: "readdir", Path: path}
	}
	var out []core.DirEntry
	err = c.ReadDirAt(ctx, n.ref.Ino, true, func(e core.DirEntry) error {
		out = append(out, e)
		return nil
	})
	return out, errs.WithPath(err, "readdir", path)
}

// Chmod sets path's permission bits (following symlinks).
func (c *Client) Chmod(ctx context.Context, path string, mode uint32) error {
	return c.setAttrPath(ctx, "chmod", path, true, SetAttr{Mode: &mode})
}

// Chown sets path's owner and group; -1 leaves one unchanged (following
// symlinks, as chown; Lchown does not).
func (c *Client) Chown(ctx context.Context, path string, uid, gid int) error {
	return c.setAttrPath(ctx, "chown", path, true, ownerAttr(uid, gid))
}

// Lchown is Chown on a symlink itself.
func (c *Client) Lchown(ctx context.Context, path string, uid, gid int) error {
	return c.setAttrPath(ctx, "lchown", path, false, ownerAttr(uid, gid))
}

func ownerAttr(uid, gid int) SetAttr {
	var s SetAttr
	if uid >= 0 {
		u := uint32(uid)
		s.UID = &u
	}
	if gid >= 0 {
		g := uint32(gid)
		s.GID = &g
	}
	return s
}

// Chtimes sets path's access and modification times.
func (c *Client) Chtimes(ctx context.Context, path string, atime, mtime time.Time) error {
	return c.setAttrPath(ctx, "chtimes", path, true, SetAttr{Atime: &atime, Mtime: &mtime})
}

// Truncate sets path's size.
func (c *Client) Truncate(ctx context.Context, path string, size int64) error {
	if size < 0 {
		return &errs.Error{Kind: errs.Invalid, Op: "truncate", Path: path, Msg: "negative size"}
	}
	s := uint64(size)
	return c.setAttrPath(ctx, "truncate", path, true, SetAttr{Size: &s})
}

func (c *Client) setAttrPath(ctx context.Context, op, path string, follow bool, s SetAttr) error {
	n, err := c.resolve(ctx, op, path, follow)
	if err != nil {
		return err
	}
	_, err = c.SetAttr(ctx, n.ref, s)
	return errs.WithPath(err, op, path)
}

// GetXattrPath returns extended attribute name of path.
func (c *Client) GetXattrPath(ctx context.Context, path, name string) ([]byte, error) {
	n, err := c.resolve(ctx, "getxattr", path, true)
	if err != nil {
		return nil, err
	}
	return c.GetXattr(ctx, n.ref, name)
}

// SetXattrPath sets extended attribute name of path.
func (c *Client) SetXattrPath(ctx context.Context, path, name string, value []byte, flags uint32) error {
	n, err := c.resolve(ctx, "setxattr", path, true)
	if err != nil {
		return err
	}
	return c.SetXattr(ctx, n.ref, name, value, flags)
}

// ListXattrPath lists the extended attribute names of path.
func (c *Client) ListXattrPath(ctx context.Context, path string) ([]string, error) {
	n, err := c.resolve(ctx, "listxattr", path, true)
	if err != nil {
		return nil, err
	}
	return c.ListXattr(ctx, n.ref)
}

// RemoveXattrPath removes extended attribute name of path.
func (c *Client) RemoveXattrPath(ctx context.Context, path, name string) error {
	n, err := c.resolve(ctx, "removexattr", path, true)
	if err != nil {
		return err
	}
	return c.RemoveXattr(ctx, n.ref, name)
}

// AccessPath checks the caller's permission mask on path.
func (c *Client) AccessPath(ctx context.Context, path string, mask uint32) error {
	n, err := c.resolve(ctx, "access", path, true)
	if err != nil {
		return err
	}
	return c.Access(ctx, n.ref, mask)
}
