package bench

// Benchmarks of an older build (Options.BaseWeft) in the same run, for the
// ones whose weft runs inside the benchmark's own process (putget's client
// library): the base binary runs its own `weft bench NAME` as a child, and
// its results come back as "(base)" columns.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// baseBenchTimeout bounds the base build's run of one benchmark.
const baseBenchTimeout = 2 * time.Hour

// runBaseBench runs benchmark name with the base build, at this run's
// repeats and sizes, and returns its results with each target renamed to
// its base column.
func runBaseBench(ctx context.Context, env *Env, name string) ([]Result, error) {
	out := filepath.Join(env.Dir, "base-"+name)
	args := []string{"bench", name, "--out", out, "--repeats", strconv.Itoa(env.Repeats), "--install-deps=false"}
	if env.Quick {
		args = append(args, "--quick")
	}
	ctx, cancel := context.WithTimeout(ctx, baseBenchTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.BaseWeft, args...)
	logPath := out + ".log"
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(logPath)
		return nil, errs.New(errs.IO, "base build", "%s %v: %v: %s", env.BaseWeft, args, err, lastLine(b))
	}
	js, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(js, &rep); err != nil {
		return nil, fmt.Errorf("base build's results.json: %w", err)
	}
	if len(rep.Skipped) > 0 {
		return nil, errs.New(errs.IO, "base build", "skipped: %v", rep.Skipped)
	}
	var res []Result
	for _, r := range rep.Results {
		if r.Bench == name {
			r.Target = baseName(r.Target)
			res = append(res, r)
		}
	}
	if len(res) == 0 {
		return nil, errs.New(errs.IO, "base build", "no %s results in %s", name, out)
	}
	return res, nil
}
