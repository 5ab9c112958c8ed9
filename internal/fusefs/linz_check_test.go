package fusefs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The workload and the check of the linearizability tests (linz_test.go):
// one worker per mount does random operations of the model
// (linz_model_test.go) on its mount, each recorded with its call and
// return times; porcupine then looks for an order of the operations that
// respects those times and the model. One worker per mount, because within
// one mount data is coherent but not atomic at close: the kernel's page
// cache shows a write to the mount's other processes before close commits
// it for the other mounts (close-to-open).

// linzWorker does operations on one mount.
type linzWorker struct {
	id   int
	root string // the namespace's directory on the worker's mount
	h    *linzHistory
	rng  *rand.Rand
	// held is a descriptor kept open across operations, for rereads;
	// heldIno the inode its open saw.
	held     *os.File
	heldIno  uint64
	heldSlot int
	tokens   int
	// unexpected counts errors that are neither ENOENT nor EEXIST.
	unexpected []string
	// lostCloses are writes whose close failed because another mount
	// removed the file meanwhile.
	lostCloses []string
}

// linzErr classifies an error; unexpected ones are kept for the report.
func (w *linzWorker) linzErr(op string, err error) linzResult {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return resNoEnt
	case errors.Is(err, fs.ErrExist):
		return resExist
	}
	w.unexpected = append(w.unexpected, op+": "+err.Error())
	return resUnknown
}

func (w *linzWorker) path(slot int) string { return filepath.Join(w.root, linzPath(slot)) }

// run does operations until stop is closed.
func (w *linzWorker) run(stop <-chan struct{}) {
	defer func() {
		if w.held != nil {
			w.held.Close()
		}
	}()
	for {
		select {
		case <-stop:
			return
		default:
		}
		w.step()
	}
}

// step does one random operation.
func (w *linzWorker) step() {
	slot := w.rng.IntN(linzSlots)
	switch r := w.rng.IntN(100); {
	case r < 14:
		w.create(slot)
	case r < 28:
		to := (slot + 1 + w.rng.IntN(linzSlots-1)) % linzSlots
		w.change(linzInput{op: opRename, slot: slot, to: to}, func() error { return os.Rename(w.path(slot), w.path(to)) })
	case r < 36:
		w.change(linzInput{op: opUnlink, slot: slot}, func() error { return os.Remove(w.path(slot)) })
	case r < 46:
		mode := []uint32{0o600, 0o640, 0o644, 0o604}[w.rng.IntN(4)]
		w.change(linzInput{op: opChmod, slot: slot, mode: mode}, func() error { return os.Chmod(w.path(slot), fs.FileMode(mode)) })
	case r < 68:
		w.stat(slot)
	case r < 76:
		w.readdir(w.rng.IntN(len(linzDirs)))
	case r < 88:
		w.write(slot)
	default:
		w.reread(slot)
	}
}

func (w *linzWorker) create(slot int) {
	in := linzInput{op: opCreate, slot: slot}
	call := w.h.now()
	f, err := os.OpenFile(w.path(slot), os.O_RDWR|os.O_CREATE|os.O_EXCL, createMode)
	if err != nil {
		w.h.add(w.id, in, call, linzOutput{res: w.linzErr("create", err)})
		return
	}
	ino, err := fileIno(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// Created, but which inode is not known: it may not be linearized
		// away. Such a history cannot be checked.
		w.unexpected = append(w.unexpected, "create: "+err.Error())
		w.h.add(w.id, in, call, linzOutput{res: resUnknown})
		return
	}
	w.h.add(w.id, in, call, linzOutput{res: resOK, ino: ino})
}

// change records a rename, unlink or chmod done by do.
func (w *linzWorker) change(in linzInput, do func() error) {
	call := w.h.now()
	out := linzOutput{}
	if err := do(); err != nil {
		out.res = w.linzErr(in.op.String(), err)
	}
	w.h.add(w.id, in, call, out)
}

func (w *linzWorker) stat(slot int) {
	in := linzInput{op: opStat, slot: slot}
	call := w.h.now()
	st, err := os.Lstat(w.path(slot))
	if err != nil {
		if res := w.linzErr("stat", err); res != resUnknown { // a failed read says nothing
			w.h.add(w.id, in, call, linzOutput{res: res})
		}
		return
	}
	sys := st.Sys().(*syscall.Stat_t)
	w.h.add(w.id, in, call, linzOutput{ino: sys.Ino, mode: uint32(st.Mode().Perm()), size: st.Size()})
}

func (w *linzWorker) readdir(dir int) {
	in := linzInput{op: opReaddir, slot: dir}
	call := w.h.now()
	ents, err := os.ReadDir(filepath.Join(w.root, linzDirs[dir]))
	if err != nil {
		w.linzErr("readdir", err)
		return
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	w.h.add(w.id, in, call, linzOutput{names: strings.Join(names, ",")})
}

// open opens slot with flag and records what inode it found; nil if none.
func (w *linzWorker) open(slot, flag int) (*os.File, uint64) {
	in := linzInput{op: opOpen, slot: slot}
	call := w.h.now()
	f, err := os.OpenFile(w.path(slot), flag, 0)
	if err != nil {
		if res := w.linzErr("open", err); res != resUnknown {
			w.h.add(w.id, in, call, linzOutput{res: res})
		}
		return nil, 0
	}
	ino, err := fileIno(f)
	if err != nil {
		w.linzErr("open: fstat", err)
		f.Close()
		return nil, 0
	}
	w.h.add(w.id, in, call, linzOutput{ino: ino})
	return f, ino
}

// write opens slot, writes a new token at offset 0 and closes: the commit
// (close) is the write's effect on other mounts.
func (w *linzWorker) write(slot int) {
	f, ino := w.open(slot, os.O_WRONLY)
	if f == nil {
		return
	}
	w.tokens++
	token := fmt.Sprintf("%c%03d", 'A'+w.id, w.tokens%1000) // linzTokenLen bytes
	in := linzInput{op: opWrite, ino: ino, data: token}
	call := w.h.now()
	_, err := f.WriteAt([]byte(token), 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	out := linzOutput{}
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		// Another mount removed the file: the commit at close found no
		// name holding it (one that renamed it is followed), and the
		// model checks that none did.
		w.lostCloses = append(w.lostCloses, err.Error())
		out.res = resNoEnt
	default:
		out.res = w.linzErr("write", err)
	}
	w.h.add(w.id, in, call, out)
}

// reread reads the held descriptor again, or opens slot to hold it.
func (w *linzWorker) reread(slot int) {
	if w.held == nil {
		w.held, w.heldIno = w.open(slot, os.O_RDONLY)
		w.heldSlot = slot
		return
	}
	in := linzInput{op: opReread, ino: w.heldIno, slot: w.heldSlot}
	call := w.h.now()
	buf := make([]byte, 64)
	n, err := w.held.ReadAt(buf, 0)
	if err != nil && n == 0 && !errors.Is(err, io.EOF) {
		w.linzErr("reread", err)
	} else {
		w.h.add(w.id, in, call, linzOutput{data: string(buf[:n])})
	}
	if w.rng.IntN(3) == 0 {
		w.held.Close()
		w.held = nil
	}
}

func fileIno(f *os.File) (uint64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Sys().(*syscall.Stat_t).Ino, nil
}

// linzRun is one recorded run over several mounts.
type linzRun struct {
	h       *linzHistory
	workers []*linzWorker
	stop    chan struct{}
	done    sync.WaitGroup
}

// newLinz makes the namespace under mounts[0] and one worker per mount
// (start starts them); seed makes the run repeatable as far as timing
// allows.
func newLinz(t *testing.T, mounts []string, seed uint64) *linzRun {
	t.Helper()
	for _, d := range linzDirs {
		if err := os.MkdirAll(filepath.Join(mounts[0], "linz", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := &linzRun{h: newLinzHistory(), stop: make(chan struct{})}
	for i, m := range mounts {
		w := &linzWorker{id: i, root: filepath.Join(m, "linz"), h: r.h, rng: rand.New(rand.NewPCG(seed, uint64(i)))}
		r.workers = append(r.workers, w)
	}
	// Stop the workers even if the test fails before it does.
	t.Cleanup(func() { r.end() })
	return r
}

// start starts the workers.
func (r *linzRun) start() {
	for _, w := range r.workers {
		r.done.Add(1)
		go func() {
			defer r.done.Done()
			w.run(r.stop)
		}()
	}
}

// runFor lets the workers run for d (or until the test's deadline is near).
func (r *linzRun) runFor(t *testing.T, d time.Duration) {
	if dl, ok := t.Deadline(); ok {
		d = min(d, time.Until(dl)/2)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	<-timer.C
}

// linzEndWait bounds how long end waits for the workers' operations in
// flight: a mount that hangs must not hang the test. The mounts' cleanup
// (registered before newLinz's) then kills their processes, which fails
// the stuck calls.
const linzEndWait = 30 * time.Second

// end stops the workers and waits for them (each finishes the operation
// it is in), at most linzEndWait; false if some are still in an
// operation.
func (r *linzRun) end() bool {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	done := make(chan struct{})
	go func() {
		r.done.Wait()
		close(done)
	}()
	t := time.NewTimer(linzEndWait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// checkLinz stops the run and checks its history; on a violation it
// writes porcupine's visualization next to the test's temporary files and
// fails. It returns the checker's verdict.
func (r *linzRun) check(t *testing.T) porcupine.CheckResult {
	t.Helper()
	if !r.end() {
		t.Fatalf("a mount's operation did not return within %v of the end of the run", linzEndWait)
	}
	ops := r.h.ops()
	counts := map[linzOp]int{}
	for _, o := range ops {
		counts[o.Input.(linzInput).op]++
	}
	t.Logf("history: %d operations %v, from %s", len(ops), counts, r.h.start.UTC().Format("15:04:05.000000"))
	for _, w := range r.workers {
		if len(w.unexpected) > 0 {
			t.Logf("mount %d: %d unexpected errors, first: %s", w.id, len(w.unexpected), w.unexpected[0])
		}
		if len(w.lostCloses) > 0 {
			t.Logf("mount %d: %d closes failed after another mount removed the file, first: %s", w.id, len(w.lostCloses), w.lostCloses[0])
		}
	}
	return checkLinzOps(t, ops)
}

// checkLinzOps checks ops against the model; on anything but Ok it saves
// the visualization for a person to look at.
func checkLinzOps(t *testing.T, ops []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(linzModel, ops, linzCheckTime(t))
	if res != porcupine.Ok {
		if name, err := saveLinzOps(ops); err == nil {
			t.Logf("history saved in %s (WEFT_LINZ_REPLAY=%s checks it again)", name, name)
		}
		f, err := os.CreateTemp("", "weft-linz-*.html")
		if err == nil {
			if err := porcupine.Visualize(linzModel, info, f); err == nil {
				t.Logf("history checker: %s; visualization in %s", res, f.Name())
			}
			f.Close()
		}
		if res == porcupine.Illegal {
			t.Logf("where the check got stuck:\n%s", explainIllegal(ops, info))
			t.Logf("the shortest illegal prefix of the history:\n%s", minimalIllegal(ops))
		}
	}
	return res
}

// explainIllegal describes where the check got stuck: the end of the
// longest legal order porcupine found, the state it leads to, and the
// operations that could come next (called before the earliest return among
// those left), none of which the model accepts.
func explainIllegal(ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var longest []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, l := range part {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	var b strings.Builder
	state := linzModel.Init()
	type key struct {
		client int
		call   int64
	}
	done := map[key]bool{}
	for i, o := range longest {
		_, state = linzModel.Step(state, o.Input, o.Output)
		done[key{o.ClientId, o.Call}] = true
		if i >= len(longest)-10 {
			fmt.Fprintf(&b, "  legal: %s\n", describeOp(o))
		}
	}
	fmt.Fprintf(&b, "  state: %s\n", linzModel.DescribeState(state))
	var left []porcupine.Operation
	minRet := int64(1<<63 - 1)
	for _, o := range ops {
		if !done[key{o.ClientId, o.Call}] {
			left = append(left, o)
			minRet = min(minRet, o.Return)
		}
	}
	for _, o := range left {
		if o.Call <= minRet {
			fmt.Fprintf(&b, "  next?: %s\n", describeOp(o))
		}
	}
	return b.String()
}

func describeOp(o porcupine.Operation) string {
	return fmt.Sprintf("mount %d [%9.3f ms, %9.3f ms] %s", o.ClientId, float64(o.Call)/1e6, float64(min(o.Return, 1<<53))/1e6,
		describeLinz(o.Input.(linzInput), o.Output.(linzOutput)))
}

// minimalIllegal finds the shortest prefix of ops (in call order) that is
// not linearizable, by bisection, and describes its last operation, the
// one no order can fit, with the operations before it that touched the
// same names or inode in the 100 ms before its call: the smallest failing
// sub-history to read. A prefix leaves out the changes called later; a read
// that overlapped one of them may then be the one that cannot be placed
// (its return time shows it).
func minimalIllegal(ops []porcupine.Operation) string {
	// A check that runs out of time counts as illegal: proving a
	// violation is what takes the checker long (it tries every order).
	illegal := func(n int) bool {
		res, _ := porcupine.CheckOperationsVerbose(linzModel, ops[:n], 30*time.Second)
		return res != porcupine.Ok
	}
	lo, hi := 0, len(ops) // ops[:lo] legal, ops[:hi] illegal
	if !illegal(hi) {
		return "  (the whole history is not found illegal again)"
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if illegal(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	last := ops[hi-1]
	in := last.Input.(linzInput)
	touches := func(o porcupine.Operation) bool {
		oi, oo := o.Input.(linzInput), o.Output.(linzOutput)
		slots := map[int]bool{oi.slot: true}
		if oi.op == opRename {
			slots[oi.to] = true
		}
		switch {
		case in.op == opReaddir:
			return oi.op != opReaddir && oi.op != opWrite && oi.op != opReread &&
				(oi.slot/len(linzNames) == in.slot || oi.op == opRename && oi.to/len(linzNames) == in.slot)
		case in.op == opWrite || in.op == opReread:
			return oi.ino == in.ino || oo.ino == in.ino || oi.op == opRename || oi.op == opUnlink
		}
		return slots[in.slot] || in.op == opRename && slots[in.to] || oi.op == opRename && (oi.to == in.slot || oi.slot == in.slot)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  %d of %d operations; the last one cannot be placed:\n", hi, len(ops))
	for _, o := range ops[:hi-1] {
		if o.Return >= last.Call-int64(100*time.Millisecond) && touches(o) {
			fmt.Fprintf(&b, "    %s\n", describeOp(o))
		}
	}
	fmt.Fprintf(&b, "  > %s\n", describeOp(last))
	return b.String()
}

// linzCheckTime bounds one check (WEFT_LINZ_CHECK_TIME, default 1 minute).
func linzCheckTime(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv("WEFT_LINZ_CHECK_TIME")
	if s == "" {
		return time.Minute
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("WEFT_LINZ_CHECK_TIME=%q: want a duration such as 5m", s)
	}
	return d
}

// linzRecord is an operation as saveLinzOps writes it.
type linzRecord struct {
	Client    int
	Call, Ret int64
	Op        uint8
	Slot, To  int
	Mode      uint32
	Ino       uint64
	Data      string
	Res       uint8
	OutIno    uint64
	OutMode   uint32
	Size      int64
	OutData   string
	Names     string
}

// saveLinzOps writes ops to a temporary file, one JSON record a line.
func saveLinzOps(ops []porcupine.Operation) (string, error) {
	f, err := os.CreateTemp("", "weft-linz-*.jsonl")
	if err != nil {
		return "", err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, o := range ops {
		in, out := o.Input.(linzInput), o.Output.(linzOutput)
		if err := enc.Encode(linzRecord{Client: o.ClientId, Call: o.Call, Ret: o.Return, Op: uint8(in.op), Slot: in.slot, To: in.to,
			Mode: in.mode, Ino: in.ino, Data: in.data, Res: uint8(out.res), OutIno: out.ino, OutMode: out.mode, Size: out.size,
			OutData: out.data, Names: out.names}); err != nil {
			return "", err
		}
	}
	return f.Name(), f.Close()
}

// loadLinzOps reads a file saveLinzOps wrote.
func loadLinzOps(name string) ([]porcupine.Operation, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var ops []porcupine.Operation
	dec := json.NewDecoder(bytes.NewReader(data))
	for dec.More() {
		var r linzRecord
		if err := dec.Decode(&r); err != nil {
			return nil, err
		}
		ops = append(ops, porcupine.Operation{ClientId: r.Client, Call: r.Call, Return: r.Ret,
			Input:  linzInput{op: linzOp(r.Op), slot: r.Slot, to: r.To, mode: r.Mode, ino: r.Ino, data: r.Data},
			Output: linzOutput{res: linzResult(r.Res), ino: r.OutIno, mode: r.OutMode, size: r.Size, data: r.OutData, names: r.Names}})
	}
	return ops, nil
}
