package cluster

// The record weft up keeps of itself in its data directory, so that
// weft down can stop it (weft up -d returns once it runs in the background).

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/weftfs/weft/internal/errs"
)

// UpRecordName is the file in a weft up data directory that names the
// process serving it while it runs.
const UpRecordName = "up.pid"

// UpRecord is what weft up records: its pid and start time (so a reused pid
// is never signalled) and the directory it mounted, if any.
type UpRecord struct {
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"start_time"` // /proc/PID/stat field 22
	Mount     string `json:"mount,omitempty"`
}

// WriteUpRecord records this process as the weft up serving dir. The
// returned function removes the record, if it is still this process's.
func WriteUpRecord(dir, mount string) (remove func(), err error) {
	const op = "record weft up"
	pid := os.Getpid()
	_, start, err := procStat(pid)
	if err != nil {
		return nil, errs.Wrap(errs.IO, op, "", err)
	}
	rec := UpRecord{Pid: pid, StartTime: start, Mount: mount}
	data, _ := json.Marshal(rec) // plain fields: cannot fail
	path := filepath.Join(dir, UpRecordName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return nil, errs.Wrap(errs.IO, op, tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, errs.Wrap(errs.IO, op, path, err)
	}
	return func() {
		if r, err := ReadUpRecord(dir); err == nil && *r == rec {
			os.Remove(path)
		}
	}, nil
}

// ReadUpRecord reads the record of the weft up that serves (or served) dir.
// It fails with errs.NotExist when there is none.
func ReadUpRecord(dir string) (*UpRecord, error) {
	path := filepath.Join(dir, UpRecordName)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, &errs.Error{Kind: errs.NotExist, Op: "read weft up record", Path: path, Err: err}
	}
	if err != nil {
		return nil, errs.Wrap(errs.IO, "read weft up record", path, err)
	}
	var r UpRecord
	if err := json.Unmarshal(data, &r); err != nil || r.Pid <= 0 {
		return nil, errs.New(errs.Corrupt, "read weft up record", "%s is not a weft up record", path)
	}
	return &r, nil
}

// Alive reports whether the recorded process still runs: same pid, same
// start time, and a weft up command line.
func (r *UpRecord) Alive() bool {
	return procAlive(r.Pid, r.StartTime, "", "up")
}

// RemoveUpRecord deletes the record of dir (after its process is gone).
func RemoveUpRecord(dir string) error {
	err := os.Remove(filepath.Join(dir, UpRecordName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return errs.Wrap(errs.IO, "remove weft up record", dir, err)
	}
	return nil
}
