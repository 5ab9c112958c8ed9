package fusefs

import (
	"sort"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestLinzModel checks the history checker itself: it accepts histories
// that have a legal order, and finds the violations the FUSE tests look for
// (a name seen after a rename returned elsewhere, a stale mode, a stale
// reread, a create that went missing).
func TestLinzModel(t *testing.T) {
	type op struct {
		client    int
		call, ret int64
		in        linzInput
		out       linzOutput
	}
	ok := linzOutput{}
	created := func(ino uint64) linzOutput { return linzOutput{ino: ino} }
	statOf := func(ino uint64, mode uint32, size int64) linzOutput {
		return linzOutput{ino: ino, mode: mode, size: size}
	}
	noent := linzOutput{res: resNoEnt}
	const x, y = 0, 1 // a/x, a/y
	for _, tc := range []struct {
		name string
		ops  []op
		want porcupine.CheckResult
	}{
		{"sequential", []op{
			{0, 0, 1, linzInput{op: opCreate, slot: x}, created(7)},
			{1, 2, 3, linzInput{op: opStat, slot: x}, statOf(7, 0o644, 0)},
			{0, 4, 5, linzInput{op: opRename, slot: x, to: y}, ok},
			{1, 6, 7, linzInput{op: opStat, slot: x}, noent},
			{2, 6, 7, linzInput{op: opReaddir, slot: 0}, linzOutput{names: "y"}},
		}, porcupine.Ok},
		{"stale name after a rename returned", []op{
			{0, 0, 1, linzInput{op: opCreate, slot: x}, created(7)},
			{1, 2, 3, linzInput{op: opStat, slot: x}, statOf(7, 0o644, 0)},
			{0, 4, 5, linzInput{op: opRename, slot: x, to: y}, ok},
			{1, 6, 7, linzInput{op: opStat, slot: x}, statOf(7, 0o644, 0)},
		}, porcupine.Illegal},
		{"old name during the rename", []op{
			{0, 0, 1, linzInput{op: opCreate, slot: x}, created(7)},
			{0, 4, 10, linzInput{op: opRename, slot: x, to: y}, ok},
			{1, 5, 6, linzInput{op: opStat, slot: x}, statOf(7, 0o644, 0)},
			{2, 7, 8, linzInput{op: opStat, slot: y}, statOf(7, 0o644, 0)},
		}, porcupine.Ok},
		{"old name seen after the new one", []op{
			{0, 0, 1, linzInput{op: opCreate, slot: x}, created(7)},
			{0, 4, 10, linzInput{op: opRename, slot: x, to: y}, ok},
			{2, 5, 6, linzInput{op: opStat, slot: y}, statOf(7, 0o644, 0)},
			{1, 7, 8, linzInput{op: opStat, slot: x}, statOf(7, 0o644, 0)},
		}, porcupine.Illegal},
		{"stale mode", []op{
			{0, 0, 1, linzInput{op: opCreate, slot: x}, created(7)},
			{0, 2, 3, linzInput{op: opChmod, slot: x, mode: 0o600}, ok},
			{1, 4, 5, linzInput{op: opStat, slot: x}, statOf(7, 0o644, 0)},
		}, porcupine.Illegal},
		{"stale reread of an open file", []op{
			{0, 0, 1, linzInput{op: opCreate, slot: x}, created(7)},
			{1, 2, 3, linzInput{op: opOpen, slot: x}, created(7)},
			{1, 4, 5, linzInput{op: opReread, ino: 7}, linzOutput{data: ""}},
			{0, 6, 7, linzInput{op: opWrite, ino: 7, data: "A001"}, ok},
			{1, 8, 9, linzInput{op: opReread, ino: 7}, linzOutput{data: ""}},
		}, porcupine.Illegal},
		{"write to a renamed file lands under its new name", []op{
			{0, 0, 1, linzInput{op: opCreate, slot: x}, created(7)},
			{0, 2, 3, linzInput{op: opOpen, slot: x}, created(7)},
			{1, 4, 5, linzInput{op: opRename, slot: x, to: y}, ok},
			{0, 6, 7, linzInput{op: opWrite, ino: 7, data: "A001"}, ok},
			{1, 8, 9, linzInput{op: opStat, slot: y}, statOf(7, 0o644, 4)},
		}, porcupine.Ok},
		{"stale reread of a file renamed while open", []op{
			{0, 0, 1, linzInput{op: opCreate, slot: x}, created(7)},
			{1, 2, 3, linzInput{op: opOpen, slot: x}, created(7)},
			{0, 4, 5, linzInput{op: opRename, slot: x, to: y}, ok},
			{0, 6, 7, linzInput{op: opWrite, ino: 7, data: "A001"}, ok},
			{1, 8, 9, linzInput{op: opReread, ino: 7, slot: x}, linzOutput{data: ""}},
		}, porcupine.Illegal},
		{"close of a file another mount removed", []op{
			{0, 0, 1, linzInput{op: opCreate, slot: x}, created(7)},
			{0, 2, 3, linzInput{op: opOpen, slot: x}, created(7)},
			{1, 4, 5, linzInput{op: opUnlink, slot: x}, ok},
			{0, 6, 7, linzInput{op: opWrite, ino: 7, data: "A001"}, noent},
		}, porcupine.Ok},
		{"close says removed, but the file is there", []op{
			{0, 0, 1, linzInput{op: opCreate, slot: x}, created(7)},
			{0, 2, 3, linzInput{op: opOpen, slot: x}, created(7)},
			{1, 4, 5, linzInput{op: opRename, slot: x, to: y}, ok},
			{0, 6, 7, linzInput{op: opWrite, ino: 7, data: "A001"}, noent},
		}, porcupine.Illegal},
		{"missing create", []op{
			{0, 0, 1, linzInput{op: opCreate, slot: x}, created(7)},
			{1, 2, 3, linzInput{op: opReaddir, slot: 0}, linzOutput{names: ""}},
		}, porcupine.Illegal},
		{"unknown outcome may or may not have happened", []op{
			{0, 0, 1, linzInput{op: opCreate, slot: x}, created(7)},
			{0, 2, 1 << 62, linzInput{op: opUnlink, slot: x}, linzOutput{res: resUnknown}},
			{1, 4, 5, linzInput{op: opStat, slot: x}, statOf(7, 0o644, 0)},
			{1, 6, 7, linzInput{op: opStat, slot: x}, noent},
		}, porcupine.Ok},
	} {
		var ops []porcupine.Operation
		for _, o := range tc.ops {
			ops = append(ops, porcupine.Operation{ClientId: o.client, Input: o.in, Call: o.call, Output: o.out, Return: o.ret})
		}
		if got := porcupine.CheckOperations(linzModel, ops); got != (tc.want == porcupine.Ok) {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, got, tc.want == porcupine.Ok)
		}
		if tc.want == porcupine.Illegal {
			// The shrinker names the operation that cannot be placed.
			sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
			last := tc.ops[len(tc.ops)-1]
			if want := describeLinz(last.in, last.out); !strings.Contains(minimalIllegal(ops), "> ") ||
				!strings.HasSuffix(strings.TrimSpace(minimalIllegal(ops)), want) {
				t.Errorf("%s: shortest illegal prefix:\n%s\nwant it to end with %s", tc.name, minimalIllegal(ops), want)
			}
		}
	}
}
