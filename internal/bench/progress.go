package bench

// Progress of a run: a benchmark can take many minutes, and one log line
// when it starts says nothing about whether it still moves. On a terminal a
// spinner shows the benchmark, its current step and the time it has taken;
// elsewhere (a log file, CI) a line is logged every ProgressEvery.

import (
	"context"
	"time"

	"github.com/schollz/progressbar/v3"
)

// defaultProgressEvery is how often a run that is not on a terminal logs
// that it is still running.
const defaultProgressEvery = 30 * time.Second

// benchProgress is what the progress of the running benchmark shows.
type benchProgress struct {
	bench string
	step  string // what runs now ("mount weft", ...), or ""
	began time.Time
}

// startBench begins the progress of benchmark name: a spinner on a
// terminal.
func (st *runState) startBench(name string) {
	st.endProgress()
	st.mu.Lock()
	defer st.mu.Unlock()
	st.mu.current = benchProgress{bench: name, began: time.Now()}
	if st.opts.Progress == nil {
		return
	}
	st.mu.bar = progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(st.opts.Progress),
		progressbar.OptionSetDescription(name),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

// heartbeat logs the running benchmark every ProgressEvery until ctx ends,
// when there is no terminal to draw on, and keeps a spinner turning when
// there is.
func (st *runState) heartbeat(ctx context.Context) {
	every := st.opts.ProgressEvery
	if every <= 0 {
		every = defaultProgressEvery
	}
	if st.opts.Progress != nil {
		every = 200 * time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			st.showProgress()
		}
	}
}

func (st *runState) showProgress() {
	st.mu.Lock()
	defer st.mu.Unlock()
	cur := st.mu.current
	if cur.bench == "" {
		return
	}
	if st.mu.bar != nil {
		_ = st.mu.bar.Add(1) // turns the spinner, refreshes the time
		return
	}
	args := []any{"bench", cur.bench, "elapsed", time.Since(cur.began).Round(time.Second).String()}
	if cur.step != "" {
		args = append(args, "step", cur.step)
	}
	st.opts.Log.Info("still running", args...)
}
