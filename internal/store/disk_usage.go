package store

import (
	"context"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/weftfs/weft/internal/errs"
)

// storedBytesReporter is a backend that can tell the space its own chunks
// take, as opposed to Usage's Used, which for a disk is the whole file
// system's (what statfs on a mount must show).
type storedBytesReporter interface {
	StoredBytes(ctx context.Context) (uint64, error)
}

// StoredBytes walks the chunk directory and sums the space its files take
// on disk (allocated blocks, so holes cost nothing). It reads every inode
// directory: for weft status, not for every statfs.
func (d *diskBackend) StoredBytes(ctx context.Context) (uint64, error) {
	var n uint64
	err := filepath.WalkDir(d.dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return nil // removed during the walk
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			n += uint64(st.Blocks) * 512
		}
		return nil
	})
	if err != nil {
		return 0, errs.Wrap(errs.KindOf(err), "stored bytes", d.dir, err)
	}
	return n, nil
}
