package posixtest

import (
	"testing"
)

// testCase is one behaviour, checked on a fresh FS.
type testCase struct {
	name string
	fn   func(t *testing.T, fs FS)
}

// allCases lists the suite, grouped by file. Small cases: an adapter skips
// a known disagreement case by case, and a skip must hide as little as
// possible.
func allCases() []testCase {
	var cs []testCase
	for _, group := range [][]testCase{
		fileCases, dataCases, dirCases, nameCases, renameCases,
		linkCases, symlinkCases, attrCases, timeCases, xattrCases, permCases,
		errnoCases, permErrnoCases,
	} {
		cs = append(cs, group...)
	}
	return cs
}

// CaseNames returns the names of the suite's cases, as the subtests Run
// starts are named.
func CaseNames() []string {
	var names []string
	for _, c := range allCases() {
		names = append(names, c.name)
	}
	return names
}

// Run runs every case as a subtest of t, each with an FS from newFS, called
// inside the subtest (newFS may t.Skip; it should clean up with t.Cleanup).
func Run(t *testing.T, newFS func(t *testing.T) FS) {
	for _, c := range allCases() {
		t.Run(c.name, func(t *testing.T) {
			fs := newFS(t)
			if fs == nil {
				t.Fatal("newFS returned nil")
			}
			c.fn(t, fs)
		})
	}
}
