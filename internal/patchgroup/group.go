// Package patchgroup is the dependency graph and ordering engine of
// patchgroups (Featherstitch, issue 15; docs/design.md "Write ordering"):
// an application says "nothing of these changes may become durable before
// all of those", and gets crash consistency without an fsync per step.
//
// The engine is a barrier at the first use: before a change made under a
// group is sent anywhere (a metadata request, or file data taken into the
// client's write buffers), every group it depends on is made durable
// (Group.Sync). A group with a dependent is sealed, so its set of changes
// is final when the barrier runs. What "durable" takes is the Syncer's
// business (the client: flush the files written, sync the meta servers
// changed when they acknowledge before their WAL is synced). A group does
// not make its changes atomic: each operation keeps its own guarantee
// (the soft-updates order across servers).
package patchgroup

import (
	"context"
	"slices"
	"sync"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// Changes is what a group must make durable: data written to files,
// metadata changed on meta servers (by index), and metadata changes queued
// in the client's write-back queues of directories (sent, then synced).
type Changes struct {
	Inos  []core.Ino
	Metas []int
	Dirs  []core.Ino
}

// Syncer makes changes durable.
type Syncer interface {
	SyncChanges(ctx context.Context, ch Changes) error
}

// Group is a set of changes with ordering constraints.
type Group struct {
	id uint64
	s  Syncer
	mu struct {
		sync.Mutex
		deps       []*Group
		dependents int // > 0: sealed, no longer engaged
		engaged    int
		closed     bool
		changes    uint64 // changes made under the group so far
		synced     uint64 // changes covered by the last Sync
		metas      map[int]bool
		inos       map[core.Ino]bool
		dirs       map[core.Ino]bool
	}
}

// New returns an empty group whose changes s makes durable.
func New(id uint64, s Syncer) *Group { return &Group{id: id, s: s} }

// ID is the group's number.
func (g *Group) ID() uint64 { return g.id }

// DependOn makes every change of g wait until all of other's are durable.
// other is sealed by it: it can no longer be engaged. A dependency on a
// group engaged now (its changes are not final), on a closed group, on g
// itself, on another syncer's group, or one that would close a cycle is
// refused.
func (g *Group) DependOn(other *Group) error {
	const op = "patchgroup depend"
	switch {
	case other == nil || other.s != g.s:
		return errs.New(errs.Invalid, op, "the other group is not of this client")
	case other == g:
		return errs.New(errs.Invalid, op, "a group cannot depend on itself")
	case other.dependsOn(g):
		return errs.New(errs.Invalid, op, "group %d already depends on group %d: a cycle", other.id, g.id)
	}
	other.mu.Lock()
	switch {
	case other.mu.closed:
		other.mu.Unlock()
		return errs.New(errs.BadHandle, op, "group %d is closed", other.id)
	case other.mu.engaged > 0:
		other.mu.Unlock()
		return errs.New(errs.Busy, op, "group %d is engaged: disengage it first, so that its changes are final", other.id)
	}
	other.mu.dependents++
	other.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.closed {
		return errs.New(errs.BadHandle, op, "group %d is closed", g.id)
	}
	g.mu.deps = append(g.mu.deps, other)
	return nil
}

// dependsOn reports whether g depends on other, directly or not.
func (g *Group) dependsOn(other *Group) bool {
	seen := map[*Group]bool{}
	stack := []*Group{g}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if x == other {
			return true
		}
		if seen[x] {
			continue
		}
		seen[x] = true
		x.mu.Lock()
		stack = append(stack, x.mu.deps...)
		x.mu.Unlock()
	}
	return false
}

// Engage counts one engagement: the group collects changes until the
// matching Disengage. A sealed or closed group is refused.
func (g *Group) Engage() error {
	const op = "patchgroup engage"
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.mu.closed:
		return errs.New(errs.BadHandle, op, "group %d is closed", g.id)
	case g.mu.dependents > 0:
		return errs.New(errs.Invalid, op, "group %d has a dependent: it is sealed", g.id)
	}
	g.mu.engaged++
	return nil
}

// Disengage ends one Engage.
func (g *Group) Disengage() {
	g.mu.Lock()
	g.mu.engaged = max(0, g.mu.engaged-1)
	g.mu.Unlock()
}

// Close ends the group: it can no longer be engaged or depended on. Its
// changes keep their order, and groups that depend on it still wait for
// them.
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.mu.closed:
		return errs.New(errs.BadHandle, "patchgroup close", "group %d is already closed", g.id)
	case g.mu.engaged > 0:
		return errs.New(errs.Busy, "patchgroup close", "group %d is engaged", g.id)
	}
	g.mu.closed = true
	return nil
}

// Barrier makes every dependency of groups durable: what runs before a
// change made under groups is sent.
func Barrier(ctx context.Context, groups []*Group) error {
	for _, g := range groups {
		g.mu.Lock()
		deps := slices.Clone(g.mu.deps)
		g.mu.Unlock()
		for _, d := range deps {
			if err := d.Sync(ctx); err != nil {
				return errs.Wrap(errs.KindOf(err), "patchgroup barrier", "", err)
			}
		}
	}
	return nil
}

// NoteMeta records a metadata change sent to meta server srv. Record it
// whether or not the request succeeded: a failed one may still have been
// applied.
func NoteMeta(groups []*Group, srv int) {
	note(groups, func(g *Group) { g.mu.metas = addTo(g.mu.metas, srv) })
}

// NoteDir records a metadata change queued in the client's write-back
// queue of dir: making it durable sends the queue first.
func NoteDir(groups []*Group, dir core.Ino) {
	note(groups, func(g *Group) { g.mu.dirs = addTo(g.mu.dirs, dir) })
}

// NoteData records data written to ino.
func NoteData(groups []*Group, ino core.Ino) {
	note(groups, func(g *Group) { g.mu.inos = addTo(g.mu.inos, ino) })
}

// note counts a change in each of groups, recorded by add under the
// group's lock.
func note(groups []*Group, add func(*Group)) {
	for _, g := range groups {
		g.mu.Lock()
		add(g)
		g.mu.changes++
		g.mu.Unlock()
	}
}

// addTo adds k to the set m, making it if needed.
func addTo[K comparable](m map[K]bool, k K) map[K]bool {
	if m == nil {
		m = map[K]bool{}
	}
	m[k] = true
	return m
}

// Sync waits until every change of g, and of every group it depends on,
// is durable.
func (g *Group) Sync(ctx context.Context) error {
	if err := Barrier(ctx, []*Group{g}); err != nil {
		return err
	}
	g.mu.Lock()
	if g.mu.synced == g.mu.changes {
		g.mu.Unlock()
		return nil
	}
	changes := g.mu.changes
	var ch Changes
	for ino := range g.mu.inos {
		ch.Inos = append(ch.Inos, ino)
	}
	for srv := range g.mu.metas {
		ch.Metas = append(ch.Metas, srv)
	}
	for dir := range g.mu.dirs {
		ch.Dirs = append(ch.Dirs, dir)
	}
	g.mu.Unlock()
	if err := g.s.SyncChanges(ctx, ch); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.synced = max(g.mu.synced, changes)
	if g.mu.synced == g.mu.changes {
		g.mu.inos, g.mu.metas, g.mu.dirs = nil, nil, nil
	}
	return nil
}
