package client

import (
	"context"
	"strings"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// maxSymlinks is how many symlinks one path resolution follows before it
// fails with Loop, as Linux's MAXSYMLINKS.
const maxSymlinks = 40

// node is a resolved path: its reference and attributes.
type node struct {
	ref  Ref
	attr core.Attr
}

var rootNode = node{ref: Ref{Ino: core.RootIno}}

// resolver walks paths from the root. Paths are absolute; a relative path
// is taken from the root (the library has no working directory).
type resolver struct {
	c     *Client
	ctx   context.Context
	links int
}

// splitPath checks a path and returns its components and whether it ended
// in a slash (which requires a directory).
func splitPath(op, path string) ([]string, bool, error) {
	if path == "" {
		return nil, false, &errs.Error{Kind: errs.NotExist, Op: op, Msg: "empty path"}
	}
	if len(path) > core.MaxPathLen {
		return nil, false, &errs.Error{Kind: errs.NameTooLong, Op: op, Msg: "path longer than 4096 bytes"}
	}
	if strings.IndexByte(path, 0) >= 0 {
		return nil, false, &errs.Error{Kind: errs.Invalid, Op: op, Msg: "path contains NUL"}
	}
	var parts []string
	for _, p := range strings.Split(path, "/") {
		if p == "" || p == "." && len(parts) > 0 {
			continue
		}
		if len(p) > core.MaxNameLen {
			return nil, false, &errs.Error{Kind: errs.NameTooLong, Op: op, Path: path, Msg: "component longer than 255 bytes"}
		}
		parts = append(parts, p)
	}
	if len(parts) > 0 && parts[0] == "." {
		parts = parts[1:]
	}
	// A final "." stays: rmdir("d/.") must fail, not remove d.
	if trimmed := strings.TrimRight(path, "/"); (trimmed == "." || strings.HasSuffix(trimmed, "/.")) && len(parts) > 0 {
		parts = append(parts, ".")
	}
	return parts, strings.HasSuffix(path, "/") || strings.HasSuffix(path, "/."), nil
}

// walk resolves parts from the directory stack (root first) and returns the
// stack with the final node on top. follow says whether a symlink as the
// last component is followed.
func (r *resolver) walk(op, path string, stack []node, parts []string, follow bool) ([]node, error) {
	for i, name := range parts {
		cur := stack[len(stack)-1]
		switch name {
		case ".":
			continue
		case "..":
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		if !cur.attr.IsDir() && cur.ref.Ino != core.RootIno {
			return nil, &errs.Error{Kind: errs.NotDir, Op: op, Path: path}
		}
		a, err := r.c.LookupAt(r.ctx, cur.ref.Ino, name)
		if err != nil {
			return nil, errs.WithPath(err, op, path)
		}
		next := node{ref: Ref{Ino: a.Ino, Parent: cur.ref.Ino, Name: name}, attr: a}
		last := i == len(parts)-1
		if core.IsSymlink(a.Mode) && (!last || follow) {
			if r.links++; r.links > maxSymlinks {
				return nil, &errs.Error{Kind: errs.Loop, Op: op, Path: path}
			}
			target, err := r.c.Readlink(r.ctx, next.ref)
			if err != nil {
				return nil, errs.WithPath(err, op, path)
			}
			tparts, _, err := splitPath(op, target)
			if err != nil {
				return nil, err
			}
			base := stack
			if strings.HasPrefix(target, "/") {
				base = stack[:1]
			}
			base = append([]node(nil), base...)
			stack, err = r.walk(op, path, base, tparts, true)
			if err != nil {
				return nil, err
			}
			continue
		}
		stack = append(stack, next)
	}
	return stack, nil
}

// rootStack starts a walk at the root. The root's attributes are not
// fetched: it is always a directory, and stat of "/" asks for them.
func (c *Client) rootStack(context.Context) ([]node, error) {
	n := rootNode
	n.attr = core.Attr{Ino: core.RootIno, Mode: core.ModeDir | 0o755}
	return []node{n}, nil
}

// resolve returns the node path names.
func (c *Client) resolve(ctx context.Context, op, path string, follow bool) (node, error) {
	parts, dirOnly, err := splitPath(op, path)
	if err != nil {
		return node{}, err
	}
	stack, err := c.rootStack(ctx)
	if err != nil {
		return node{}, err
	}
	r := &resolver{c: c, ctx: ctx}
	stack, err = r.walk(op, path, stack, parts, follow || dirOnly)
	if err != nil {
		return node{}, err
	}
	n := stack[len(stack)-1]
	if dirOnly && !n.attr.IsDir() {
		return node{}, &errs.Error{Kind: errs.NotDir, Op: op, Path: path}
	}
	return n, nil
}

// resolveParent returns the directory that holds path's last component and
// that component's name. The name is never "." or ".." (Invalid / the
// operation's own error), and the root has no parent (Busy for removal,
// Exist for creation: callers say which).
func (c *Client) resolveParent(ctx context.Context, op, path string) (node, string, error) {
	parts, _, err := splitPath(op, path)
	if err != nil {
		return node{}, "", err
	}
	if len(parts) == 0 {
		return node{}, "", &errs.Error{Kind: errs.Busy, Op: op, Path: path, Msg: "the root has no parent"}
	}
	name := parts[len(parts)-1]
	stack, err := c.rootStack(ctx)
	if err != nil {
		return node{}, "", err
	}
	r := &resolver{c: c, ctx: ctx}
	stack, err = r.walk(op, path, stack, parts[:len(parts)-1], true)
	if err != nil {
		return node{}, "", err
	}
	dir := stack[len(stack)-1]
	if !dir.attr.IsDir() {
		return node{}, "", &errs.Error{Kind: errs.NotDir, Op: op, Path: path}
	}
	if name == "." || name == ".." {
		return dir, name, &errs.Error{Kind: errs.Invalid, Op: op, Path: path, Msg: "last component is . or .."}
	}
	return dir, name, nil
}
