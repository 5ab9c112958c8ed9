// Package cli holds weft's command line: the cobra command tree, its flags,
// and how commands turn flags and the cluster file into running servers or
// client calls. It owns no behaviour of its own beyond that: servers come from
// package cluster, file operations from package client.
//
// Commands return errors and never exit the process; cmd/weft maps the error
// to an exit code with ExitCode (the table is in docs/cli.md). Output for
// people goes to the command's stdout, logs to its stderr: JSON for servers
// (weft up, meta, store), text for everything else.
package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/config"
)

// ClusterEnv is the environment variable that names the cluster file when
// --cluster is not given.
const ClusterEnv = "WEFT_CLUSTER"

// app is what every command shares: the values of the persistent flags.
// It lives in NewRoot, never in package variables, so tests can build as
// many command trees as they like.
type app struct {
	logLevel    string
	clusterPath string
	identity    string     // --identity: replaces the cluster file's admin_identity (identity.go)
	level       slog.Level // parsed from logLevel before any command runs
	self        string     // how to run this binary again, for hints: "weft" or "bin/weft"
}

// NewRoot returns the weft command tree.
func NewRoot() *cobra.Command {
	a := &app{self: invokedAs(os.Args[0])}
	root := &cobra.Command{
		Use:   "weft",
		Short: "weft is a distributed POSIX file system",
		Long: "weft is a distributed POSIX file system: metadata servers, storage servers\n" +
			"and clients, described by one cluster file.\n\n" +
			"Start here: 'weft up' runs a complete single-machine cluster.",
		SilenceErrors:              true, // cmd/weft prints the error once
		SilenceUsage:               true, // a failing command should not print its usage
		SuggestionsMinimumDistance: 2,
		Args:                       unknownCommand,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := a.level.UnmarshalText([]byte(a.logLevel)); err != nil {
				return usageErrorf(cmd, "--log-level %q is not one of debug, info, warn, error", a.logLevel)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError(cmd, err)
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	// --cluster is accepted anywhere on the command line (weft --cluster F
	// ls), but listed only in the help of the commands that read it
	// (addClusterFlag): elsewhere it would be a flag that does nothing.
	pf.StringVar(&a.clusterPath, "cluster", os.Getenv(ClusterEnv), clusterFlagUsage)
	_ = pf.MarkHidden("cluster")
	pf.StringVar(&a.identity, "identity", os.Getenv(IdentityEnv), identityFlagUsage)
	_ = pf.MarkHidden("identity")

	for _, newCmd := range []func(*app) *cobra.Command{
		newUpCommand,
		newVersionCommand,
		newUmountCommand,
		newClusterCommand,
		newDownCommand,
		newBenchCommand,
		newCACommand,
		newPGCommand,
		newEdgeCommand,
	} {
		root.AddCommand(newCmd(a))
	}
	// The commands that read the cluster file of --cluster.
	for _, newCmd := range []func(*app) *cobra.Command{
		newMetaCommand,
		newStoreCommand,
		newMountCommand,
		newStatusCommand,
		newFsckCommand,
		newRepairCommand,
		newGCCommand,
	} {
		root.AddCommand(a.addClusterFlag(newCmd(a)))
	}
	addFileCommands(root, a)
	markArgErrorsAsUsage(root)
	return root
}

// markArgErrorsAsUsage makes every command's argument check return a usage
// error (exit code 2), whichever cobra validator the command uses
// (cobra.ExactArgs and friends return plain errors).
func markArgErrorsAsUsage(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			err := check(c, args)
			var ue *usageErr
			if err == nil || errors.As(err, &ue) {
				return err
			}
			return usageError(c, err)
		}
	}
	for _, sub := range cmd.Commands() {
		markArgErrorsAsUsage(sub)
	}
}

// serverLogger returns the JSON logger of a server process.
func (a *app) serverLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: a.level}))
}

// cliLogger returns the text logger of a client command.
func (a *app) cliLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: a.level}))
}

const clusterFlagUsage = "cluster file (default $" + ClusterEnv + "; weft up prints it)"

// addClusterFlag gives cmd a --cluster flag of its own, so that its help
// lists it: a command that reads the cluster file through loadCluster("")
// calls it. The flag sets the same value as the root's hidden one.
func (a *app) addClusterFlag(cmd *cobra.Command) *cobra.Command {
	cmd.Flags().StringVar(&a.clusterPath, "cluster", os.Getenv(ClusterEnv), clusterFlagUsage)
	cmd.Flags().StringVar(&a.identity, "identity", os.Getenv(IdentityEnv), identityFlagUsage)
	return cmd
}

// loadCluster reads the cluster file named by path, or by --cluster (or
// $WEFT_CLUSTER) if path is empty, with --identity applied.
func (a *app) loadCluster(path string) (*config.Cluster, error) {
	c, err := a.loadClusterFile(path)
	if err != nil {
		return nil, err
	}
	a.applyIdentity(c)
	return c, nil
}

// loadClusterFile reads the cluster file as loadCluster does, as written.
func (a *app) loadClusterFile(path string) (*config.Cluster, error) {
	if path == "" {
		path = a.clusterPath
	}
	if path == "" {
		return nil, &configError{err: fmt.Errorf("no cluster file: pass --cluster FILE or set %s (weft up prints the path)", ClusterEnv)}
	}
	c, err := config.Load(path)
	if err != nil {
		return nil, &configError{err: err}
	}
	return c, nil
}

// unknownCommand rejects positional arguments to the root, which can only be
// a misspelt command.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q", args[0])
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageErrorf(cmd, "%s", msg)
}

// noArgs rejects positional arguments of a command that takes none.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf(cmd, "unexpected argument %q", args[0])
	}
	return nil
}

// invokedAs is how the user ran weft, for the commands that hints print:
// "weft" when that finds this binary on $PATH, else the path it was run by
// (make up runs bin/weft).
func invokedAs(arg0 string) string {
	base := filepath.Base(arg0)
	if !strings.ContainsRune(arg0, '/') {
		return shellQuote(arg0)
	}
	if onPath, err := exec.LookPath(base); err == nil && sameFile(onPath, arg0) {
		return shellQuote(base)
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, arg0); err == nil && !strings.HasPrefix(rel, "..") && filepath.IsAbs(arg0) {
			arg0 = "./" + rel
		}
	}
	return shellQuote(arg0)
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// defaultDataDir is where weft up keeps its data unless told otherwise.
func defaultDataDir() string {
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".weft")
	}
	return filepath.Join(os.TempDir(), "weft-data")
}
