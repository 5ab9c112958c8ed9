package bench

// CPU time of a target's processes: on a shared machine a mode's cost shows
// in the CPU its processes use per byte moved long before it shows through
// the noise of a wall-clock rate.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, 100 on
// every Linux architecture Go supports.
const userHZ = 100

// processCPU returns the user and system CPU time process pid has used.
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields are counted
	// after its closing parenthesis, where field 3 (state) starts.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:13] { // utime (field 14) and stime (15)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// requestsServed reads the RPC request counters of the servers whose
// metrics are at addrs: how many requests they have served so far, by
// method (requestsByMethod).
func requestsServed(ctx context.Context, addrs []string) (map[string]float64, error) {
	all := make(map[string]float64)
	for _, addr := range addrs {
		if addr == "" {
			return nil, fmt.Errorf("a server has no metrics address")
		}
		by, err := scrapeRequests(ctx, "http://"+addr+"/metrics")
		if err != nil {
			return nil, err
		}
		for k, v := range by {
			all[k] += v
		}
	}
	return all, nil
}

// scrapeRequests reads the Prometheus text at url: its
// *_rpc_requests_total counters by method.
func scrapeRequests(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return requestsByMethod(resp.Body)
}

// requestsByMethod adds up the *_rpc_requests_total samples of Prometheus
// text by their method label, with the status appended when it is not
// "ok" ("lookup not_exist"): which calls a phase made, not only how many
// (a lookup that finds nothing is part of every create).
func requestsByMethod(r io.Reader) (map[string]float64, error) {
	by := make(map[string]float64)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, labels, _ := strings.Cut(line, "{")
		if strings.HasPrefix(line, "#") || !strings.HasSuffix(name, "_rpc_requests_total") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		key := metricLabel(labels, "method")
		if st := metricLabel(labels, "status"); st != "" && st != "ok" {
			key += " " + st
		}
		by[key] += v
	}
	return by, sc.Err()
}

// metricLabel is the value of label name in a Prometheus sample's labels
// (the text after "{"), or "".
func metricLabel(labels, name string) string {
	for _, kv := range strings.Split(strings.SplitN(labels, "}", 2)[0], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.TrimSpace(k) == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// sumRequests adds up requests by method.
func sumRequests(by map[string]float64) float64 {
	var sum float64
	for _, v := range by {
		sum += v
	}
	return sum
}
