package store

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/weftfs/weft/internal/errs"
)

// The data directory's marker, Dir/FORMAT, written when the store formats
// the directory:
//
//	weft store
//	format 2
//	id 0123456789abcdef0123456789abcdef
//	state complete
//
// id names this formatting of the directory: a replaced disk gets a new
// one, so that a repair which started on the old disk cannot mark the new
// one complete. state is "incomplete" while the store may lack chunks it
// should hold (it was formatted for a cluster that already held data, or
// its chunks directory vanished); it stays so across restarts until a full
// repair pass calls MarkComplete. The file is replaced whole (write to
// FORMAT.tmp, fsync, rename, fsync the directory), so a crash leaves the old
// or the new marker.

const (
	markerName   = "FORMAT"
	markerFormat = 2 // the chunk format this store writes
)

// marker is the parsed FORMAT file.
type marker struct {
	id         string
	incomplete bool
}

func (m marker) encode() []byte {
	state := "complete"
	if m.incomplete {
		state = "incomplete"
	}
	return fmt.Appendf(nil, "weft store\nformat %d\nid %s\nstate %s\n", markerFormat, m.id, state)
}

func parseMarker(b []byte) (marker, error) {
	var m marker
	lines := bufio.NewScanner(bytes.NewReader(b))
	seen := map[string]bool{}
	first := true
	for lines.Scan() {
		line := lines.Text()
		if first {
			if line != "weft store" {
				return m, fmt.Errorf("not a weft store marker")
			}
			first = false
			continue
		}
		key, val, _ := strings.Cut(line, " ")
		seen[key] = true
		switch key {
		case "format":
			if val != fmt.Sprint(markerFormat) {
				return m, fmt.Errorf("store format %s, this weft reads only format %d (move the data away and let repair refill the store)", val, markerFormat)
			}
		case "id":
			m.id = val
		case "state":
			if val != "complete" && val != "incomplete" {
				return m, fmt.Errorf("state %q", val)
			}
			m.incomplete = val == "incomplete"
		}
	}
	if !seen["format"] || !seen["state"] || m.id == "" {
		return m, fmt.Errorf("incomplete marker")
	}
	return m, nil
}

func newStoreID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// openMarker reads root's marker, or formats root if it has none and holds
// no chunks. replacement makes a newly formatted store incomplete. A marked
// directory whose chunks directory is gone lost its chunks: it becomes
// incomplete too. It runs with root's LOCK held, before the chunks
// directory is made.
func (d *diskBackend) openMarker(replacement bool) (marker, error) {
	const op = "open store"
	b, err := readFile(d.fs, filepath.Join(d.root, markerName))
	if errors.Is(err, fs.ErrNotExist) {
		return d.format(replacement)
	}
	if err != nil {
		return marker{}, ioErr(op, d.root, err)
	}
	m, err := parseMarker(b)
	if err != nil {
		return marker{}, errs.New(errs.Corrupt, op, "%s: %v", filepath.Join(d.root, markerName), err)
	}
	if _, err := d.fs.Stat(d.dir); errors.Is(err, fs.ErrNotExist) && !m.incomplete {
		d.log.Warn("the store's chunks directory is gone: the store is incomplete until a repair pass", "dir", d.dir)
		m.incomplete = true
		if err := d.writeMarker(m); err != nil {
			return marker{}, err
		}
	}
	return m, nil
}

// format writes the marker of a new store, refusing a directory that holds
// chunks without a marker (an older weft's, whose format this one cannot
// read).
func (d *diskBackend) format(replacement bool) (marker, error) {
	names, err := d.readDirNames(d.dir)
	if err != nil {
		return marker{}, err
	}
	if len(names) > 0 {
		return marker{}, errs.New(errs.Invalid, "open store", "%s holds chunks but no %s file: it was made by an older weft, whose chunk format (1) this one cannot read; move it away and let repair refill the store", d.root, markerName)
	}
	// The chunks directory first: a marker without it means lost chunks.
	if err := d.fs.Mkdir(d.dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return marker{}, ioErr("open store", d.dir, err)
	}
	m := marker{id: newStoreID(), incomplete: replacement}
	if err := d.writeMarker(m); err != nil {
		return marker{}, err
	}
	d.log.Info("store formatted", "dir", d.root, "id", m.id, "incomplete", m.incomplete)
	return m, nil
}

// writeMarker replaces the marker durably.
func (d *diskBackend) writeMarker(m marker) error {
	const op = "write store marker"
	p := filepath.Join(d.root, markerName)
	f, err := d.fs.OpenFile(p+".tmp", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return ioErr(op, p, err)
	}
	_, err = f.Write(m.encode())
	if err == nil && !d.noFsync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.fs.Rename(p+".tmp", p)
	}
	if err == nil {
		err = d.syncDir(d.root)
	}
	if err != nil {
		d.fs.Remove(p + ".tmp")
		return ioErr(op, p, err)
	}
	return nil
}
