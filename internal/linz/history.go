package linz

import (
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// neverReturned is the return time of an operation whose outcome is
// unknown: as far as the checker knows it may take effect at any time
// after its call.
const neverReturned = 1<<62 - 1

// History records operations from many goroutines, with times on one
// monotonic clock.
type History struct {
	start time.Time
	mu    struct {
		sync.Mutex
		ops []porcupine.Operation
	}
}

// NewHistory starts an empty history; its clock starts now.
func NewHistory() *History { return &History{start: time.Now()} }

// Start is when the history's clock started.
func (h *History) Start() time.Time { return h.start }

// Now is the history's clock: call it right before an operation.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records an operation of client (< MaxClients) that was called at
// call (Now before it); it returned now. An operation whose outcome is
// unknown never returned, as far as the checker knows. A stat or chmod that
// found its file is recorded as its two steps (Split).
func (h *History) Add(client int, in Input, call int64, out Output) {
	ret := h.Now()
	if out.Res == ResUnknown {
		ret = neverReturned
	}
	in.Client = client
	ops := Split(in, out)
	for i := range ops {
		ops[i].Call, ops[i].Return = call, ret
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.ops = append(h.mu.ops, ops...)
}

// Ops returns the operations recorded so far, in call order.
func (h *History) Ops() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return SortOps(append([]porcupine.Operation(nil), h.mu.ops...))
}

// SortOps sorts ops by call time, in place (the steps of one call stay in
// their order), and returns them.
func SortOps(ops []porcupine.Operation) []porcupine.Operation {
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops
}
