package linz

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Check checks ops against the model, for at most timeout (Unknown
// after). On anything but Ok it saves the history (LoadOps reads it back)
// and porcupine's visualization, and on Illegal it logs where the check
// got stuck and the shortest illegal prefix of the history.
func Check(tb testing.TB, ops []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
	tb.Helper()
	return checkIn(tb, "", ops, timeout)
}

// checkIn is Check, saving in dir ("": the system's temporary directory).
func checkIn(tb testing.TB, dir string, ops []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
	tb.Helper()
	res, info := porcupine.CheckOperationsVerbose(Model, ops, timeout)
	if res == porcupine.Ok {
		return res
	}
	if name, err := saveOpsIn(dir, ops); err == nil {
		tb.Logf("history saved in %s (WEFT_LINZ_REPLAY=%s checks it again)", name, name)
	}
	f, err := os.CreateTemp(dir, "weft-linz-*.html")
	if err == nil {
		if err := porcupine.Visualize(Model, info, f); err == nil {
			tb.Logf("history checker: %s; visualization in %s", res, f.Name())
		}
		f.Close()
	}
	if res == porcupine.Illegal {
		tb.Logf("where the check got stuck:\n%s", explainIllegal(ops, info))
		tb.Logf("the shortest illegal prefix of the history:\n%s", MinimalIllegal(ops))
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
	st := Model.Init()
	type key struct {
		client int
		call   int64
	}
	done := map[key]bool{}
	for i, o := range longest {
		_, st = Model.Step(st, o.Input, o.Output)
		done[key{o.ClientId, o.Call}] = true
		if i >= len(longest)-10 {
			fmt.Fprintf(&b, "  legal: %s\n", DescribeOp(o))
		}
	}
	fmt.Fprintf(&b, "  state: %s\n", Model.DescribeState(st))
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
			fmt.Fprintf(&b, "  next?: %s\n", DescribeOp(o))
		}
	}
	return b.String()
}

// DescribeOp is a recorded operation with its client and times (ms since
// the history's start).
func DescribeOp(o porcupine.Operation) string {
	return fmt.Sprintf("client %d [%9.3f ms, %9.3f ms] %s", o.ClientId, float64(o.Call)/1e6, float64(min(o.Return, 1<<53))/1e6,
		Describe(o.Input.(Input), o.Output.(Output)))
}

// MinimalIllegal finds the shortest prefix of ops (in call order) that is
// not linearizable, by bisection, and describes its last operation, the
// one no order can fit, with the operations before it that touched the
// same names or inode in the 100 ms before its call: the smallest failing
// sub-history to read. A prefix leaves out the changes called later; a read
// that overlapped one of them may then be the one that cannot be placed
// (its return time shows it).
func MinimalIllegal(ops []porcupine.Operation) string {
	// A check that runs out of time counts as illegal: proving a
	// violation is what takes the checker long (it tries every order).
	illegal := func(n int) bool {
		res, _ := porcupine.CheckOperationsVerbose(Model, ops[:n], 30*time.Second)
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
	in := last.Input.(Input)
	touches := func(o porcupine.Operation) bool {
		oi, oo := o.Input.(Input), o.Output.(Output)
		slots := map[int]bool{oi.Slot: true}
		if oi.Op == OpRename {
			slots[oi.To] = true
		}
		switch {
		case in.Op == OpReaddir:
			return oi.Op != OpReaddir && oi.Op != OpWrite && oi.Op != OpReread &&
				(oi.Slot/len(Names) == in.Slot || oi.Op == OpRename && oi.To/len(Names) == in.Slot)
		case in.Op == OpWrite || in.Op == OpReread:
			return oi.Ino == in.Ino || oo.Ino == in.Ino || oi.Op == OpRename || oi.Op == OpUnlink
		case in.Op == OpAttr && (oi.Ino == in.Ino || oo.Ino == in.Ino):
			return true
		}
		return slots[in.Slot] || in.Op == OpRename && slots[in.To] || oi.Op == OpRename && (oi.To == in.Slot || oi.Slot == in.Slot)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  %d of %d operations; the last one cannot be placed:\n", hi, len(ops))
	for _, o := range ops[:hi-1] {
		if o.Return >= last.Call-int64(100*time.Millisecond) && touches(o) {
			fmt.Fprintf(&b, "    %s\n", DescribeOp(o))
		}
	}
	fmt.Fprintf(&b, "  > %s\n", DescribeOp(last))
	return b.String()
}

// record is an operation as SaveOps writes it (field names as the FUSE
// tests' saved histories have them).
type record struct {
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

// SaveOps writes ops to a temporary file, one JSON record a line, and
// returns its name.
func SaveOps(ops []porcupine.Operation) (string, error) { return saveOpsIn("", ops) }

func saveOpsIn(dir string, ops []porcupine.Operation) (string, error) {
	f, err := os.CreateTemp(dir, "weft-linz-*.jsonl")
	if err != nil {
		return "", err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, o := range ops {
		in, out := o.Input.(Input), o.Output.(Output)
		if err := enc.Encode(record{Client: o.ClientId, Call: o.Call, Ret: o.Return, Op: uint8(in.Op), Slot: in.Slot, To: in.To,
			Mode: in.Mode, Ino: in.Ino, Data: in.Data, Res: uint8(out.Res), OutIno: out.Ino, OutMode: out.Mode, Size: out.Size,
			OutData: out.Data, Names: out.Names}); err != nil {
			return "", err
		}
	}
	return f.Name(), f.Close()
}

// LoadOps reads a file SaveOps wrote. A history saved before stats and
// chmods were split into their steps (it has no lookup) is split as
// History.Add would have.
func LoadOps(name string) ([]porcupine.Operation, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var ops []porcupine.Operation
	split := false
	dec := json.NewDecoder(bytes.NewReader(data))
	for dec.More() {
		var r record
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if r.Client < 0 || r.Client >= MaxClients || r.Slot < 0 || r.Slot >= Slots || r.To < 0 || r.To >= Slots ||
			Op(r.Op) > OpSetMode || Result(r.Res) > ResUnknown {
			return nil, fmt.Errorf("%s: not a history of this model: %+v", name, r)
		}
		split = split || Op(r.Op) >= OpLookup
		ops = append(ops, porcupine.Operation{ClientId: r.Client, Call: r.Call, Return: r.Ret,
			Input:  Input{Op: Op(r.Op), Client: r.Client, Slot: r.Slot, To: r.To, Mode: r.Mode, Ino: r.Ino, Data: r.Data},
			Output: Output{Res: Result(r.Res), Ino: r.OutIno, Mode: r.OutMode, Size: r.Size, Data: r.OutData, Names: r.Names}})
	}
	if split {
		return ops, nil
	}
	var steps []porcupine.Operation
	for _, o := range ops {
		for _, s := range Split(o.Input.(Input), o.Output.(Output)) {
			s.Call, s.Return = o.Call, o.Return
			steps = append(steps, s)
		}
	}
	return steps, nil
}
