package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The import rules of DESIGN.md ("Layout"): imports point one way,
// core/errs <- rpc, layout <- repair <- meta, store, client <- fusefs, bench, cluster, fsck <- cli <- cmd.
// Rules apply to the packages' own (non-test) dependencies, transitively, so
// that a detour through a third package does not hide a violation. Tests may
// assemble servers and clients as they like, except that they too must leave
// go-fuse to fusefs and cli to cmd/weft.

const module = "github.com/weftfs/weft"

// onlyDeps lists, for the bottom layers, every weft component they may
// depend on.
var onlyDeps = map[string][]string{
	"errs":   {},
	"core":   {"errs"},
	"weftpb": {},
	"rpc":    {"core", "errs", "weftpb"},
	"config": {"core", "errs", "erasure"},
	// erasure: the stripe layout and parity, for client and repair.
	"erasure": {"core", "errs"},
	// repair restores chunks over the wire; stores run it for themselves.
	"repair":  {"core", "errs", "weftpb", "rpc", "erasure"},
	"layout":  {"core", "errs"},                  // the meta store's key layout, for meta and fsck
	"search":  {"core", "errs", "weftpb"},        // weft find's query, evaluated by meta and the client
	"auth":    {"core", "errs", "weftpb", "rpc"}, // identities, transport security, capabilities
	"waitfor": {},                                // tests' waits for a condition
	"linz":    {},                                // tests' linearizability model and checker (porcupine)
	"weftbin": {},                                // tests' weft binary, built once

	// sessions, leases and file locks, for meta
	"lease": {"core", "errs", "weftpb", "rpc", "auth"},
	// patchgroups' dependency graph and barrier, for the client
	"patchgroup": {"core", "errs"},
}

// upper are the components that assemble the system; nothing below them
// may depend on them.
var upper = []string{"fusefs", "bench", "cluster", "fsck", "cli"}

// neverDeps lists weft components a component must not depend on.
var neverDeps = map[string][]string{
	"meta":    append([]string{"store", "client"}, upper...), // servers never import each other
	"store":   append([]string{"meta", "client"}, upper...),
	"client":  append([]string{"meta", "store"}, upper...), // the client talks to servers over the wire only
	"fusefs":  {"meta", "store", "cluster", "bench", "cli"},
	"bench":   {"cli"},
	"cluster": {"cli"},
	// the edge server: a meta client over the wire, a server to its clients
	"edge": append([]string{"meta", "store", "client"}, upper...),
	// fsck reads the meta servers' records (their key layout is in
	// layout), never the client's view; it reaches the stores over the
	// wire only (gc).
	"fsck": {"store", "client", "fusefs", "bench", "cluster", "cli"},
}

const goFuse = "github.com/hanwen/go-fuse"

// goPackage is the part of 'go list -json' the rules need.
type goPackage struct {
	ImportPath   string
	Imports      []string
	Deps         []string
	TestImports  []string
	XTestImports []string
}

// component names the part of weft a package belongs to: "meta" for
// internal/meta and its sub-packages, "weftpb" for proto/weftpb, "cmd" for
// commands. Packages outside the module give "".
func component(importPath string) string {
	rel, ok := strings.CutPrefix(importPath, module+"/")
	if !ok {
		return ""
	}
	parts := strings.Split(rel, "/")
	switch {
	case parts[0] == "internal" && len(parts) > 1:
		return parts[1]
	case parts[0] == "proto" && len(parts) > 1:
		return parts[1]
	default:
		return parts[0]
	}
}

// checkImports returns one message per broken rule, sorted.
func checkImports(pkgs []goPackage) []string {
	var violations []string
	report := func(format string, args ...any) {
		violations = append(violations, fmt.Sprintf(format, args...))
	}
	for _, p := range pkgs {
		comp := component(p.ImportPath)
		if comp == "" {
			continue
		}
		// Weft components p depends on, other than its own.
		deps := map[string]string{} // component -> one package that brings it in
		for _, d := range p.Deps {
			if c := component(d); c != "" && c != comp {
				if _, seen := deps[c]; !seen {
					deps[c] = d
				}
			}
		}
		if allowed, ok := onlyDeps[comp]; ok {
			for c, via := range deps {
				if !slices.Contains(allowed, c) {
					report("%s depends on %s (%s); %s may import only %s of weft's packages",
						p.ImportPath, c, via, comp, listOrNothing(allowed))
				}
			}
		}
		for _, c := range neverDeps[comp] {
			if via, ok := deps[c]; ok {
				report("%s depends on %s (%s); %s must never import %s", p.ImportPath, c, via, comp, c)
			}
		}

		direct := slices.Concat(p.Imports, p.TestImports, p.XTestImports)
		if comp != "fusefs" {
			for _, imp := range direct {
				if imp == goFuse || strings.HasPrefix(imp, goFuse+"/") {
					report("%s imports %s; only internal/fusefs may import go-fuse", p.ImportPath, imp)
					break
				}
			}
		}
		if comp != "cmd" && comp != "cli" {
			for _, imp := range direct {
				if component(imp) == "cli" {
					report("%s imports %s; only cmd/weft may import internal/cli", p.ImportPath, imp)
					break
				}
			}
		}
	}
	sort.Strings(violations)
	return violations
}

func listOrNothing(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// listPackages runs 'go list' over the whole module. -e keeps going past
// packages that do not compile: imports are known from the source alone.
func listPackages(t *testing.T) []goPackage {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,Deps,TestImports,XTestImports", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestImportDirection(t *testing.T) {
	pkgs := listPackages(t)
	if len(pkgs) < 5 {
		t.Fatalf("go list found only %d packages; is the test running inside the module?", len(pkgs))
	}
	for _, v := range checkImports(pkgs) {
		t.Error("import rule broken: " + v)
	}
}

// TestImportRulesCatchViolations makes sure the checker itself can fail.
func TestImportRulesCatchViolations(t *testing.T) {
	w := func(rel string) string { return module + "/" + rel }
	tests := []struct {
		name string
		pkg  goPackage
		want string // "" means no violation
	}{
		{"errs imports core", goPackage{ImportPath: w("internal/errs"), Deps: []string{w("internal/core")}},
			"errs may import only none"},
		{"core imports errs", goPackage{ImportPath: w("internal/core"), Deps: []string{"fmt", w("internal/errs")}}, ""},
		{"core imports rpc", goPackage{ImportPath: w("internal/core"), Deps: []string{w("internal/rpc")}},
			"core may import only errs"},
		{"rpc imports weftpb", goPackage{ImportPath: w("internal/rpc"), Deps: []string{w("proto/weftpb"), w("internal/errs")}}, ""},
		{"rpc imports meta", goPackage{ImportPath: w("internal/rpc"), Deps: []string{w("internal/meta")}},
			"rpc may import only core, errs, weftpb"},
		{"meta imports store transitively", goPackage{ImportPath: w("internal/meta/journal"), Deps: []string{w("internal/x"), w("internal/store")}},
			"meta must never import store"},
		{"store imports client", goPackage{ImportPath: w("internal/store"), Deps: []string{w("internal/client")}},
			"store must never import client"},
		{"client imports meta", goPackage{ImportPath: w("internal/client"), Deps: []string{w("internal/meta")}},
			"client must never import meta"},
		{"client imports rpc", goPackage{ImportPath: w("internal/client"), Deps: []string{w("internal/rpc")}}, ""},
		{"client imports go-fuse", goPackage{ImportPath: w("internal/client"), Imports: []string{"github.com/hanwen/go-fuse/v2/fs"}},
			"only internal/fusefs may import go-fuse"},
		{"fusefs imports go-fuse", goPackage{ImportPath: w("internal/fusefs"), Imports: []string{"github.com/hanwen/go-fuse/v2/fuse"}}, ""},
		{"bench test imports cli", goPackage{ImportPath: w("internal/bench"), XTestImports: []string{w("internal/cli")}},
			"only cmd/weft may import internal/cli"},
		{"cmd imports cli", goPackage{ImportPath: w("cmd/weft"), Imports: []string{w("internal/cli")}, Deps: []string{w("internal/cli")}}, ""},
		{"cluster imports meta and client", goPackage{ImportPath: w("internal/cluster"), Deps: []string{w("internal/meta"), w("internal/client")}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkImports([]goPackage{tt.pkg})
			switch {
			case tt.want == "" && len(got) > 0:
				t.Errorf("unexpected violation: %v", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
				t.Errorf("violations = %q, want one containing %q", got, tt.want)
			}
		})
	}
}
