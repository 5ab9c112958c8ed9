package waitfor

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fatalTB records Fatalf and stops the waiting goroutine as testing does.
type fatalTB struct {
	testing.TB
	msg string
}

type stopped struct{}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(stopped{})
}

func run(f func(tb testing.TB)) (msg string) {
	tb := &fatalTB{}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stopped); !ok {
				panic(r)
			}
			msg = tb.msg
		}
	}()
	f(tb)
	return ""
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 5 {
			n.Add(1)
		}
	}()
	if msg := run(func(tb testing.TB) { Until(tb, 10*time.Second, "five", func() bool { return n.Load() == 5 }) }); msg != "" {
		t.Fatalf("Until failed: %s", msg)
	}
}

func TestUntilFailsAtTheDeadline(t *testing.T) {
	start := time.Now()
	msg := run(func(tb testing.TB) { Until(tb, 50*time.Millisecond, "never", func() bool { return false }) })
	if msg == "" || !strings.Contains(msg, "never") {
		t.Fatalf("Until of a condition that never holds: %q", msg)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Until took %v past a 50ms deadline", d)
	}
}

func TestNoErrorReportsTheLastError(t *testing.T) {
	msg := run(func(tb testing.TB) {
		NoError(tb, 20*time.Millisecond, "the store empties", func() error { return errors.New("3 chunks left") })
	})
	if !strings.Contains(msg, "3 chunks left") {
		t.Fatalf("NoError's failure does not carry the last error: %q", msg)
	}
}
