package meta

import (
	"context"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// Access mask bits, as access(2).
const (
	mayRead  = 4
	mayWrite = 2
	mayExec  = 1
)

// credsOf converts the request's credentials, limited to what the caller's
// certificate allows (bindCreds, identity.go); a request without them is
// Invalid (there is no anonymous caller).
func credsOf(ctx context.Context, op string, c *weftpb.Creds) (core.Creds, error) {
	if c == nil {
		return core.Creds{}, errs.New(errs.Invalid, op, "request has no credentials")
	}
	return bindCreds(ctx, core.Creds{UID: c.Uid, GID: c.Gid, Groups: c.Groups}), nil
}

// allowed reports whether c may access r with mask, as Linux's
// generic_permission without ACLs: root passes read and write checks and
// search on directories, but executing a file needs some x bit even for root.
func allowed(c core.Creds, r *weftpb.InodeRecord, mask uint32) bool {
	if c.UID == 0 {
		return mask&mayExec == 0 || core.IsDir(r.Mode) || r.Mode&0o111 != 0
	}
	var bits uint32
	switch {
	case c.UID == r.Uid:
		bits = r.Mode >> 6
	case c.InGroup(r.Gid):
		bits = r.Mode >> 3
	default:
		bits = r.Mode
	}
	return bits&7&mask == mask
}

func checkAccess(op string, c core.Creds, r *weftpb.InodeRecord, mask uint32) error {
	if allowed(c, r, mask) {
		return nil
	}
	return errs.E(errs.Permission, op)
}

// isOwner reports whether c owns r or is root (Linux's inode_owner_or_capable).
func isOwner(c core.Creds, r *weftpb.InodeRecord) bool { return c.UID == 0 || c.UID == r.Uid }

// checkSticky applies the sticky-directory rule to removing or replacing
// child in dir: only the child's owner, the directory's owner or root may.
func checkSticky(op string, c core.Creds, dir, child *weftpb.InodeRecord) error {
	if dir.Mode&core.ModeSticky == 0 || c.UID == 0 || c.UID == child.Uid || c.UID == dir.Uid {
		return nil
	}
	return errs.New(errs.NotPermitted, op, "sticky directory")
}

// dropPrivileges clears setuid, and setgid when group-exec is set (a setgid
// without group-exec marks mandatory locking and stays), when a non-root
// caller writes or truncates a file, as Linux's file_remove_privs.
func dropPrivileges(c core.Creds, r *weftpb.InodeRecord) {
	if c.UID == 0 || core.IsDir(r.Mode) {
		return
	}
	r.Mode &^= core.ModeSetuid
	if r.Mode&0o010 != 0 {
		r.Mode &^= core.ModeSetgid
	}
}

// newRecord returns the attributes of a node c creates in directory d with
// mode (type and permission bits): group from a setgid directory (and the
// setgid bit for a new directory), as Linux's inode_init_owner.
func newRecord(c core.Creds, d *weftpb.InodeRecord, mode uint32, now int64) *weftpb.InodeRecord {
	gid := c.GID
	if d.Mode&core.ModeSetgid != 0 {
		gid = d.Gid
		if core.IsDir(mode) {
			mode |= core.ModeSetgid
		} else if mode&(core.ModeSetgid|0o010) == core.ModeSetgid|0o010 && c.UID != 0 && !c.InGroup(gid) {
			mode &^= core.ModeSetgid
		}
	}
	return &weftpb.InodeRecord{
		Mode: mode, Nlink: 1, Uid: c.UID, Gid: gid,
		AtimeNs: now, MtimeNs: now, CtimeNs: now,
	}
}

// validName checks a name from a request by core's rules. A name may be any
// bytes but NUL and '/', as on Linux: the wire's name fields are exempt from
// proto3's UTF-8 check (proto/rawnames).
func validName(op, name string) error {
	return core.ValidateName(op, name)
}
