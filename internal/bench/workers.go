package bench

// Worker processes: the weft binary run again as a benchmark worker (the
// environment names its role), stepped through its phases by the benchmark
// over its stdin and stdout. A worker says a word on stdout when it has
// finished a phase and waits for "go" on stdin before it starts the next, so
// the benchmark can time each phase across all workers: from releasing them
// to the last one's word.
//
// RunWorker (checkpoint.go) dispatches the roles in the worker process.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// workerArgsEnv carries a worker's arguments (workerEnv names its role).
const workerArgsEnv = "WEFT_BENCH_ARGS"

// workerTimeout bounds a group of workers from start to end.
const workerTimeout = 30 * time.Minute

// workerGroup is a set of worker processes of one role.
type workerGroup struct {
	cancel context.CancelFunc
	procs  []*workerProc
}

type workerProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *os.File // the read end of its stdout
	lines *bufio.Scanner
	errb  *lockedBuffer
	done  chan struct{} // closed once the process has exited and its stderr is copied
	err   error         // its exit status, once done
}

// startWorkers starts one worker of role per element of args (each its
// WEFT_BENCH_ARGS) from the binary bin. The caller must close the group.
func startWorkers(ctx context.Context, bin, role string, args []string) (*workerGroup, error) {
	ctx, cancel := context.WithTimeout(ctx, workerTimeout)
	g := &workerGroup{cancel: cancel}
	for _, a := range args {
		p, err := startWorker(ctx, bin, role, a)
		if err != nil {
			g.close()
			return nil, fmt.Errorf("start %s worker: %w", role, err)
		}
		g.procs = append(g.procs, p)
	}
	return g, nil
}

func startWorker(ctx context.Context, bin, role, args string) (*workerProc, error) {
	cmd := exec.CommandContext(ctx, bin, "bench")
	cmd.Env = append(os.Environ(), workerEnv+"="+role, workerArgsEnv+"="+args)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// Its stdout is a pipe of our own, not cmd.StdoutPipe: Wait closes
	// that one when the process exits, and a last word still in it would be
	// lost; this one stays readable until close.
	out, w, err := os.Pipe()
	if err != nil {
		in.Close()
		return nil, err
	}
	cmd.Stdout = w
	errb := &lockedBuffer{}
	cmd.Stderr = errb
	err = cmd.Start()
	w.Close()
	if err != nil {
		in.Close()
		out.Close()
		return nil, err
	}
	p := &workerProc{cmd: cmd, in: in, out: out, lines: bufio.NewScanner(out), errb: errb, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// wait returns once every worker has said want (a barrier), or with the
// first failure: a worker that ended (with its stderr) or said something
// else.
func (g *workerGroup) wait(want string) error {
	var wg sync.WaitGroup
	errc := make(chan error, len(g.procs))
	for _, p := range g.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !p.lines.Scan() {
				errc <- p.failure(want)
				return
			}
			if got := p.lines.Text(); got != want {
				errc <- fmt.Errorf("worker said %q, want %q", got, want)
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// failure explains a worker that closed its stdout before saying want: its
// exit status and the end of its stderr, once it has exited.
func (p *workerProc) failure(want string) error {
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		return fmt.Errorf("worker closed its output before %q but did not exit: %s", want, lastLine([]byte(p.errb.String())))
	}
	return fmt.Errorf("worker ended before %q (%v): %s", want, p.err, lastLine([]byte(p.errb.String())))
}

// release lets every worker start its next phase.
func (g *workerGroup) release() error {
	for _, p := range g.procs {
		if _, err := io.WriteString(p.in, "go\n"); err != nil {
			return fmt.Errorf("release worker: %w", err)
		}
	}
	return nil
}

// phase releases the workers and waits until all have said done; it
// returns the time in between.
func (g *workerGroup) phase(done string) (time.Duration, error) {
	start := time.Now()
	if err := g.release(); err != nil {
		return 0, errors.Join(err, g.wait(done))
	}
	if err := g.wait(done); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// close ends the workers and waits for them: a worker exits once its stdin
// closes; one that has not after stopTimeout is killed.
func (g *workerGroup) close() {
	for _, p := range g.procs {
		p.in.Close()
	}
	for _, p := range g.procs {
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			p.cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(stopTimeout): // stuck in the kernel: leave it
			}
		}
		p.out.Close()
	}
	g.cancel()
}

// workerStep is a worker's side of a phase: wait for "go", run, say done.
type workerStep struct {
	in  *bufio.Reader
	out io.Writer
}

// await blocks until the benchmark releases the worker.
func (s workerStep) await() error {
	line, err := s.in.ReadString('\n')
	if err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	if line != "go\n" {
		return fmt.Errorf("barrier: got %q", line)
	}
	return nil
}

// say reports the end of a phase.
func (s workerStep) say(word string) error {
	_, err := fmt.Fprintln(s.out, word)
	return err
}

// runWorkerPhases is a worker's life: say ready, then for each phase wait
// for the release, run it and say its word.
func runWorkerPhases(in io.Reader, out io.Writer, phases []string, words map[string]string, run func(phase string) error) error {
	s := workerStep{in: bufio.NewReader(in), out: out}
	if err := s.say("ready"); err != nil {
		return err
	}
	for _, p := range phases {
		if err := s.await(); err != nil {
			return err
		}
		if err := run(p); err != nil {
			return err
		}
		if err := s.say(words[p]); err != nil {
			return err
		}
	}
	return nil
}
