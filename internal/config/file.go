package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/weftfs/weft/internal/errs"
)

// Load reads, decodes and validates the cluster file at path. Relative data
// directories in the file are made relative to the file's directory, so a
// cluster file and its data can move together.
func Load(path string) (*Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, errs.Wrap(kindOfFileError(err), "read cluster file", path, err)
	}
	c, err := parse(data, path)
	if err != nil {
		return nil, err
	}
	base := filepath.Dir(path)
	c.CapabilitySecret = resolveDir(base, c.CapabilitySecret)
	for i := range c.Meta {
		c.Meta[i].Dir = resolveDir(base, c.Meta[i].Dir)
	}
	for i := range c.Store {
		c.Store[i].Dir = resolveDir(base, c.Store[i].Dir)
	}
	c.resolveSecurityPaths(base)
	return c, nil
}

// Parse decodes and validates a cluster file's content. Unset settings take
// their defaults.
func Parse(data []byte) (*Cluster, error) {
	return parse(data, "cluster file")
}

func parse(data []byte, name string) (*Cluster, error) {
	c := Default()
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(c)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, errs.New(errs.Invalid, "parse cluster file", "%s:%d: %s", name, pe.Position.Line, pe.Message)
		}
		// Type errors (a string where a number belongs, a bad size) name
		// the key but not the line.
		return nil, errs.New(errs.Invalid, "parse cluster file", "%s: %v", name, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		key, line := locateKey(data, undecoded[0])
		return nil, errs.New(errs.Invalid, "parse cluster file", "%s:%d: unknown key %s", name, line, key)
	}
	c.applyElementDefaults()
	c.applyRedundancy(md.IsDefined("replication"))
	if err := c.validate(); err != nil {
		return nil, errs.Wrap(errs.Invalid, "invalid cluster file", name, err)
	}
	return c, nil
}

// Write stores c at path atomically: it writes a temporary file in the same
// directory, syncs it and renames it over path, so a reader sees the old file
// or the new one, never a torn one. c is validated first.
func (c *Cluster) Write(path string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.WriteString("# weft cluster file. The position of a [[meta]] or [[store]] entry is its\n" +
		"# server id: append servers, never reorder or remove them.\n\n")
	enc := toml.NewEncoder(&buf)
	enc.Indent = ""
	if err := enc.Encode(c); err != nil {
		return errs.Wrap(errs.Invalid, "encode cluster file", path, err)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return errs.Wrap(kindOfFileError(err), "write cluster file", path, err)
	}
	// On any failure below the temporary file is removed; after the rename
	// the remove fails harmlessly.
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return errs.Wrap(errs.IO, "write cluster file", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return errs.Wrap(errs.IO, "write cluster file", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return errs.Wrap(errs.IO, "write cluster file", path, err)
	}
	if err := tmp.Close(); err != nil {
		return errs.Wrap(errs.IO, "write cluster file", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return errs.Wrap(kindOfFileError(err), "write cluster file", path, err)
	}
	// Make the rename itself durable.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func resolveDir(base, dir string) string {
	if dir == "" || filepath.IsAbs(dir) {
		return dir
	}
	return filepath.Join(base, dir)
}

func kindOfFileError(err error) errs.Kind {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errs.NotExist
	case errors.Is(err, os.ErrPermission):
		return errs.Permission
	default:
		return errs.IO
	}
}

// locateKey finds the line where the undecoded key k is set, and names it the
// way validation errors do ("store[1].bogus"). The TOML decoder reports
// unknown keys without positions, so this scans the text: it tracks the
// current [table] or [[array]] header and looks for "name =" under the header
// that matches k's parent. It understands the shapes a cluster file uses;
// for anything else it returns the dotted key and line 0.
func locateKey(data []byte, k toml.Key) (string, int) {
	parent := strings.Join(k[:len(k)-1], ".")
	name := k[len(k)-1]
	table := ""
	counts := map[string]int{} // [[array]] headers seen so far
	label := func() string {
		if n, ok := counts[table]; ok {
			return fmt.Sprintf("%s[%d]", table, n-1)
		}
		return table
	}
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(raw)
		switch {
		case strings.HasPrefix(line, "[["):
			table = headerName(line, "[[", "]]")
			counts[table]++
			if table == k.String() {
				return fmt.Sprintf("%s[%d]", table, counts[table]-1), i + 1
			}
			continue
		case strings.HasPrefix(line, "["):
			table = headerName(line, "[", "]")
			if table == k.String() {
				return table, i + 1
			}
			continue
		}
		if table != parent {
			continue
		}
		key, _, ok := strings.Cut(line, "=")
		if !ok || strings.Trim(strings.TrimSpace(key), `"'`) != name {
			continue
		}
		if l := label(); l != "" {
			return l + "." + name, i + 1
		}
		return name, i + 1
	}
	return k.String(), 0
}

func headerName(line, open, close string) string {
	line = strings.TrimPrefix(line, open)
	if i := strings.Index(line, close); i >= 0 {
		line = line[:i]
	}
	parts := strings.Split(line, ".")
	for i, p := range parts {
		parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
	}
	return strings.Join(parts, ".")
}
