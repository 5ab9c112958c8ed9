package linz

import (
	"slices"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// Case is a small history whose verdict is known: the check of the
// checker itself. Every test that relies on the checker runs them
// (CheckCases), so that a change of the model that stops it finding a
// violation fails there.
type Case struct {
	Name  string
	Ops   []porcupine.Operation
	Legal bool
}

// Cases are the known histories: ones with a legal order, and the
// violations the clients' tests look for (a name seen after a rename
// returned elsewhere, a stale mode, a stale reread, a create that went
// missing).
func Cases() []Case {
	type op struct {
		client    int
		call, ret int64
		in        Input
		out       Output
	}
	ok := Output{}
	created := func(ino uint64) Output { return Output{Ino: ino} }
	statOf := func(ino uint64, mode uint32, size int64) Output {
		return Output{Ino: ino, Mode: mode, Size: size}
	}
	noent := Output{Res: ResNoEnt}
	const x, y = 0, 1 // a/x, a/y
	var out []Case
	for _, tc := range []struct {
		name  string
		ops   []op
		legal bool
	}{
		{"sequential", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{1, 2, 3, Input{Op: OpStat, Slot: x}, statOf(7, 0o644, 0)},
			{0, 4, 5, Input{Op: OpRename, Slot: x, To: y}, ok},
			{1, 6, 7, Input{Op: OpStat, Slot: x}, noent},
			{2, 6, 7, Input{Op: OpReaddir, Slot: 0}, Output{Names: "y"}},
		}, true},
		{"stale name after a rename returned", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{1, 2, 3, Input{Op: OpStat, Slot: x}, statOf(7, 0o644, 0)},
			{0, 4, 5, Input{Op: OpRename, Slot: x, To: y}, ok},
			{1, 6, 7, Input{Op: OpStat, Slot: x}, statOf(7, 0o644, 0)},
		}, false},
		{"old name during the rename", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{0, 4, 10, Input{Op: OpRename, Slot: x, To: y}, ok},
			{1, 5, 6, Input{Op: OpStat, Slot: x}, statOf(7, 0o644, 0)},
			{2, 7, 8, Input{Op: OpStat, Slot: y}, statOf(7, 0o644, 0)},
		}, true},
		{"old name seen after the new one", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{0, 4, 10, Input{Op: OpRename, Slot: x, To: y}, ok},
			{2, 5, 6, Input{Op: OpStat, Slot: y}, statOf(7, 0o644, 0)},
			{1, 7, 8, Input{Op: OpStat, Slot: x}, statOf(7, 0o644, 0)},
		}, false},
		{"stale mode", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{0, 2, 3, Input{Op: OpChmod, Slot: x, Mode: 0o600}, ok},
			{1, 4, 5, Input{Op: OpStat, Slot: x}, statOf(7, 0o644, 0)},
		}, false},
		{"a chmod that found its file before a rename changes it under its new name", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{0, 2, 10, Input{Op: OpChmod, Slot: x, Mode: 0o600}, ok},
			{1, 3, 4, Input{Op: OpRename, Slot: x, To: y}, ok},
			{2, 5, 6, Input{Op: OpStat, Slot: y}, statOf(7, 0o644, 0)},
			{2, 11, 12, Input{Op: OpStat, Slot: y}, statOf(7, 0o600, 0)},
		}, true},
		{"a chmod's change missing after it returned", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{0, 2, 10, Input{Op: OpChmod, Slot: x, Mode: 0o600}, ok},
			{1, 3, 4, Input{Op: OpRename, Slot: x, To: y}, ok},
			{2, 11, 12, Input{Op: OpStat, Slot: y}, statOf(7, 0o644, 0)},
		}, false},
		{"a stat that found its file before a rename sees a chmod after it", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{1, 2, 10, Input{Op: OpStat, Slot: x}, statOf(7, 0o600, 0)},
			{0, 3, 4, Input{Op: OpRename, Slot: x, To: y}, ok},
			{0, 5, 6, Input{Op: OpChmod, Slot: y, Mode: 0o600}, ok},
		}, true},
		{"a stat reports a file its name never held", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{0, 2, 3, Input{Op: OpCreate, Slot: y}, created(8)},
			{1, 4, 5, Input{Op: OpStat, Slot: x}, statOf(8, 0o644, 0)},
		}, false},
		{"stale reread of an open file", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{1, 2, 3, Input{Op: OpOpen, Slot: x}, created(7)},
			{1, 4, 5, Input{Op: OpReread, Ino: 7}, Output{Data: ""}},
			{0, 6, 7, Input{Op: OpWrite, Ino: 7, Data: "A001"}, ok},
			{1, 8, 9, Input{Op: OpReread, Ino: 7}, Output{Data: ""}},
		}, false},
		{"write to a renamed file lands under its new name", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{0, 2, 3, Input{Op: OpOpen, Slot: x}, created(7)},
			{1, 4, 5, Input{Op: OpRename, Slot: x, To: y}, ok},
			{0, 6, 7, Input{Op: OpWrite, Ino: 7, Data: "A001"}, ok},
			{1, 8, 9, Input{Op: OpStat, Slot: y}, statOf(7, 0o644, 4)},
		}, true},
		{"stale reread of a file renamed while open", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{1, 2, 3, Input{Op: OpOpen, Slot: x}, created(7)},
			{0, 4, 5, Input{Op: OpRename, Slot: x, To: y}, ok},
			{0, 6, 7, Input{Op: OpWrite, Ino: 7, Data: "A001"}, ok},
			{1, 8, 9, Input{Op: OpReread, Ino: 7, Slot: x}, Output{Data: ""}},
		}, false},
		{"close of a file another client removed", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{0, 2, 3, Input{Op: OpOpen, Slot: x}, created(7)},
			{1, 4, 5, Input{Op: OpUnlink, Slot: x}, ok},
			{0, 6, 7, Input{Op: OpWrite, Ino: 7, Data: "A001"}, noent},
		}, true},
		{"close says removed, but the file is there", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{0, 2, 3, Input{Op: OpOpen, Slot: x}, created(7)},
			{1, 4, 5, Input{Op: OpRename, Slot: x, To: y}, ok},
			{0, 6, 7, Input{Op: OpWrite, Ino: 7, Data: "A001"}, noent},
		}, false},
		{"missing create", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{1, 2, 3, Input{Op: OpReaddir, Slot: 0}, Output{Names: ""}},
		}, false},
		{"unknown outcome may or may not have happened", []op{
			{0, 0, 1, Input{Op: OpCreate, Slot: x}, created(7)},
			{0, 2, 1 << 62, Input{Op: OpUnlink, Slot: x}, Output{Res: ResUnknown}},
			{1, 4, 5, Input{Op: OpStat, Slot: x}, statOf(7, 0o644, 0)},
			{1, 6, 7, Input{Op: OpStat, Slot: x}, noent},
		}, true},
	} {
		c := Case{Name: tc.name, Legal: tc.legal}
		for _, o := range tc.ops {
			in := o.in
			in.Client = o.client
			for _, s := range Split(in, o.out) { // as History.Add records it
				s.Call, s.Return = o.call, o.ret
				c.Ops = append(c.Ops, s)
			}
		}
		out = append(out, c)
	}
	return out
}

// CheckCases checks that the checker gives every known history its
// verdict, and that for an illegal one the shortest illegal prefix ends
// with the operation that cannot be placed (a step of the case's last
// call).
func CheckCases(tb testing.TB) {
	tb.Helper()
	for _, c := range Cases() {
		if got := porcupine.CheckOperations(Model, c.Ops); got != c.Legal {
			tb.Errorf("%s: linearizable = %v, want %v", c.Name, got, c.Legal)
		}
		if c.Legal {
			continue
		}
		last := c.Ops[len(c.Ops)-1]
		var wants []string
		for _, o := range c.Ops {
			if o.ClientId == last.ClientId && o.Call == last.Call {
				wants = append(wants, Describe(o.Input.(Input), o.Output.(Output)))
			}
		}
		ops := SortOps(append([]porcupine.Operation(nil), c.Ops...))
		got := MinimalIllegal(ops)
		if !strings.Contains(got, "> ") || !slices.ContainsFunc(wants, func(w string) bool { return strings.HasSuffix(strings.TrimSpace(got), w) }) {
			tb.Errorf("%s: shortest illegal prefix:\n%s\nwant it to end with one of %q", c.Name, got, wants)
		}
	}
}
