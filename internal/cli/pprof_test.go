package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weftfs/weft/internal/errs"
)

// TestPprofLoopbackOnly: weft mount --pprof serves the profiles on a
// loopback address, refuses any other, and stops serving when stopped.
func TestPprofLoopbackOnly(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:6060", "127.0.0.1"} {
		if _, _, err := servePprof(addr, log); !errs.Is(err, errs.Invalid) {
			t.Errorf("servePprof(%q) = %v, want an Invalid error", addr, err)
		}
	}
	bound, stop, err := servePprof("127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	url := "http://" + bound.String() + "/debug/pprof/cmdline"
	get := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	body, err := get()
	if err != nil {
		t.Fatal(err)
	}
	// cmdline is this test binary's command line, NUL-separated.
	if !strings.Contains(body, ".test") {
		t.Errorf("cmdline = %q, want the test binary's", body)
	}
	stop()
	stopped = true
	http.DefaultClient.CloseIdleConnections()
	if _, err := get(); err == nil {
		t.Error("the profiles are still served after stop")
	}
}
