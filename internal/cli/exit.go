package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/errs"
)

// Exit codes of the weft binary. They are a contract with scripts: keep them
// stable and keep docs/cli.md in step.
const (
	ExitOK          = 0   // success
	ExitFailure     = 1   // any other failure
	ExitUsage       = 2   // bad command, flag or argument
	ExitConfig      = 3   // the cluster file is missing or invalid
	ExitUnavailable = 4   // a server could not be reached or did not answer in time
	ExitNotExist    = 5   // no such file or directory
	ExitPermission  = 6   // permission denied or operation not permitted
	ExitExist       = 7   // the file or directory already exists
	ExitStorage     = 8   // a server's storage failed: its disk is full or failing
	ExitInterrupted = 130 // stopped by a signal before finishing (128 + SIGINT)
)

// ExitCode maps an error returned by a weft command to the process exit
// code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ue *usageErr
	if errors.As(err, &ue) {
		return ExitUsage
	}
	var ce *configError
	if errors.As(err, &ce) {
		return ExitConfig
	}
	var se *storageError
	if errors.As(err, &se) {
		return ExitStorage
	}
	switch kindForExit(err) {
	case errs.Unavailable, errs.Timeout:
		return ExitUnavailable
	case errs.NotExist:
		return ExitNotExist
	case errs.Permission, errs.NotPermitted:
		return ExitPermission
	case errs.Exist:
		return ExitExist
	case errs.Canceled:
		return ExitInterrupted
	}
	return ExitFailure
}

// kindForExit is the kind of err, also for errors that carry none: those of
// the local file system (a missing local file is "no such file" as much as a
// missing weft path) and of the context.
func kindForExit(err error) errs.Kind {
	if k := errs.KindOf(err); k != errs.Other {
		return k
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errs.NotExist
	case errors.Is(err, fs.ErrPermission):
		return errs.Permission
	case errors.Is(err, fs.ErrExist):
		return errs.Exist
	case errors.Is(err, context.Canceled):
		return errs.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return errs.Timeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return errs.Unavailable
	}
	return errs.Other
}

// usageErr is a mistake in how weft was invoked.
type usageErr struct {
	path string // command path, "weft up"
	err  error
}

func (e *usageErr) Error() string {
	return fmt.Sprintf("%v\nRun '%s --help' for usage.", e.err, e.path)
}

func (e *usageErr) Unwrap() error { return e.err }

func usageError(cmd *cobra.Command, err error) error {
	return &usageErr{path: cmd.CommandPath(), err: errs.Wrap(errs.Invalid, "", "", err)}
}

func usageErrorf(cmd *cobra.Command, format string, args ...any) error {
	return usageError(cmd, fmt.Errorf(format, args...))
}

// configError is a missing or invalid cluster file.
type configError struct {
	err error
}

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// storageError is a server that could not start or go on because its disk
// is full or failing. Its own exit code lets a supervisor stop restarting
// it until someone fixes the disk.
type storageError struct {
	err error
}

func (e *storageError) Error() string { return e.err.Error() }
func (e *storageError) Unwrap() error { return e.err }

// asStorageError marks a server's start or stop error as a storage failure
// when its kind says so.
func asStorageError(err error) error {
	switch errs.KindOf(err) {
	case errs.NoSpace, errs.IO, errs.Corrupt:
		return &storageError{err: err}
	}
	return err
}
