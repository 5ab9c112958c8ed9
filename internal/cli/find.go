package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/search"
)

const findLong = `Search the file system's metadata, as GNU find does, on the meta servers'
indexes: every meta server is asked in parallel, and the matches stream back.

Tests (combined with AND; -a and -and are accepted): -name PATTERN, -iname,
-path PATTERN, -ipath, -type f|d|l|b|c|p|s (or a list: f,l), -size [+-]N[cwbkMG],
-mtime [+-]N, -mmin [+-]N, -newer FILE, -user NAME|UID, -group NAME|GID, -uid N,
-gid N, -perm MODE|-MODE|/MODE (octal or symbolic), -xattr NAME (has the
extended attribute). Output: one path per line (-print), -print0, -ls, --json.
PATH and FILE are paths in the file system. docs/cli.md has the details.`

func newFindCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "find [PATH...] [TESTS] [-print0|-ls|--json]",
		Short: "Find files by name, type, size, times, owner, mode or extended attribute",
		Long:  findLong,
		// find's tests look like flags: the arguments are parsed here.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			args, help, err := a.findOwnFlags(args)
			if err != nil || help {
				if help {
					return cmd.Help()
				}
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				return runFind(ctx, cmd.OutOrStdout(), c, args)
			})
		},
	}
}

// findOwnFlags takes weft's own flags (--cluster, --identity, --help) out of
// find's arguments.
func (a *app) findOwnFlags(args []string) (rest []string, help bool, err error) {
	for i := 0; i < len(args); i++ {
		arg := args[i]
		name, val, hasVal := strings.Cut(arg, "=")
		switch name {
		case "--cluster", "--identity":
			if !hasVal {
				if i+1 >= len(args) {
					return nil, false, errs.New(errs.Invalid, "find", "%s needs a value", name)
				}
				i++
				val = args[i]
			}
			if name == "--cluster" {
				a.clusterPath = val
			} else {
				a.identity = val
			}
		case "-h", "--help", "-help":
			return nil, true, nil
		default:
			rest = append(rest, arg)
		}
	}
	return rest, false, nil
}

// findEnv is what parsing find's tests needs from the system and the file
// system.
func findEnv(ctx context.Context, c *client.Client) search.Env {
	return search.Env{
		NowNs: time.Now().UnixNano(),
		LookupUser: func(name string) (uint32, bool) {
			u, err := user.Lookup(name)
			if err != nil {
				return 0, false
			}
			id, err := strconv.ParseUint(u.Uid, 10, 32)
			return uint32(id), err == nil
		},
		LookupGroup: func(name string) (uint32, bool) {
			g, err := user.LookupGroup(name)
			if err != nil {
				return 0, false
			}
			id, err := strconv.ParseUint(g.Gid, 10, 32)
			return uint32(id), err == nil
		},
		MtimeOf: func(p string) (int64, error) {
			a, err := c.Lstat(ctx, p)
			if err != nil {
				return 0, err
			}
			return a.Mtime.UnixNano(), nil
		},
	}
}

func runFind(ctx context.Context, out io.Writer, c *client.Client, args []string) error {
	e, err := search.Parse(args, findEnv(ctx, c))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(out)
	pr := &findPrinter{w: w, e: e, c: c, names: newOwnerNames(), now: time.Now()}
	for _, p := range e.Paths {
		if err := c.Find(ctx, p, &e.Query, func(r client.FindResult) error { return pr.print(ctx, r) }); err != nil {
			w.Flush()
			return err
		}
	}
	return w.Flush()
}

// findPrinter writes results in the chosen form.
type findPrinter struct {
	w     *bufio.Writer
	e     *search.Expr
	c     *client.Client
	names *ownerNames
	now   time.Time
}

func (p *findPrinter) print(ctx context.Context, r client.FindResult) error {
	switch {
	case p.e.JSON:
		return p.json(r)
	case p.e.Ls:
		return p.ls(ctx, r)
	case p.e.Print0:
		p.w.WriteString(r.Path)
		return p.w.WriteByte(0)
	}
	p.w.WriteString(r.Path)
	return p.w.WriteByte('\n')
}

// findJSON is one line of --json.
type findJSON struct {
	Path  string `json:"path"`
	Ino   uint64 `json:"ino"`
	Type  string `json:"type"`
	Mode  string `json:"mode"`
	Nlink uint32 `json:"nlink"`
	UID   uint32 `json:"uid"`
	GID   uint32 `json:"gid"`
	Size  uint64 `json:"size"`
	Mtime string `json:"mtime"`
	Ctime string `json:"ctime"`
}

func (p *findPrinter) json(r client.FindResult) error {
	a := r.Attr
	b, err := json.Marshal(findJSON{
		Path: r.Path, Ino: uint64(a.Ino), Type: modeString(a.Mode)[:1], Mode: fmt.Sprintf("%04o", a.Mode&core.ModeBits),
		Nlink: a.Nlink, UID: a.UID, GID: a.GID, Size: a.Size,
		Mtime: a.Mtime.Format(time.RFC3339Nano), Ctime: a.Ctime.Format(time.RFC3339Nano),
	})
	if err != nil {
		return errs.Wrap(errs.Invalid, "find", r.Path, err)
	}
	p.w.Write(b)
	return p.w.WriteByte('\n')
}

// ls writes GNU find's -ls line: inode, 1 KiB blocks, mode, links, owner,
// group, size, mtime (with the year instead of the time past six months),
// path, and a symlink's target.
func (p *findPrinter) ls(ctx context.Context, r client.FindResult) error {
	a := r.Attr
	when := a.Mtime.Local()
	stamp := when.Format("Jan _2 15:04")
	if when.Before(p.now.Add(-31556952/2*time.Second)) || when.After(p.now) {
		stamp = when.Format("Jan _2  2006")
	}
	size := strconv.FormatUint(a.Size, 10)
	if t := a.Mode & core.ModeType; t == core.ModeChar || t == core.ModeBlock {
		size = fmt.Sprintf("%d, %d", a.Rdev>>8&0xfff, a.Rdev&0xff|a.Rdev>>12&0xfff00)
	}
	fmt.Fprintf(p.w, "%9d %6d %s %3d %-8s %-8s %8s %s %s", a.Ino, (a.Blocks()+1)/2, modeString(a.Mode), a.Nlink,
		p.names.user(a.UID), p.names.group(a.GID), size, stamp, r.Path)
	if core.IsSymlink(a.Mode) {
		target, err := p.c.Readlink(ctx, r.Ref)
		if err != nil {
			return err
		}
		p.w.WriteString(" -> " + target)
	}
	return p.w.WriteByte('\n')
}
