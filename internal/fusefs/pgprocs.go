package fusefs

import (
	"bytes"
	"os"
	"strconv"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/errs"
)

// A mount's patchgroups: the groups its programs created, and which
// processes engage which. As in the paper, a process's engagements are
// inherited by the processes it starts (fork and exec): a request's groups
// are those of the nearest process up its ancestry that engages any.
// Processes are known by their thread-group id and start time, so that a
// reused pid inherits nothing.

// maxPatchgroups bounds the groups a mount keeps open.
const maxPatchgroups = 1 << 16

// maxAncestry bounds the walk up a caller's ancestry.
const maxAncestry = 64

type procKey struct {
	pid   uint32 // thread-group id
	start uint64 // start time, in clock ticks since boot
}

type pgTable struct {
	c       *client.Client
	procDir string

	mu struct {
		sync.Mutex
		groups  map[uint64]pgEntry
		engaged map[procKey][]*client.Patchgroup
	}
}

type pgEntry struct {
	g   *client.Patchgroup
	uid uint32 // its creator: only it and root use the group
}

func newPGTable(c *client.Client) *pgTable {
	t := &pgTable{c: c, procDir: "/proc"}
	t.mu.groups = map[uint64]pgEntry{}
	t.mu.engaged = map[procKey][]*client.Patchgroup{}
	return t
}

func (t *pgTable) create(uid uint32) (uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.mu.groups) >= maxPatchgroups {
		return 0, errs.New(errs.NoSpace, "pg_create", "%d patchgroups are open on this mount: close some", maxPatchgroups)
	}
	g := t.c.NewPatchgroup()
	t.mu.groups[g.ID()] = pgEntry{g: g, uid: uid}
	return g.ID(), nil
}

// group returns group id if uid may use it.
func (t *pgTable) group(uid uint32, id uint64) (*client.Patchgroup, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.mu.groups[id]
	switch {
	case !ok:
		return nil, errNoGroup("patchgroup", id)
	case uid != 0 && uid != e.uid:
		return nil, errs.New(errs.Permission, "patchgroup", "patchgroup %d belongs to uid %d", id, e.uid)
	}
	return e.g, nil
}

func (t *pgTable) depend(uid uint32, after, before uint64) error {
	a, err := t.group(uid, after)
	if err != nil {
		return err
	}
	b, err := t.group(uid, before)
	if err != nil {
		return err
	}
	return a.DependOn(b)
}

func (t *pgTable) close(uid uint32, id uint64) error {
	g, err := t.group(uid, id)
	if err != nil {
		return err
	}
	if err := g.Close(); err != nil {
		return err
	}
	t.mu.Lock()
	delete(t.mu.groups, id)
	t.mu.Unlock()
	return nil
}

// callerGroup returns group id, if the caller may use it, and the
// caller's process.
func (t *pgTable) callerGroup(caller *fuse.Caller, id uint64) (*client.Patchgroup, procKey, error) {
	g, err := t.group(caller.Uid, id)
	if err != nil {
		return nil, procKey{}, err
	}
	key, _, err := t.proc(caller.Pid)
	return g, key, err
}

// engage makes the caller's process engage group id.
func (t *pgTable) engage(caller *fuse.Caller, id uint64) error {
	g, key, err := t.callerGroup(caller, id)
	if err != nil {
		return err
	}
	if err := g.Engage(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forgetGoneLocked()
	t.mu.engaged[key] = append(t.mu.engaged[key], g)
	return nil
}

func (t *pgTable) disengage(caller *fuse.Caller, id uint64) error {
	g, key, err := t.callerGroup(caller, id)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	gs := t.mu.engaged[key]
	for i, e := range gs {
		if e == g {
			gs = append(gs[:i:i], gs[i+1:]...)
			if len(gs) == 0 {
				delete(t.mu.engaged, key)
			} else {
				t.mu.engaged[key] = gs
			}
			g.Disengage()
			return nil
		}
	}
	return errs.New(errs.Invalid, "pg_disengage", "this process does not engage patchgroup %d", id)
}

// forgetGoneLocked drops the engagements of processes that exited.
func (t *pgTable) forgetGoneLocked() {
	for key, gs := range t.mu.engaged {
		if start, _, err := t.stat(key.pid); err != nil || start != key.start {
			for _, g := range gs {
				g.Disengage()
			}
			delete(t.mu.engaged, key)
		}
	}
}

// groupsOf returns the groups that changes of thread tid belong to: those
// of the nearest process up its ancestry that engages any; nil if none.
func (t *pgTable) groupsOf(tid uint32) []*client.Patchgroup {
	t.mu.Lock()
	none := len(t.mu.engaged) == 0
	t.mu.Unlock()
	if none || tid == 0 {
		return nil
	}
	pid, err := t.tgid(tid)
	for range maxAncestry {
		if err != nil || pid == 0 {
			return nil
		}
		start, ppid, err := t.stat(pid)
		if err != nil {
			return nil
		}
		t.mu.Lock()
		gs := t.mu.engaged[procKey{pid: pid, start: start}]
		t.mu.Unlock()
		if len(gs) > 0 {
			return append([]*client.Patchgroup(nil), gs...)
		}
		pid = ppid
	}
	return nil
}

// proc returns the process of thread tid and its parent.
func (t *pgTable) proc(tid uint32) (procKey, uint32, error) {
	pid, err := t.tgid(tid)
	if err != nil {
		return procKey{}, 0, err
	}
	start, ppid, err := t.stat(pid)
	if err != nil {
		return procKey{}, 0, err
	}
	return procKey{pid: pid, start: start}, ppid, nil
}

// tgid returns the process (thread group) of thread tid, from the "Tgid:"
// line of /proc/TID/status.
func (t *pgTable) tgid(tid uint32) (uint32, error) {
	data, err := os.ReadFile(t.procDir + "/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return 0, errs.Wrap(errs.NotExist, "patchgroup", "caller", err)
	}
	for line := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(line, []byte("Tgid:")); ok {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 32)
			if err != nil {
				break
			}
			return uint32(n), nil
		}
	}
	return 0, errs.New(errs.Protocol, "patchgroup", "no Tgid for thread %d", tid)
}

// stat returns process pid's start time and parent, from /proc/PID/stat:
// the fields after the command name (in parentheses, and it may hold
// anything) are state, ppid, ..., and starttime is the 22nd field.
func (t *pgTable) stat(pid uint32) (start uint64, ppid uint32, err error) {
	data, err := os.ReadFile(t.procDir + "/" + strconv.FormatUint(uint64(pid), 10) + "/stat")
	if err != nil {
		return 0, 0, errs.Wrap(errs.NotExist, "patchgroup", "process", err)
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, errs.New(errs.Protocol, "patchgroup", "bad stat of process %d", pid)
	}
	f := bytes.Fields(data[i+1:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return 0, 0, errs.New(errs.Protocol, "patchgroup", "short stat of process %d", pid)
	}
	pp, err1 := strconv.ParseUint(string(f[1]), 10, 32)
	st, err2 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, errs.New(errs.Protocol, "patchgroup", "bad stat of process %d", pid)
	}
	return st, uint32(pp), nil
}
