package fusefs

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// A linearizability model of a small namespace, for histories recorded on
// FUSE mounts (linz_test.go) and checked with porcupine: a few file names
// in two directories, so that operations from different mounts collide
// all the time. Files are tracked by inode: the state is, per name, the
// inode it holds (0: none), that file's mode bits and content. The
// operations are what a program does through the kernel:
//
//	create   open(O_CREAT|O_EXCL) and fstat: the new inode, or EEXIST
//	rename   rename(2) between two names (replacing the target), or ENOENT
//	unlink   unlink(2), or ENOENT
//	chmod    chmod(2), or ENOENT
//	stat     lstat(2): inode, mode, size, or ENOENT
//	readdir  the names in one directory
//	open     open(O_RDONLY or O_WRONLY) and fstat: the inode the name held
//	write    pwrite of a fixed-size token at 0 and close(2) through an
//	         open descriptor: the file's content, wherever it is now; or
//	         ENOENT from close when no name holds the file any more
//	reread   pread at 0 through a descriptor kept open: the content
//
// A write and a reread act on an inode, not a name, as they do through a
// descriptor: a file renamed or unlinked since its open still takes them
// (an unlinked one drops out of the model, so reading it says nothing).
// Every write is the same size, so that a file's size is 0 or that size and
// no write has to truncate (a truncate and the write after it are two
// steps another mount may see apart).

// linzDirs and linzNames make the namespace: len(dirs)*len(names) slots.
var (
	linzDirs  = []string{"a", "b"}
	linzNames = []string{"x", "y", "z"}
)

const (
	linzSlots    = 6 // len(linzDirs) * len(linzNames)
	linzTokenLen = 4 // bytes every write writes
)

// linzPath is the path of slot i under the test's root.
func linzPath(i int) string {
	return linzDirs[i/len(linzNames)] + "/" + linzNames[i%len(linzNames)]
}

// linzFile is what one name holds.
type linzFile struct {
	ino  uint64 // 0: the name is free
	mode uint32 // permission bits
	data string
}

// linzState is the namespace; comparable with ==.
type linzState [linzSlots]linzFile

type linzOp uint8

const (
	opCreate linzOp = iota
	opRename
	opUnlink
	opChmod
	opStat
	opReaddir
	opOpen
	opWrite
	opReread
)

var linzOpNames = [...]string{"create", "rename", "unlink", "chmod", "stat", "readdir", "open", "write", "reread"}

func (o linzOp) String() string { return linzOpNames[o] }

// linzInput is an operation's arguments.
type linzInput struct {
	op       linzOp
	slot, to int    // names (to: rename's target); slot is the directory's index for readdir, where the descriptor was opened for reread
	mode     uint32 // chmod
	ino      uint64 // write, reread: the inode the descriptor is open on
	data     string // write
}

// linzResult is how an operation ended.
type linzResult uint8

const (
	resOK linzResult = iota
	resNoEnt
	resExist
	// resUnknown: an unexpected error; the operation may or may not have
	// taken effect (its return time is the end of the history).
	resUnknown
)

// linzOutput is an operation's result.
type linzOutput struct {
	res   linzResult
	ino   uint64 // create, stat, open
	mode  uint32 // stat
	size  int64  // stat
	data  string // reread
	names string // readdir: sorted, comma-separated
}

// createMode is the mode every create asks for (the test's umask is 022).
const createMode = 0o644

// find returns the slot holding ino, or -1.
func (s *linzState) find(ino uint64) int {
	for i := range s {
		if s[i].ino == ino {
			return i
		}
	}
	return -1
}

// dirNames lists the names dir holds, as readdir reports them.
func (s *linzState) dirNames(dir int) string {
	var names []string
	for j, n := range linzNames {
		if s[dir*len(linzNames)+j].ino != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// linzStep is the model's transition: whether out can be the result of in
// on s, and the state after it.
func linzStep(s linzState, in linzInput, out linzOutput) (bool, linzState) {
	if out.res == resUnknown {
		// It may have happened: apply it if it could have; that it did
		// not is covered by its open end (it may come last).
		ok, next := linzApply(s, in)
		if !ok {
			return true, s
		}
		return true, next
	}
	switch in.op {
	case opCreate:
		if s[in.slot].ino != 0 {
			return out.res == resExist, s
		}
		if out.res != resOK || out.ino == 0 || s.find(out.ino) >= 0 {
			return false, s
		}
		s[in.slot] = linzFile{ino: out.ino, mode: createMode}
		return true, s
	case opRename, opUnlink, opChmod, opWrite:
		ok, next := linzApply(s, in)
		switch {
		case in.op == opWrite && out.res == resNoEnt:
			// Its close failed: no name holds the file any more
			// (another mount unlinked it), so nothing changed.
			return s.find(in.ino) < 0, s
		case in.op == opWrite:
			return out.res == resOK, next
		case !ok:
			return out.res == resNoEnt, s
		default:
			return out.res == resOK, next
		}
	case opStat, opOpen:
		f := s[in.slot]
		if f.ino == 0 {
			return out.res == resNoEnt, s
		}
		if out.res != resOK || out.ino != f.ino {
			return false, s
		}
		return in.op == opOpen || out.mode == f.mode && out.size == int64(len(f.data)), s
	case opReaddir:
		return out.res == resOK && out.names == s.dirNames(in.slot), s
	case opReread:
		i := s.find(in.ino)
		// An unlinked file left the model: any content will do.
		return out.res == resOK && (i < 0 || out.data == s[i].data), s
	}
	return false, s
}

// linzApply applies a change in to s, the way it succeeds; false if it
// cannot (the name is free), or for a create (its inode is not known).
func linzApply(s linzState, in linzInput) (bool, linzState) {
	switch in.op {
	case opRename:
		f := s[in.slot]
		if f.ino == 0 {
			return false, s
		}
		s[in.slot] = linzFile{}
		s[in.to] = f
	case opUnlink:
		if s[in.slot].ino == 0 {
			return false, s
		}
		s[in.slot] = linzFile{}
	case opChmod:
		if s[in.slot].ino == 0 {
			return false, s
		}
		s[in.slot].mode = in.mode
	case opWrite:
		if i := s.find(in.ino); i >= 0 {
			s[i].data = in.data
		}
	default:
		return false, s
	}
	return true, s
}

// linzModel is the porcupine model.
var linzModel = porcupine.Model{
	Init: func() interface{} { return linzState{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		return linzStep(state.(linzState), input.(linzInput), output.(linzOutput))
	},
	Equal: func(a, b interface{}) bool { return a.(linzState) == b.(linzState) },
	Hash: func(state interface{}) uint64 {
		h := fnv.New64a()
		for _, f := range state.(linzState) {
			fmt.Fprintf(h, "%d/%o/%s;", f.ino, f.mode, f.data)
		}
		return h.Sum64()
	},
	DescribeOperation: func(input, output interface{}) string {
		return describeLinz(input.(linzInput), output.(linzOutput))
	},
	DescribeState: func(state interface{}) string {
		var b strings.Builder
		for i, f := range state.(linzState) {
			if f.ino != 0 {
				fmt.Fprintf(&b, "%s=%d(%o,%q) ", linzPath(i), f.ino, f.mode, f.data)
			}
		}
		return b.String()
	},
}

func describeLinz(in linzInput, out linzOutput) string {
	var arg string
	switch in.op {
	case opRename:
		arg = linzPath(in.slot) + " " + linzPath(in.to)
	case opChmod:
		arg = fmt.Sprintf("%s %o", linzPath(in.slot), in.mode)
	case opReaddir:
		arg = linzDirs[in.slot]
	case opWrite:
		arg = fmt.Sprintf("ino %d %q", in.ino, in.data)
	case opReread:
		arg = fmt.Sprintf("ino %d", in.ino)
	default:
		arg = linzPath(in.slot)
	}
	var res string
	switch out.res {
	case resNoEnt:
		res = "ENOENT"
	case resExist:
		res = "EEXIST"
	case resUnknown:
		res = "unknown"
	default:
		switch in.op {
		case opCreate, opOpen:
			res = fmt.Sprintf("ino %d", out.ino)
		case opStat:
			res = fmt.Sprintf("ino %d mode %o size %d", out.ino, out.mode, out.size)
		case opReaddir:
			res = "[" + out.names + "]"
		case opReread:
			res = fmt.Sprintf("%q", out.data)
		default:
			res = "ok"
		}
	}
	return fmt.Sprintf("%s(%s) -> %s", in.op, arg, res)
}

// linzHistory records operations from many goroutines, with times on one
// monotonic clock.
type linzHistory struct {
	start time.Time
	mu    struct {
		sync.Mutex
		ops []porcupine.Operation
	}
}

func newLinzHistory() *linzHistory { return &linzHistory{start: time.Now()} }

// now is the history's clock.
func (h *linzHistory) now() int64 { return int64(time.Since(h.start)) }

// add records an operation of client that was called at call; it returned
// now. An operation whose outcome is unknown never returned, as far as the
// checker knows.
func (h *linzHistory) add(client int, in linzInput, call int64, out linzOutput) {
	ret := h.now()
	if out.res == resUnknown {
		ret = 1<<62 - 1
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.ops = append(h.mu.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

func (h *linzHistory) ops() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := append([]porcupine.Operation(nil), h.mu.ops...)
	sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops
}
