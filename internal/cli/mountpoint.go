package cli

// Checks of a mount point before weft mounts on it: a mount left behind by
// a killed weft is cleared, a directory that is not empty is warned about.

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/fusefs"
)

// prepareMountPoint checks that weft can mount on mnt. A weft mount whose
// process is gone (kill -9 leaves one: every access fails with "transport
// endpoint is not connected") is detached, since nobody can use it; any
// other mount there is refused. A directory that is not empty gets a
// warning: its files are hidden while weft is mounted over them.
func (a *app) prepareMountPoint(cmd *cobra.Command, mnt string) error {
	err := fusefs.CheckMountPoint(mnt)
	if errs.Is(err, errs.Busy) && fusefs.Mounted(mnt) && fusefs.Stale(mnt) {
		if uerr := fusefs.Unmount(mnt); uerr != nil {
			return errs.Wrap(errs.Busy, "mount", mnt, fmt.Errorf("clearing the stale weft mount there: %w", uerr))
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "weft: cleared a stale weft mount on %s (its process was gone)\n", mnt)
		err = fusefs.CheckMountPoint(mnt)
	}
	if err != nil {
		return err
	}
	if n := dirEntries(mnt); n > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "weft: warning: %s is not empty; its %s hidden while weft is mounted on it\n",
			mnt, plural(n, "entry is", "entries are"))
	}
	return nil
}

// dirEntries counts the entries of dir, stopping at 100.
func dirEntries(dir string) int {
	f, err := os.Open(dir)
	if err != nil {
		return 0
	}
	defer f.Close()
	names, err := f.Readdirnames(100)
	if err != nil && err != io.EOF {
		return 0
	}
	return len(names)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	if n >= 100 {
		return "100 or more " + many
	}
	return fmt.Sprintf("%d %s", n, many)
}
