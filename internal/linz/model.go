package linz

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The model: the state is, per name, the inode it holds (0: none), that
// file's mode bits and content. The operations are what a program does:
//
//	create   open(O_CREAT|O_EXCL) and fstat: the new inode, or EEXIST
//	rename   rename(2) between two names (replacing the target), or ENOENT
//	unlink   unlink(2), or ENOENT
//	chmod    chmod(2), or ENOENT
//	stat     lstat(2): inode, mode, size, or ENOENT
//	lookup   the first step of a stat or chmod that found its file: the
//	         inode the name holds (the stat's; any, for a chmod)
//	attr     a stat's second step: the mode and size of the inode found
//	setmode  a chmod's second step: the new mode of the inode found
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
// steps another client may see apart).
//
// A stat or chmod that finds its file is two steps, as in every POSIX file
// system: the lookup of the name, then a read or change of the inode it
// found (Linux's chmod(2) and lstat(2) walk the path, then act on the inode;
// over FUSE they are a LOOKUP and a GETATTR or SETATTR). A rename can come
// between them: a chmod of a/x can land on the file after it was renamed
// to a/z, and a stat of a/z can see a/x's old mode first. The history
// records such a call as two operations with the call's times (Split): a
// lookup of the name, then an attr (or setmode) of the inode the same
// client's lookup found, which the state keeps per client until then.

// Dirs and Names make the namespace: len(Dirs)*len(Names) slots.
var (
	Dirs  = []string{"a", "b"}
	Names = []string{"x", "y", "z"}
)

const (
	// Slots is how many names the namespace has: len(Dirs) * len(Names).
	Slots = 6
	// TokenLen is how many bytes every write writes.
	TokenLen = 4
	// CreateMode is the mode every create asks for (and gets: a mount's
	// umask is 022).
	CreateMode = 0o644
	// MaxClients is how many clients a history may have.
	MaxClients = 8
)

// Path is the path of slot i relative to the namespace's root ("a/x").
func Path(i int) string {
	return Dirs[i/len(Names)] + "/" + Names[i%len(Names)]
}

// fileState is what one name holds.
type fileState struct {
	ino  uint64 // 0: the name is free
	mode uint32 // permission bits
	data string
}

// state is the namespace, and per client the inode its stat or chmod in
// progress looked up (0: none); comparable with ==.
type state struct {
	names  [Slots]fileState
	looked [MaxClients]uint64
}

// Op is an operation of the model.
type Op uint8

const (
	OpCreate Op = iota
	OpRename
	OpUnlink
	OpChmod
	OpStat
	OpReaddir
	OpOpen
	OpWrite
	OpReread
	OpLookup
	OpAttr
	OpSetMode
)

var opNames = [...]string{"create", "rename", "unlink", "chmod", "stat", "readdir", "open", "write", "reread", "lookup", "attr", "setmode"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op%d", o)
}

// Input is an operation's arguments.
type Input struct {
	Op     Op
	Client int // who called it (History.Add sets it)
	// Slot names the name; for readdir the directory's index; for reread
	// where the descriptor was opened; for attr and setmode the name
	// their lookup looked up. To is rename's target.
	Slot, To int
	Mode     uint32 // chmod, setmode
	Ino      uint64 // write, reread: the inode the descriptor is open on; attr: the inode stat found
	Data     string // write
}

// Result is how an operation ended.
type Result uint8

const (
	ResOK Result = iota
	ResNoEnt
	ResExist
	// ResUnknown: an unexpected error; the operation may or may not have
	// taken effect (its return time is the end of the history).
	ResUnknown
)

// Output is an operation's result.
type Output struct {
	Res   Result
	Ino   uint64 // create, stat, open, lookup (0: not reported)
	Mode  uint32 // stat, attr
	Size  int64  // stat, attr
	Data  string // reread
	Names string // readdir: sorted, comma-separated
}

// find returns the slot holding ino, or -1.
func (s *state) find(ino uint64) int {
	for i := range s.names {
		if s.names[i].ino == ino {
			return i
		}
	}
	return -1
}

// dirNames lists the names dir holds, as readdir reports them.
func (s *state) dirNames(dir int) string {
	var names []string
	for j, n := range Names {
		if s.names[dir*len(Names)+j].ino != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// step is the model's transition: whether out can be the result of in on
// s, and the state after it.
func step(s state, in Input, out Output) (bool, state) {
	if out.Res == ResUnknown {
		// It may have happened: apply it if it could have; that it did
		// not is covered by its open end (it may come last).
		ok, next := apply(s, in)
		if !ok {
			return true, s
		}
		return true, next
	}
	n := &s.names
	switch in.Op {
	case OpCreate:
		if n[in.Slot].ino != 0 {
			return out.Res == ResExist, s
		}
		if out.Res != ResOK || out.Ino == 0 || s.find(out.Ino) >= 0 {
			return false, s
		}
		n[in.Slot] = fileState{ino: out.Ino, mode: CreateMode}
		return true, s
	case OpLookup:
		// The first step of a stat or chmod: the name holds a file (for
		// a stat, the one it reported), which the call's second step
		// acts on.
		f := n[in.Slot]
		if f.ino == 0 || out.Ino != 0 && out.Ino != f.ino || s.looked[in.Client] != 0 || out.Res != ResOK {
			return false, s
		}
		s.looked[in.Client] = f.ino
		return true, s
	case OpStat:
		return statOf(s, in, out), s
	case OpAttr, OpSetMode:
		ino := s.looked[in.Client]
		if ino == 0 || in.Op == OpAttr && in.Ino != ino || out.Res != ResOK {
			return false, s
		}
		s.looked[in.Client] = 0
		i := s.find(ino)
		switch {
		case i < 0:
			// Unlinked since the lookup: the file left the model, so
			// its attributes say nothing, and a change of them changes
			// nothing in it.
			return true, s
		case in.Op == OpSetMode:
			n[i].mode = in.Mode
			return true, s
		}
		return out.Mode == n[i].mode && out.Size == int64(len(n[i].data)), s
	case OpRename, OpUnlink, OpChmod, OpWrite:
		return changed(s, in, out)
	case OpOpen:
		return statOf(s, in, out), s
	case OpReaddir:
		return out.Res == ResOK && out.Names == s.dirNames(in.Slot), s
	case OpReread:
		i := s.find(in.Ino)
		// An unlinked file left the model: any content will do.
		return out.Res == ResOK && (i < 0 || out.Data == n[i].data), s
	}
	return false, s
}

// statOf says whether out can be what a stat (inode, mode and size at once:
// Split makes two steps of one that found its file) or an open (the inode)
// of in.Slot says on s.
func statOf(s state, in Input, out Output) bool {
	f := s.names[in.Slot]
	if f.ino == 0 {
		return out.Res == ResNoEnt
	}
	if out.Res != ResOK || out.Ino != f.ino {
		return false
	}
	return in.Op == OpOpen || out.Mode == f.mode && out.Size == int64(len(f.data))
}

// changed is step for a rename, unlink, chmod (one that failed: Split makes
// two steps of one that did not) or write.
func changed(s state, in Input, out Output) (bool, state) {
	ok, next := apply(s, in)
	switch {
	case in.Op == OpWrite && out.Res == ResNoEnt:
		// Its close failed: no name holds the file any more (another
		// client unlinked it), so nothing changed.
		return s.find(in.Ino) < 0, s
	case in.Op == OpWrite:
		return out.Res == ResOK, next
	case !ok:
		return out.Res == ResNoEnt, s
	default:
		return out.Res == ResOK, next
	}
}

// apply applies a change in to s, the way it succeeds; false if it cannot
// (the name is free), or for a create (its inode is not known).
func apply(s state, in Input) (bool, state) {
	n := &s.names
	switch in.Op {
	case OpRename:
		f := n[in.Slot]
		if f.ino == 0 {
			return false, s
		}
		n[in.Slot] = fileState{}
		n[in.To] = f
	case OpUnlink:
		if n[in.Slot].ino == 0 {
			return false, s
		}
		n[in.Slot] = fileState{}
	case OpChmod:
		if n[in.Slot].ino == 0 {
			return false, s
		}
		n[in.Slot].mode = in.Mode
	case OpWrite:
		if i := s.find(in.Ino); i >= 0 {
			n[i].data = in.Data
		}
	default:
		return false, s
	}
	return true, s
}

// Split is how History records a call: a stat or chmod that found its file
// becomes its two steps (the model's comment says why), with the call's
// times; any other call is one operation.
func Split(in Input, out Output) []porcupine.Operation {
	one := func(in Input, out Output) porcupine.Operation {
		return porcupine.Operation{ClientId: in.Client, Input: in, Output: out}
	}
	if out.Res != ResOK || in.Op != OpStat && in.Op != OpChmod {
		return []porcupine.Operation{one(in, out)}
	}
	lookup := one(Input{Op: OpLookup, Client: in.Client, Slot: in.Slot}, Output{Ino: out.Ino})
	if in.Op == OpStat {
		return []porcupine.Operation{lookup,
			one(Input{Op: OpAttr, Client: in.Client, Slot: in.Slot, Ino: out.Ino}, Output{Mode: out.Mode, Size: out.Size})}
	}
	return []porcupine.Operation{lookup, one(Input{Op: OpSetMode, Client: in.Client, Slot: in.Slot, Mode: in.Mode}, Output{})}
}

// Model is the porcupine model; inputs are Input, outputs Output.
var Model = porcupine.Model{
	Init: func() interface{} { return state{} },
	Step: func(st, input, output interface{}) (bool, interface{}) {
		return step(st.(state), input.(Input), output.(Output))
	},
	Equal: func(a, b interface{}) bool { return a.(state) == b.(state) },
	Hash: func(st interface{}) uint64 {
		h := fnv.New64a()
		s := st.(state)
		for _, f := range s.names {
			fmt.Fprintf(h, "%d/%o/%s;", f.ino, f.mode, f.data)
		}
		fmt.Fprint(h, s.looked)
		return h.Sum64()
	},
	DescribeOperation: func(input, output interface{}) string {
		return Describe(input.(Input), output.(Output))
	},
	DescribeState: func(st interface{}) string {
		var b strings.Builder
		s := st.(state)
		for i, f := range s.names {
			if f.ino != 0 {
				fmt.Fprintf(&b, "%s=%d(%o,%q) ", Path(i), f.ino, f.mode, f.data)
			}
		}
		for c, ino := range s.looked {
			if ino != 0 {
				fmt.Fprintf(&b, "client %d looked up %d ", c, ino)
			}
		}
		return b.String()
	},
}

// Describe is an operation as a person reads it: "rename(a/x b/y) -> ok".
func Describe(in Input, out Output) string {
	var arg string
	switch in.Op {
	case OpRename:
		arg = Path(in.Slot) + " " + Path(in.To)
	case OpChmod, OpSetMode:
		arg = fmt.Sprintf("%s %o", Path(in.Slot), in.Mode)
	case OpAttr:
		arg = fmt.Sprintf("%s ino %d", Path(in.Slot), in.Ino)
	case OpReaddir:
		arg = Dirs[in.Slot]
	case OpWrite:
		arg = fmt.Sprintf("ino %d %q", in.Ino, in.Data)
	case OpReread:
		arg = fmt.Sprintf("ino %d", in.Ino)
	default:
		arg = Path(in.Slot)
	}
	var res string
	switch out.Res {
	case ResNoEnt:
		res = "ENOENT"
	case ResExist:
		res = "EEXIST"
	case ResUnknown:
		res = "unknown"
	default:
		switch in.Op {
		case OpCreate, OpOpen:
			res = fmt.Sprintf("ino %d", out.Ino)
		case OpLookup:
			res = "found"
			if out.Ino != 0 {
				res = fmt.Sprintf("ino %d", out.Ino)
			}
		case OpStat:
			res = fmt.Sprintf("ino %d mode %o size %d", out.Ino, out.Mode, out.Size)
		case OpAttr:
			res = fmt.Sprintf("mode %o size %d", out.Mode, out.Size)
		case OpReaddir:
			res = "[" + out.Names + "]"
		case OpReread:
			res = fmt.Sprintf("%q", out.Data)
		default:
			res = "ok"
		}
	}
	return fmt.Sprintf("%s(%s) -> %s", in.Op, arg, res)
}
