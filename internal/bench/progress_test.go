package bench

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/waitfor"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestProgressLinesWithoutTerminal: a run whose stderr is no terminal logs
// which benchmark still runs, and its step, while it runs.
func TestProgressLinesWithoutTerminal(t *testing.T) {
	var logs syncLog
	st := &runState{opts: Options{Log: slog.New(slog.NewTextHandler(&logs, nil)), ProgressEvery: 10 * time.Millisecond}}
	st.startBench("seqio")
	(&Env{bench: "seqio", run: st}).step("mount weft")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.heartbeat(ctx)
	}()
	waitfor.Until(t, 10*time.Second, "a progress line", func() bool { return strings.Contains(logs.String(), "still running") })
	cancel()
	<-done
	l := logs.String()
	if !strings.Contains(l, "msg=\"still running\" bench=seqio") || !strings.Contains(l, `step="mount weft"`) {
		t.Errorf("no progress line naming the benchmark and its step:\n%s", l)
	}
	st.endProgress()
	n := strings.Count(logs.String(), "still running")
	st.showProgress()
	if strings.Count(logs.String(), "still running") != n {
		t.Errorf("progress logged between benchmarks")
	}
}

// TestLongTitlesWrap: a title wider than the plot is broken into lines
// that fit, instead of being cut off at both ends.
func TestLongTitlesWrap(t *testing.T) {
	p := plot.New()
	sty := p.Title.TextStyle
	title := "mdtest file-create: ops/s against meta servers (0.5 core each), with a long explanation after it"
	width := 3 * vg.Inch
	if sty.Width(title) <= width {
		t.Fatalf("test title fits in %v already", width)
	}
	got := wrapText(sty, title, width)
	lines := strings.Split(got, "\n")
	if len(lines) < 2 || strings.Join(strings.Fields(got), " ") != title {
		t.Fatalf("wrapText = %q: want the same words on several lines", got)
	}
	for _, l := range lines {
		if sty.Width(l) > width {
			t.Errorf("line %q is %v wide, more than %v", l, sty.Width(l), width)
		}
	}
	f := Figure{Name: "t", Title: title, Series: []Series{{Name: "weft", Points: []Point{{X: 1, Y: 2, Lo: 1, Hi: 3}}}}}
	if _, err := f.save(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}
