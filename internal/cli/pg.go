package cli

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"unsafe"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/fusefs"
)

// PGControlEnv names a mount's patchgroup control file, as for the C header
// and the Python module.
const PGControlEnv = "WEFT_PG_CTL"

func newPGCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pg",
		Short: "Patchgroups for programs on a mount (write ordering without fsync)",
		Long: "Patchgroups order a program's changes for crash consistency without an fsync per step\n" +
			"(Featherstitch). Programs use include/weft_pg.h or python/weft_pg.py; these commands\n" +
			"wrap programs that know nothing of them.",
	}
	var mount string
	depend := &cobra.Command{
		Use:   "depend CMD1 CMD2",
		Short: "Run CMD1, then CMD2, so that none of CMD2's changes becomes durable before CMD1's",
		Long: "Run the shell command CMD1 in one patchgroup and then CMD2 in a second that depends on\n" +
			"it (the paper's depend tool): after a crash, a change of CMD2 is there only if every\n" +
			"change of CMD1 is. The commands' own child processes belong to their group too.\n" +
			"The mount is found from --mount, else " + PGControlEnv + ", else by walking up from the\n" +
			"current directory. The exit status is CMD2's (or CMD1's if it fails: CMD2 then does\n" +
			"not run).",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctl, err := openPGControl(mount)
			if err != nil {
				return err
			}
			defer ctl.Close()
			return pgDepend(cmd, ctl, args[0], args[1])
		},
	}
	depend.Flags().StringVar(&mount, "mount", "", "the weft mount (default: the one the current directory is in)")
	cmd.AddCommand(depend)
	return cmd
}

// pgDepend runs cmd1 engaged in one group and cmd2 in a second that
// depends on it.
func pgDepend(cmd *cobra.Command, ctl *os.File, cmd1, cmd2 string) error {
	first, err := pgCreate(ctl)
	if err != nil {
		return err
	}
	defer pgCall(ctl, fusefs.PGIoctlClose, first)
	second, err := pgCreate(ctl)
	if err != nil {
		return err
	}
	defer pgCall(ctl, fusefs.PGIoctlClose, second)
	if err := runEngaged(cmd, ctl, first, cmd1); err != nil {
		return err
	}
	if err := pgDependOn(ctl, second, first); err != nil {
		return err
	}
	return runEngaged(cmd, ctl, second, cmd2)
}

// runEngaged runs the shell command line with group engaged by this
// process, which its children inherit.
func runEngaged(cmd *cobra.Command, ctl *os.File, group uint64, line string) error {
	if err := pgCall(ctl, fusefs.PGIoctlEngage, group); err != nil {
		return err
	}
	defer pgCall(ctl, fusefs.PGIoctlDisengage, group)
	c := exec.CommandContext(cmd.Context(), "/bin/sh", "-c", line)
	c.Stdin, c.Stdout, c.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := c.Run(); err != nil {
		return errs.Wrap(errs.IO, "pg depend", line, err)
	}
	return nil
}

// openPGControl opens the control file of the mount at mount, or of the
// one WEFT_PG_CTL names, or of the one the current directory is in.
func openPGControl(mount string) (*os.File, error) {
	var path string
	switch {
	case mount != "":
		path = filepath.Join(mount, fusefs.PatchgroupControl)
	case os.Getenv(PGControlEnv) != "":
		path = os.Getenv(PGControlEnv)
	default:
		dir, err := os.Getwd()
		if err != nil {
			return nil, errs.Wrap(errs.IO, "pg", "", err)
		}
		for {
			p := filepath.Join(dir, fusefs.PatchgroupControl)
			if _, err := os.Stat(p); err == nil {
				path = p
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				return nil, errs.New(errs.NotExist, "pg", "the current directory is not in a weft mount: give --mount or set %s", PGControlEnv)
			}
			dir = parent
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, errs.Wrap(kindForExit(err), "pg", path, err)
	}
	return f, nil
}

func pgCreate(ctl *os.File) (uint64, error) {
	var out [8]byte
	if err := pgIoctl(ctl, fusefs.PGIoctlCreate, out[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(out[:]), nil
}

func pgDependOn(ctl *os.File, after, before uint64) error {
	var in [16]byte
	binary.LittleEndian.PutUint64(in[:], after)
	binary.LittleEndian.PutUint64(in[8:], before)
	return pgIoctl(ctl, fusefs.PGIoctlDepend, in[:])
}

func pgCall(ctl *os.File, cmd uint32, group uint64) error {
	var in [8]byte
	binary.LittleEndian.PutUint64(in[:], group)
	return pgIoctl(ctl, cmd, in[:])
}

// pgIoctl calls ioctl cmd on the control file with buf as its argument.
func pgIoctl(ctl *os.File, cmd uint32, buf []byte) error {
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, ctl.Fd(), uintptr(cmd), uintptr(unsafe.Pointer(&buf[0])))
	if e != 0 {
		return errs.Wrap(pgErrnoKind(e), "pg", ctl.Name(), e)
	}
	return nil
}

// pgErrnoKind is the kind of an errno the control file answers with.
func pgErrnoKind(e syscall.Errno) errs.Kind {
	switch e {
	case syscall.EBADF:
		return errs.BadHandle
	case syscall.EINVAL:
		return errs.Invalid
	case syscall.EBUSY:
		return errs.Busy
	case syscall.EACCES, syscall.EPERM:
		return errs.Permission
	case syscall.ENOENT:
		return errs.NotExist
	case syscall.ENOTTY:
		return errs.NotSupported
	}
	return errs.IO
}
