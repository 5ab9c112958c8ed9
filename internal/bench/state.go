package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// runState is what the benchmarks of one run share: the targets asked for,
// the installed tools, the mounts to tear down, what was skipped and why,
// the versions of what ran, and the progress bar.
type runState struct {
	opts    Options
	targets []string // target kinds, expanded (juicefs -> juicefs-sqlite, juicefs-redis)
	tools   *tools

	mu struct {
		sync.Mutex
		mounts   []*Mount            // open mounts, closed by closeAll
		skipped  map[string][]string // "target: reason" -> benchmarks
		order    []string            // of skipped keys
		versions map[string]string
		notes    []string
		bar      *progressbar.ProgressBar
		current  benchProgress // progress.go
	}
}

func newRunState(opts Options, targets []string) (*runState, error) {
	cache := opts.Cache
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			dir = os.TempDir()
		}
		cache = filepath.Join(dir, "weft-bench")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	st := &runState{opts: opts, targets: targets, tools: newTools(cache, opts.Log, opts.InstallDeps)}
	st.mu.skipped = map[string][]string{}
	st.mu.versions = map[string]string{}
	st.mu.notes = []string{nfsNote()}
	return st, nil
}

// skip records that target could not take part in bench, and why. The same
// reason across benchmarks is reported once.
func (st *runState) skip(bench, target string, err error) {
	key := fmt.Sprintf("%s: %v", target, err)
	st.opts.Log.Warn("target skipped", "bench", bench, "target", target, "reason", err)
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.mu.skipped[key]; !ok {
		st.mu.order = append(st.mu.order, key)
	}
	if !slices.Contains(st.mu.skipped[key], bench) {
		st.mu.skipped[key] = append(st.mu.skipped[key], bench)
	}
}

func (st *runState) skippedList() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []string
	for _, k := range st.mu.order {
		target, reason, _ := strings.Cut(k, ": ")
		out = append(out, fmt.Sprintf("target %s skipped (in %s): %s", target, strings.Join(st.mu.skipped[k], ", "), reason))
	}
	return out
}

func (st *runState) note(n string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !slices.Contains(st.mu.notes, n) {
		st.mu.notes = append(st.mu.notes, n)
	}
}

func (st *runState) notes() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Clone(st.mu.notes)
}

// version records what version of name ran.
func (st *runState) version(name, v string) {
	if v == "" {
		return
	}
	st.mu.Lock()
	st.mu.versions[name] = v
	st.mu.Unlock()
}

func (st *runState) versionMap() map[string]string {
	st.mu.Lock()
	defer st.mu.Unlock()
	m := map[string]string{}
	for k, v := range st.mu.versions {
		m[k] = v
	}
	return m
}

func (st *runState) addMount(m *Mount) {
	st.mu.Lock()
	st.mu.mounts = append(st.mu.mounts, m)
	st.mu.Unlock()
}

// closeAll tears down every mount still open, newest first.
func (st *runState) closeAll() {
	st.mu.Lock()
	ms := st.mu.mounts
	st.mu.mounts = nil
	st.mu.Unlock()
	for i := len(ms) - 1; i >= 0; i-- {
		if err := ms[i].Close(); err != nil {
			st.opts.Log.Warn("teardown failed", "target", ms[i].Target.Name, "err", err)
		}
	}
}

// progress starts the benchmark's progress bar with total steps.
func (e *Env) progress(total int) {
	st := e.run
	st.endProgress()
	if st.opts.Progress == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.mu.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(st.opts.Progress),
		progressbar.OptionSetDescription(e.bench),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

// step advances the progress bar by one and shows what runs next.
func (e *Env) step(what string) {
	st := e.run
	st.mu.Lock()
	defer st.mu.Unlock()
	st.mu.current.step = what
	if st.mu.bar == nil {
		return
	}
	st.mu.bar.Describe(e.bench + ": " + what)
	st.mu.bar.Add(1)
}

func (st *runState) endProgress() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.mu.bar != nil {
		st.mu.bar.Finish()
		st.mu.bar = nil
	}
	st.mu.current = benchProgress{}
}

// skip records that target could not take part in this benchmark.
func (e *Env) skip(target string, err error) { e.run.skip(e.bench, target, err) }

// note adds a line to the report's notes.
func (e *Env) note(n string) { e.run.note(n) }
