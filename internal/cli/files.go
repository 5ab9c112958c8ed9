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
		newMkdirCommand, newRmCommand, newMvCommand, newFindCommand,
	} {
		root.AddCommand(a.addClusterFlag(newCmd(a)))
	}
}

// newClient connects to the cluster named by --cluster as the calling user.
func (a *app) newClient(cmd *cobra.Command) (*client.Client, error) {
	cfg, err := a.loadCluster("")
	if err != nil {
		return nil, err
	}
	if err := probeMeta(cmd.Context(), cfg); err != nil {
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
	return explainRefused(fn(cmd.Context(), c))
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
	// Refused before anything exists in weft: a directory's read fails
	// only after the destination was created.
	if st.IsDir() {
		return &errs.Error{Kind: errs.IsDir, Op: "put", Path: local, Msg: "put copies one file; a directory is not supported"}
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
				names := newOwnerNames()
				fmt.Fprintf(out, "Access: (%04o/%s)\tUid: (%d/%s)\tGid: (%d/%s)\n", st.Mode&core.ModeBits, modeString(st.Mode),
					st.UID, names.user(st.UID), st.GID, names.group(st.GID))
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
