package core

import (
	"strings"

	"github.com/weftfs/weft/internal/errs"
)

// MaxNameLen is the longest name a directory entry may have, in bytes.
const MaxNameLen = 255

// MaxPathLen is the longest path the client library accepts, in bytes.
const MaxPathLen = 4096

// MaxSymlinkLen is the longest symlink target, in bytes.
const MaxSymlinkLen = 4095

// ValidateName checks a single directory entry name for an operation that
// creates or looks up that name. "." and ".." are refused with Invalid here:
// callers that allow them (lookup) resolve them before calling.
func ValidateName(op, name string) error {
	switch {
	case name == "":
		return &errs.Error{Kind: errs.NotExist, Op: op, Msg: "empty name"}
	case len(name) > MaxNameLen:
		return &errs.Error{Kind: errs.NameTooLong, Op: op, Path: name[:32] + "...", Msg: "name longer than 255 bytes"}
	case name == "." || name == "..":
		return &errs.Error{Kind: errs.Invalid, Op: op, Path: name, Msg: "name is . or .."}
	case strings.IndexByte(name, '/') >= 0:
		return &errs.Error{Kind: errs.Invalid, Op: op, Path: name, Msg: "name contains /"}
	case strings.IndexByte(name, 0) >= 0:
		return &errs.Error{Kind: errs.Invalid, Op: op, Msg: "name contains NUL"}
	}
	return nil
}

// ValidateXattrName checks an extended attribute name: non-empty, at most 255
// bytes, no NUL, and in a namespace weft stores (user., trusted., security.,
// system.).
func ValidateXattrName(op, name string) error {
	switch {
	case name == "":
		return &errs.Error{Kind: errs.Invalid, Op: op, Msg: "empty attribute name"}
	case len(name) > MaxNameLen:
		return &errs.Error{Kind: errs.Range, Op: op, Msg: "attribute name longer than 255 bytes"}
	case strings.IndexByte(name, 0) >= 0:
		return &errs.Error{Kind: errs.Invalid, Op: op, Msg: "attribute name contains NUL"}
	}
	for _, ns := range []string{"user.", "trusted.", "security.", "system."} {
		if strings.HasPrefix(name, ns) && len(name) > len(ns) {
			return nil
		}
	}
	return &errs.Error{Kind: errs.NotSupported, Op: op, Path: name, Msg: "attribute namespace not supported"}
}

// MaxXattrValue is the largest extended attribute value, as on ext4's limit
// for one block.
const MaxXattrValue = 64 << 10
