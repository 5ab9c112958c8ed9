package fusefs

import (
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/posixtest"
)

// runAsUser runs fn with fsuid uid and fsgid gid (no supplementary groups)
// on a locked thread, so its system calls reach the mount as that user.
func runAsUser(uid, gid uint32, fn func() error) error {
	return runAsUserGroups(uid, gid, nil, fn)
}

// runAsUserGroups is runAsUser with supplementary groups.
func runAsUserGroups(uid, gid uint32, groups []uint32, fn func() error) error {
	return posixtest.RunAs(core.Creds{UID: uid, GID: gid, Groups: groups}, fn)
}
