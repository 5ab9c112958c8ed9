package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/errs"
)

// absent stands for "no such file" among a name's possible contents.
const absent = "\x00absent"

// faultModel is what the fault suite's workload has been told: for each
// name, the contents it may now have. An acknowledged operation leaves one
// possibility; a failed one adds its outcome to what was possible before
// (a failed operation may or may not have taken effect, never partly: a
// failed write is never committed, so its file holds its old content, or
// the new one if only the reply was lost).
type faultModel struct {
	mu       sync.Mutex
	possible map[string][]string
	// slow lists operations that took longer than their bound.
	slow  []string
	bound time.Duration
	ops   int
	fails int
}

func newFaultModel(names []string, bound time.Duration) *faultModel {
	m := &faultModel{possible: map[string][]string{}, bound: bound}
	for _, n := range names {
		m.possible[n] = []string{absent}
	}
	return m
}

// maybe adds content to name's possible contents.
func (m *faultModel) maybe(name, content string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.possible[name], content) {
		m.possible[name] = append(m.possible[name], content)
	}
}

func (m *faultModel) settle(name, content string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops++
	if err == nil {
		m.possible[name] = []string{content}
		return
	}
	m.fails++
	if !slices.Contains(m.possible[name], content) {
		m.possible[name] = append(m.possible[name], content)
	}
}

// timed runs op and notes it if it outlived the bound: no call may block
// past it, whatever the servers do.
func (m *faultModel) timed(what string, op func() error) error {
	start := time.Now()
	err := op()
	if d := time.Since(start); d > m.bound {
		m.mu.Lock()
		m.slow = append(m.slow, fmt.Sprintf("%s took %v (err %v)", what, d.Round(time.Millisecond), err))
		m.mu.Unlock()
	}
	return err
}

// faultWorker runs random puts, overwrites, renames and deletes on its own
// names (so the model needs no ordering between workers) until ctx ends.
func faultWorker(ctx context.Context, c *client.Client, m *faultModel, names []string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed*7+1))
	sizes := []int{0, 100, 5000, 70 << 10, 300 << 10, 4<<20 + 12345}
	for ctx.Err() == nil {
		name := names[rng.IntN(len(names))]
		opCtx, cancel := context.WithTimeout(context.Background(), 2*m.bound)
		switch r := rng.IntN(10); {
		case r < 6:
			data := randomBytes(rng, sizes[rng.IntN(len(sizes))])
			err := m.timed("put "+name, func() error { return putFile(opCtx, c, name, data) })
			if err != nil {
				// The create itself may have committed an empty file.
				m.maybe(name, "")
			}
			m.settle(name, string(data), err)
		case r < 8:
			to := names[rng.IntN(len(names))]
			if to == name {
				break
			}
			m.mu.Lock()
			from := slices.Clone(m.possible[name])
			m.mu.Unlock()
			err := m.timed("rename "+name, func() error { return c.Rename(opCtx, name, to, 0) })
			if errs.Is(err, errs.NotExist) && slices.Equal(from, []string{absent}) {
				break // nothing to rename: nothing happened
			}
			m.mu.Lock()
			if err == nil {
				m.possible[to] = from
				m.possible[name] = []string{absent}
			} else {
				m.fails++
				for _, f := range from {
					if !slices.Contains(m.possible[to], f) {
						m.possible[to] = append(m.possible[to], f)
					}
				}
				if !slices.Contains(m.possible[name], absent) {
					m.possible[name] = append(m.possible[name], absent)
				}
			}
			m.ops++
			m.mu.Unlock()
		default:
			err := m.timed("unlink "+name, func() error { return c.Unlink(opCtx, name) })
			if errs.Is(err, errs.NotExist) {
				err = nil
			}
			m.settle(name, absent, err)
		}
		cancel()
	}
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// putFile writes data as name's whole content; the error of any step,
// close included, means the put failed.
func putFile(ctx context.Context, c *client.Client, name string, data []byte) error {
	f, err := c.Open(ctx, name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// check reads every name and returns what disagrees with the model: a
// content never written or a read that fails (lost data is an error, but
// after repair no data may be lost).
func (m *faultModel) check(ctx context.Context, c *client.Client) []string {
	m.mu.Lock()
	all := make(map[string][]string, len(m.possible))
	for name, possible := range m.possible {
		all[name] = slices.Clone(possible)
	}
	m.mu.Unlock()
	var bad []string
	for name, possible := range all {
		readCtx, cancel := context.WithTimeout(ctx, 2*m.bound)
		var got string
		err := m.timed("read "+name, func() (err error) {
			got, err = readFile(readCtx, c, name)
			return err
		})
		cancel()
		switch {
		case errs.Is(err, errs.NotExist):
			got = absent
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s: read: %v", name, err))
			continue
		}
		if !slices.Contains(possible, got) {
			bad = append(bad, fmt.Sprintf("%s: %s, want one of %s", name, describe(got), describeAll(possible)))
		}
	}
	slices.Sort(bad)
	return bad
}

func readFile(ctx context.Context, c *client.Client, name string) (string, error) {
	f, err := c.Open(ctx, name, os.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, f); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func describe(s string) string {
	switch {
	case s == absent:
		return "absent"
	case len(s) > 0 && s == string(make([]byte, len(s))):
		return fmt.Sprintf("%d zero bytes", len(s))
	}
	return fmt.Sprintf("%d bytes", len(s))
}

func describeAll(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = describe(s)
	}
	return fmt.Sprint(out)
}
