package cli

// weft ls: a directory listing sorted by name, as ls(1) shows it, with
// owners by name.

import (
	"context"
	"fmt"
	"io"
	"os/user"
	"path"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

func newLsCommand(a *app) *cobra.Command {
	var f lsFlags
	cmd := &cobra.Command{
		Use:   "ls [-l] [-U] [PATH]",
		Short: "List a directory, sorted by name",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := "/"
			if len(args) == 1 {
				p = args[0]
			}
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				return ls(ctx, cmd.OutOrStdout(), c, p, f)
			})
		},
	}
	cmd.Flags().BoolVarP(&f.long, "long", "l", false, "long listing: mode, links, owner, group, size, mtime")
	cmd.Flags().BoolVarP(&f.unsorted, "unsorted", "U", false, "list in the directory's own order as it streams in (for directories of millions of names)")
	return cmd
}

type lsFlags struct {
	long     bool
	unsorted bool
}

func ls(ctx context.Context, out io.Writer, c *client.Client, p string, f lsFlags) error {
	a, err := c.Stat(ctx, p)
	if err != nil {
		return err
	}
	names := newOwnerNames()
	if !a.IsDir() {
		tw := tabwriter.NewWriter(out, 0, 4, 1, ' ', tabwriter.AlignRight)
		if err := printEntry(tw, path.Base(p), a, f.long, names); err != nil {
			return err
		}
		return tw.Flush()
	}
	if f.unsorted {
		return lsStream(ctx, out, c, p, a.Ino, f.long, names)
	}
	var entries []core.DirEntry
	err = c.ReadDirAt(ctx, a.Ino, f.long, func(e core.DirEntry) error {
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return errs.WithPath(err, "ls", p)
	}
	// Byte order, as ls in the C locale: names need not be UTF-8.
	slices.SortFunc(entries, func(x, y core.DirEntry) int { return strings.Compare(x.Name, y.Name) })
	tw := tabwriter.NewWriter(out, 0, 4, 1, ' ', tabwriter.AlignRight)
	for _, e := range entries {
		if err := printEntry(tw, e.Name, entryAttr(e), f.long, names); err != nil {
			return err
		}
	}
	return tw.Flush()
}

// lsStream lists in the directory's own order (as ls -U), so a directory of
// millions of names needs no more memory than a page of them; long listings
// align their columns per block.
func lsStream(ctx context.Context, out io.Writer, c *client.Client, p string, dir core.Ino, long bool, names *ownerNames) error {
	const block = 1024
	tw := tabwriter.NewWriter(out, 0, 4, 1, ' ', tabwriter.AlignRight)
	n := 0
	err := c.ReadDirAt(ctx, dir, long, func(e core.DirEntry) error {
		if err := printEntry(tw, e.Name, entryAttr(e), long, names); err != nil {
			return err
		}
		if n++; n%block == 0 {
			return tw.Flush()
		}
		return nil
	})
	if err != nil {
		return errs.WithPath(err, "ls", p)
	}
	return tw.Flush()
}

func entryAttr(e core.DirEntry) core.Attr {
	if e.Attr != nil {
		return *e.Attr
	}
	return core.Attr{Ino: e.Ino, Mode: e.Mode}
}

func printEntry(out io.Writer, name string, a core.Attr, long bool, names *ownerNames) error {
	if !long {
		_, err := fmt.Fprintln(out, name)
		return err
	}
	_, err := fmt.Fprintf(out, "%s\t%d\t %s\t %s\t%d\t %s\t %s\n", modeString(a.Mode), a.Nlink,
		names.user(a.UID), names.group(a.GID), a.Size, a.Mtime.Format("2006-01-02 15:04"), name)
	return err
}

// ownerNames looks up user and group names on this machine once per id,
// falling back to the number (as ls does for an id without a name).
type ownerNames struct {
	users, groups map[uint32]string
}

func newOwnerNames() *ownerNames {
	return &ownerNames{users: map[uint32]string{}, groups: map[uint32]string{}}
}

func (o *ownerNames) user(uid uint32) string {
	return cachedName(o.users, uid, func(id string) (string, error) {
		u, err := user.LookupId(id)
		if err != nil {
			return "", err
		}
		return u.Username, nil
	})
}

func (o *ownerNames) group(gid uint32) string {
	return cachedName(o.groups, gid, func(id string) (string, error) {
		g, err := user.LookupGroupId(id)
		if err != nil {
			return "", err
		}
		return g.Name, nil
	})
}

// cachedName returns id's name from cache, looking it up once; an id
// without a name is shown as its number.
func cachedName(cache map[uint32]string, id uint32, lookup func(id string) (string, error)) string {
	if n, ok := cache[id]; ok {
		return n
	}
	n := strconv.FormatUint(uint64(id), 10)
	if name, err := lookup(n); err == nil && name != "" {
		n = name
	}
	cache[id] = n
	return n
}

// modeString renders a mode as ls -l does (drwxr-xr-x).
func modeString(mode uint32) string {
	b := []byte("?rwxrwxrwx")
	switch mode & core.ModeType {
	case core.ModeDir:
		b[0] = 'd'
	case core.ModeFile:
		b[0] = '-'
	case core.ModeLink:
		b[0] = 'l'
	case core.ModeFIFO:
		b[0] = 'p'
	case core.ModeSocket:
		b[0] = 's'
	case core.ModeChar:
		b[0] = 'c'
	case core.ModeBlock:
		b[0] = 'b'
	}
	for i := range 9 {
		if mode&(1<<(8-i)) == 0 {
			b[i+1] = '-'
		}
	}
	if mode&core.ModeSetuid != 0 {
		b[3] = "Ss"[boolInt(mode&0o100 != 0)]
	}
	if mode&core.ModeSetgid != 0 {
		b[6] = "Ss"[boolInt(mode&0o010 != 0)]
	}
	if mode&core.ModeSticky != 0 {
		b[9] = "Tt"[boolInt(mode&0o001 != 0)]
	}
	return string(b)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
