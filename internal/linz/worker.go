package linz

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
)

// Mix weighs the operations a worker picks at random.
type Mix struct {
	Create, Rename, Unlink, Chmod, Stat, ReadDir, Write, Reread int
}

// DefaultMix is the FUSE tests' mix: every operation of the model.
var DefaultMix = Mix{Create: 14, Rename: 14, Unlink: 8, Chmod: 10, Stat: 22, ReadDir: 8, Write: 12, Reread: 12}

func (m Mix) total() int {
	return m.Create + m.Rename + m.Unlink + m.Chmod + m.Stat + m.ReadDir + m.Write + m.Reread
}

// Worker does operations on one client and records them in a history.
// One worker per client (doc.go says why); its methods are not safe for
// concurrent use.
type Worker struct {
	ID  int
	FS  FS
	H   *History
	Mix Mix
	rng *rand.Rand
	// held is a descriptor kept open across operations, for rereads;
	// heldIno the inode its open saw.
	held     File
	heldIno  uint64
	heldSlot int
	tokens   int
	// Unexpected lists errors that are neither ENOENT nor EEXIST.
	Unexpected []string
	// LostCloses are writes whose close failed because another client
	// removed the file meanwhile.
	LostCloses []string
}

// NewWorker returns a worker with id (its client id in the history) on
// fsys, with DefaultMix, seeded by seed and id.
func NewWorker(id int, fsys FS, h *History, seed uint64) *Worker {
	return &Worker{ID: id, FS: fsys, H: h, Mix: DefaultMix, rng: rand.New(rand.NewPCG(seed, uint64(id)))}
}

// classify maps an error to a result; unexpected ones are kept for the
// report.
func (w *Worker) classify(op string, err error) Result {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ResNoEnt
	case errors.Is(err, fs.ErrExist):
		return ResExist
	}
	w.Unexpected = append(w.Unexpected, op+": "+err.Error())
	return ResUnknown
}

// Run does operations until stop is closed, then closes the held
// descriptor.
func (w *Worker) Run(stop <-chan struct{}) {
	defer w.CloseHeld()
	for {
		select {
		case <-stop:
			return
		default:
		}
		w.Step()
	}
}

// CloseHeld closes the descriptor kept for rereads, if any.
func (w *Worker) CloseHeld() {
	if w.held != nil {
		w.held.Close()
		w.held = nil
	}
}

// Step does one random operation.
func (w *Worker) Step() {
	slot := w.rng.IntN(Slots)
	m := w.Mix
	r := w.rng.IntN(max(m.total(), 1))
	pick := func(weight int) bool {
		if r < weight {
			return true
		}
		r -= weight
		return false
	}
	switch {
	case pick(m.Create):
		w.Create(slot)
	case pick(m.Rename):
		w.Rename(slot, (slot+1+w.rng.IntN(Slots-1))%Slots)
	case pick(m.Unlink):
		w.Unlink(slot)
	case pick(m.Chmod):
		w.Chmod(slot, []uint32{0o600, 0o640, 0o644, 0o604}[w.rng.IntN(4)])
	case pick(m.Stat):
		w.Stat(slot)
	case pick(m.ReadDir):
		w.ReadDir(w.rng.IntN(len(Dirs)))
	case pick(m.Write):
		w.Write(slot)
	case pick(m.Reread):
		w.Reread(slot)
	}
}

// Create creates slot exclusively and records the inode it got.
func (w *Worker) Create(slot int) {
	in := Input{Op: OpCreate, Slot: slot}
	call := w.H.Now()
	f, err := w.FS.CreateExcl(Path(slot))
	if err != nil {
		w.H.Add(w.ID, in, call, Output{Res: w.classify("create", err)})
		return
	}
	ino, err := f.Ino()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// Created, but which inode is not known: it may not be
		// linearized away. Such a history cannot be checked.
		w.Unexpected = append(w.Unexpected, "create: "+err.Error())
		w.H.Add(w.ID, in, call, Output{Res: ResUnknown})
		return
	}
	w.H.Add(w.ID, in, call, Output{Res: ResOK, Ino: ino})
}

// Rename renames slot to slot to.
func (w *Worker) Rename(slot, to int) {
	w.change(Input{Op: OpRename, Slot: slot, To: to}, func() error { return w.FS.Rename(Path(slot), Path(to)) })
}

// Unlink removes slot.
func (w *Worker) Unlink(slot int) {
	w.change(Input{Op: OpUnlink, Slot: slot}, func() error { return w.FS.Remove(Path(slot)) })
}

// Chmod sets slot's permission bits.
func (w *Worker) Chmod(slot int, mode uint32) {
	w.change(Input{Op: OpChmod, Slot: slot, Mode: mode}, func() error { return w.FS.Chmod(Path(slot), mode) })
}

// change records a rename, unlink or chmod done by do.
func (w *Worker) change(in Input, do func() error) {
	call := w.H.Now()
	out := Output{}
	if err := do(); err != nil {
		out.Res = w.classify(in.Op.String(), err)
	}
	w.H.Add(w.ID, in, call, out)
}

// Stat records what lstat of slot says.
func (w *Worker) Stat(slot int) {
	in := Input{Op: OpStat, Slot: slot}
	call := w.H.Now()
	st, err := w.FS.Lstat(Path(slot))
	if err != nil {
		if res := w.classify("stat", err); res != ResUnknown { // a failed read says nothing
			w.H.Add(w.ID, in, call, Output{Res: res})
		}
		return
	}
	w.H.Add(w.ID, in, call, Output{Ino: st.Ino, Mode: st.Mode, Size: st.Size})
}

// ReadDir records the names in directory dir (an index of Dirs).
func (w *Worker) ReadDir(dir int) {
	in := Input{Op: OpReaddir, Slot: dir}
	call := w.H.Now()
	names, err := w.FS.ReadDir(Dirs[dir])
	if err != nil {
		w.classify("readdir", err)
		return
	}
	sort.Strings(names)
	w.H.Add(w.ID, in, call, Output{Names: strings.Join(names, ",")})
}

// open opens slot with flag and records what inode it found; nil if none.
func (w *Worker) open(slot, flag int) (File, uint64) {
	in := Input{Op: OpOpen, Slot: slot}
	call := w.H.Now()
	f, err := w.FS.Open(Path(slot), flag)
	if err != nil {
		if res := w.classify("open", err); res != ResUnknown {
			w.H.Add(w.ID, in, call, Output{Res: res})
		}
		return nil, 0
	}
	ino, err := f.Ino()
	if err != nil {
		w.classify("open: fstat", err)
		f.Close()
		return nil, 0
	}
	w.H.Add(w.ID, in, call, Output{Ino: ino})
	return f, ino
}

// Write opens slot, writes a new token at offset 0 and closes: the commit
// (close) is the write's effect on other clients.
func (w *Worker) Write(slot int) {
	f, ino := w.open(slot, os.O_WRONLY)
	if f == nil {
		return
	}
	w.tokens++
	token := fmt.Sprintf("%c%03d", 'A'+w.ID, w.tokens%1000) // TokenLen bytes
	in := Input{Op: OpWrite, Ino: ino, Data: token}
	call := w.H.Now()
	_, err := f.WriteAt([]byte(token), 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	out := Output{}
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		// Another client removed the file: the commit at close found no
		// name holding it (one that renamed it is followed), and the
		// model checks that none did.
		w.LostCloses = append(w.LostCloses, err.Error())
		out.Res = ResNoEnt
	default:
		out.Res = w.classify("write", err)
	}
	w.H.Add(w.ID, in, call, out)
}

// Reread reads the held descriptor again, or opens slot to hold it.
func (w *Worker) Reread(slot int) {
	if w.held == nil {
		w.held, w.heldIno = w.open(slot, os.O_RDONLY)
		w.heldSlot = slot
		return
	}
	in := Input{Op: OpReread, Ino: w.heldIno, Slot: w.heldSlot}
	call := w.H.Now()
	buf := make([]byte, 64)
	n, err := w.held.ReadAt(buf, 0)
	if err != nil && n == 0 && !errors.Is(err, io.EOF) {
		w.classify("reread", err)
	} else {
		w.H.Add(w.ID, in, call, Output{Data: string(buf[:n])})
	}
	if w.rng.IntN(3) == 0 {
		w.CloseHeld()
	}
}
