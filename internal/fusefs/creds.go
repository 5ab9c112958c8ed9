package fusefs

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/core"
)

// groupsTTL is how long the supplementary groups read for a caller are
// reused. A thread that changes its groups but keeps its fsuid and fsgid is
// judged with the old groups for up to this long.
const groupsTTL = time.Second

// groupCache remembers the supplementary groups of recent callers, keyed by
// the thread id FUSE reports: reading /proc for every request would cost
// more than the request.
type groupCache struct {
	procDir string // "/proc"; tests may point elsewhere
	now     func() time.Time

	mu struct {
		sync.Mutex
		byPid map[uint32]groupEntry
	}
}

type groupEntry struct {
	uid, gid uint32
	groups   []uint32
	expires  time.Time
}

func newGroupCache() *groupCache {
	g := &groupCache{procDir: "/proc", now: time.Now}
	g.mu.byPid = make(map[uint32]groupEntry)
	return g
}

// creds returns the identity of the caller of a request.
func (g *groupCache) creds(c *fuse.Caller) core.Creds {
	cr := core.Creds{UID: c.Uid, GID: c.Gid}
	if c.Pid == 0 {
		return cr // the kernel itself (writeback): no process to ask
	}
	now := g.now()
	g.mu.Lock()
	e, ok := g.mu.byPid[c.Pid]
	g.mu.Unlock()
	if ok && e.uid == c.Uid && e.gid == c.Gid && now.Before(e.expires) {
		cr.Groups = e.groups
		return cr
	}
	cr.Groups = g.read(c.Pid, c.Uid, c.Gid)
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.mu.byPid) >= 4096 {
		for pid, old := range g.mu.byPid {
			if !now.Before(old.expires) {
				delete(g.mu.byPid, pid)
			}
		}
	}
	g.mu.byPid[c.Pid] = groupEntry{uid: c.Uid, gid: c.Gid, groups: cr.Groups, expires: now.Add(groupsTTL)}
	return cr
}

// read returns the supplementary groups of thread pid from the "Groups:"
// line of /proc/PID/status (per thread: setgroups(2) changes one thread at
// the system-call level). A thread that is gone has none, and so has one
// whose file system ids are not the caller's (the id was reused).
func (g *groupCache) read(pid, uid, gid uint32) []uint32 {
	data, err := os.ReadFile(g.procDir + "/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return nil
	}
	groups, fsuid, fsgid, ok := parseStatus(data)
	if !ok || fsuid != uid || fsgid != gid {
		return nil
	}
	return groups
}

// parseStatus extracts the supplementary groups and the file system uid and
// gid (the fourth numbers of the Uid: and Gid: lines) from the text of a
// /proc status file.
func parseStatus(status []byte) (groups []uint32, fsuid, fsgid uint32, ok bool) {
	var seen int
	for line := range bytes.Lines(status) {
		key, rest, found := bytes.Cut(line, []byte(":"))
		if !found {
			continue
		}
		var nums []uint32
		for _, f := range bytes.Fields(rest) {
			if n, err := strconv.ParseUint(string(f), 10, 32); err == nil {
				nums = append(nums, uint32(n))
			}
		}
		switch string(key) {
		case "Uid":
			if len(nums) == 4 {
				fsuid, seen = nums[3], seen|1
			}
		case "Gid":
			if len(nums) == 4 {
				fsgid, seen = nums[3], seen|2
			}
		case "Groups":
			groups, seen = nums, seen|4
		}
	}
	return groups, fsuid, fsgid, seen == 7
}

// callCtx returns the context a request's weft calls run with: the caller's
// identity and the operation timeout, under the mount's lifetime but
// detached from the kernel's interrupts (see the package doc).
func (fsys *fileSystem) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return fsys.boundCtx(fsys.life, ctx)
}

// boundCtx is parent bounded by OpTimeout with the identity of req's caller.
func (fsys *fileSystem) boundCtx(parent, req context.Context) (context.Context, context.CancelFunc) {
	ctx := req
	creds := fsys.opts.Creds
	var groups []*client.Patchgroup
	if c, ok := fuse.FromContext(ctx); ok {
		creds = fsys.groups.creds(c)
		groups = fsys.pg.groupsOf(c.Pid)
	}
	cctx, cancel := context.WithTimeout(parent, fsys.opts.OpTimeout)
	cctx = client.WithCreds(cctx, creds)
	if groups != nil {
		cctx = client.WithPatchgroups(cctx, groups)
	}
	return cctx, cancel
}
