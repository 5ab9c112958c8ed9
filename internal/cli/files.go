package cli

// This file holds the file-tool commands (put, get, ls, stat, mkdir, rm, mv):
// they work through the client library, without FUSE.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

func addFileCommands(root *cobra.Command, a *app) {
	for _, newCmd := range []func(*app) *cobra.Command{
		newPutCommand, newGetCommand, newLsCommand, newStatCommand,
		newMkdirCommand, newRmCommand, newMvCommand, newBenchCommand,
	} {
		root.AddCommand(newCmd(a))
	}
}

// newClient connects to the cluster named by --cluster as the calling user.
func (a *app) newClient(cmd *cobra.Command) (*client.Client, error) {
	cfg, err := a.loadCluster("")
	if err != nil {
		return nil, err
	}
	groups, _ := os.Getgroups()
	creds := core.Creds{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	for _, g := range groups {
		creds.Groups = append(creds.Groups, uint32(g))
	}
	return client.New(cluster.ClientConfig(cfg, creds, a.cliLogger(cmd.ErrOrStderr())))
}

// withClient runs fn with a connected client and closes it after.
func (a *app) withClient(cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) error) error {
	c, err := a.newClient(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(cmd.Context(), c)
}

// progress returns what draws a byte progress bar on stderr when it is a
// terminal (told each number of bytes copied), and nil otherwise (bars would
// flood logs).
func progress(cmd *cobra.Command, size int64, desc string) func(int64) {
	f, ok := cmd.ErrOrStderr().(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) || size < 8<<20 {
		return nil
	}
	bar := progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(f),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	return func(n int64) { bar.Add64(n) }
}

func newPutCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "put LOCAL PATH",
		Short: "Copy a local file into weft (PATH may be a directory)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				return put(ctx, cmd, c, args[0], args[1])
			})
		},
	}
}

func put(ctx context.Context, cmd *cobra.Command, c *client.Client, local, dst string) error {
	src, err := os.Open(local)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if a, err := c.Stat(ctx, dst); err == nil && a.IsDir() {
		dst = path.Join(dst, filepath.Base(local))
	}
	_, err = c.WriteFrom(ctx, dst, src, uint32(st.Mode().Perm()), progress(cmd, st.Size(), "put "+dst))
	return err
}

func newGetCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "get PATH LOCAL",
		Short: "Copy a file out of weft (LOCAL - writes to stdout)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				return get(ctx, cmd, c, args[0], args[1])
			})
		},
	}
}

func get(ctx context.Context, cmd *cobra.Command, c *client.Client, src, local string) error {
	st, err := c.Stat(ctx, src)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return &errs.Error{Kind: errs.IsDir, Op: "get", Path: src}
	}
	var out io.Writer = cmd.OutOrStdout()
	var file *os.File
	if local != "-" {
		if fi, err := os.Stat(local); err == nil && fi.IsDir() {
			local = filepath.Join(local, path.Base(src))
		}
		if file, err = os.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, os.FileMode(st.Mode&core.ModePerm)); err != nil {
			return err
		}
		out = file
	}
	_, err = c.ReadTo(ctx, src, out, progress(cmd, int64(st.Size), "get "+src))
	if file != nil {
		if cerr := file.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

func newLsCommand(a *app) *cobra.Command {
	var long bool
	cmd := &cobra.Command{
		Use:   "ls [-l] [PATH]",
		Short: "List a directory",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := "/"
			if len(args) == 1 {
				p = args[0]
			}
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				return ls(ctx, cmd.OutOrStdout(), c, p, long)
			})
		},
	}
	cmd.Flags().BoolVarP(&long, "long", "l", false, "long listing: mode, links, owner, size, mtime")
	return cmd
}

func ls(ctx context.Context, out io.Writer, c *client.Client, p string, long bool) error {
	a, err := c.Stat(ctx, p)
	if err != nil {
		return err
	}
	if !a.IsDir() {
		return printEntry(out, path.Base(p), a, long)
	}
	// The listing streams in the directory's own order (unsorted, as
	// ls -U), so a directory of millions of names needs no more memory
	// than a page of them; long listings align their columns per block.
	const block = 1024
	tw := tabwriter.NewWriter(out, 0, 4, 1, ' ', tabwriter.AlignRight)
	n := 0
	err = c.ReadDirAt(ctx, a.Ino, long, func(e core.DirEntry) error {
		attr := core.Attr{Ino: e.Ino, Mode: e.Mode}
		if e.Attr != nil {
			attr = *e.Attr
		}
		if err := printEntry(tw, e.Name, attr, long); err != nil {
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

func printEntry(out io.Writer, name string, a core.Attr, long bool) error {
	if !long {
		_, err := fmt.Fprintln(out, name)
		return err
	}
	_, err := fmt.Fprintf(out, "%s\t%d\t%d\t%d\t%d\t %s\t %s\n", modeString(a.Mode), a.Nlink, a.UID, a.GID,
		a.Size, a.Mtime.Format("2006-01-02 15:04"), name)
	return err
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

func newStatCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "stat PATH",
		Short: "Show a file's attributes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				st, err := c.Lstat(ctx, args[0])
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				fmt.Fprintf(out, "  File: %s\n", args[0])
				fmt.Fprintf(out, "  Size: %d\tBlocks: %d\tInode: %d\tLinks: %d\n", st.Size, st.Blocks(), st.Ino, st.Nlink)
				fmt.Fprintf(out, "Access: (%04o/%s)\tUid: %d\tGid: %d\n", st.Mode&core.ModeBits, modeString(st.Mode), st.UID, st.GID)
				for _, t := range []struct {
					n string
					v time.Time
				}{{"Access", st.Atime}, {"Modify", st.Mtime}, {"Change", st.Ctime}} {
					fmt.Fprintf(out, "%s: %s\n", t.n, t.v.Format("2006-01-02 15:04:05.000000000 -0700"))
				}
				return nil
			})
		},
	}
}

func newMkdirCommand(a *app) *cobra.Command {
	var parents bool
	cmd := &cobra.Command{
		Use:   "mkdir [-p] PATH...",
		Short: "Create directories",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				for _, p := range args {
					var err error
					if parents {
						err = c.MkdirAll(ctx, p, 0o755)
					} else {
						err = c.Mkdir(ctx, p, 0o755)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create missing parents; no error if the directory exists")
	return cmd
}

func newRmCommand(a *app) *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "rm [-r] PATH...",
		Short: "Remove files (and, with -r, directories and their contents)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				for _, p := range args {
					var err error
					if recursive {
						if _, err = c.Lstat(ctx, p); err == nil {
							err = c.RemoveAll(ctx, p)
						}
					} else {
						err = c.Unlink(ctx, p)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove directories and their contents")
	return cmd
}

func newMvCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "mv SRC DST",
		Short: "Rename or move a file or directory (DST may be a directory)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				src, dst := args[0], args[1]
				if st, err := c.Stat(ctx, dst); err == nil && st.IsDir() {
					dst = path.Join(dst, path.Base(src))
				}
				return c.Rename(ctx, src, dst, 0)
			})
		},
	}
}
