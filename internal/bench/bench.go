// Package bench measures warm functions side by side in one run and
// reports ratios (`make bench`): warm invoke through the HTTP API at
// concurrency 1 and 8, cold start (spawn mode), the fork floor (a plain
// Python process with the same imports doing fork + waitpid), growth with
// the zygote's resident size and with the number of functions deployed
// (warm p50 and the daemon's CPU per request), the memory of a warm child, and runtime pools
// against functions running the same code (pools.go).
//
// Absolute times on a nested-virtualisation host are slow; the ratios,
// measured in the same run, are what the targets in the performance issue
// are about.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// Stats summarises latencies.
type Stats struct {
	N          int
	P50, P99   time.Duration
	Throughput float64 // requests per second, wall clock
	// Phases are the median of each step the daemon timed (its
	// Server-Timing answer header), in the order of the steps.
	Phases []wire.Timing
	// Forked is the share (0-1) of the requests whose child was forked for
	// them (X-Zygo-Child "forked": the pre-forked pool was empty), not taken
	// from the pool.
	Forked float64
	// lat holds every latency, sorted, and wall the series' wall time (for
	// merging the Stats of rounds).
	lat  []time.Duration
	wall time.Duration
}

// merge returns the Stats of rounds taken as one series: percentiles over
// all their latencies, throughput all their requests over all their wall
// time.
func merge(rounds []Stats) Stats {
	var all []time.Duration
	var wall time.Duration
	for _, r := range rounds {
		all = append(all, r.lat...)
		wall += r.wall
	}
	return summarise(all, wall)
}

func summarise(lat []time.Duration, wall time.Duration) Stats {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pick := func(p int) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		i := (len(lat)*p+99)/100 - 1
		return lat[max(i, 0)]
	}
	st := Stats{N: len(lat), P50: pick(50), P99: pick(99), lat: lat, wall: wall}
	if wall > 0 {
		st.Throughput = float64(len(lat)) / wall.Seconds()
	}
	return st
}

// Invoke runs n requests of fn with conc in flight, over conc HTTP/1.1
// connections to the daemon's socket sock (invokeConn), and returns their
// latency statistics; any failed request is an error.
func Invoke(ctx context.Context, sock string, fn string, event string, n, conc int) (Stats, error) {
	return InvokePaced(ctx, sock, fn, event, n, conc, 0)
}

// InvokePaced is Invoke with a pause of gap before each request (after the
// first), as traffic that leaves a pool time to refill would.
func InvokePaced(ctx context.Context, sock string, fn string, event string, n, conc int, gap time.Duration) (Stats, error) {
	lat, steps, forked, wall, err := invokeOn(ctx, sock, fn, event, n, conc, gap)
	if err != nil {
		return Stats{}, err
	}
	st := summarise(lat, wall)
	st.Phases = medianSteps(steps)
	st.Forked = share(forked)
	return st, nil
}

// share returns the fraction (0-1) of bs that are true; 0 for none.
func share(bs []bool) float64 {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	if len(bs) == 0 {
		return 0
	}
	return float64(n) / float64(len(bs))
}

// medianSteps returns the median duration of each named step over the
// requests, in the order the steps first appear.
func medianSteps(reqs [][]wire.Timing) []wire.Timing {
	var order []string
	by := map[string][]time.Duration{}
	for _, steps := range reqs {
		for _, s := range steps {
			if _, ok := by[s.Name]; !ok {
				order = append(order, s.Name)
			}
			by[s.Name] = append(by[s.Name], s.Dur)
		}
	}
	out := make([]wire.Timing, 0, len(order))
	for _, name := range order {
		d := by[name]
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		out = append(out, wire.Timing{Name: name, Dur: d[len(d)/2]})
	}
	return out
}

// ForkFloor runs a plain Python process (the interpreter at python, with
// the given imports) doing os.fork() + os._exit in the child + waitpid in a
// loop of n, and returns the latency statistics of one iteration.
func ForkFloor(ctx context.Context, python string, imports []string, ballastMiB, n int) (Stats, error) {
	script := fmt.Sprintf(`
import os, time, json
%s
BALLAST = b"\x01" * (%d << 20)
lat = []
for _ in range(%d):
    t = time.perf_counter_ns()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    lat.append(time.perf_counter_ns() - t)
print(json.dumps(lat))
`, importLines(imports), ballastMiB, n)
	out, err := exec.CommandContext(ctx, python, "-c", script).Output()
	if err != nil {
		return Stats{}, fmt.Errorf("running the fork floor: %w", err)
	}
	var ns []int64
	if err := json.Unmarshal(out, &ns); err != nil {
		return Stats{}, fmt.Errorf("reading the fork floor: %w", err)
	}
	lat := make([]time.Duration, len(ns))
	var total time.Duration
	for i, v := range ns {
		lat[i] = time.Duration(v)
		total += lat[i]
	}
	return summarise(lat, total), nil
}

func importLines(imports []string) string {
	var b strings.Builder
	for _, m := range imports {
		fmt.Fprintf(&b, "import %s\n", m)
	}
	return b.String()
}

// WriteFunction writes a function directory under root and returns it.
func WriteFunction(root, name, manifestExtra, code string) (string, error) {
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	manifest := fmt.Sprintf("name = %q\nruntime = \"python\"\nhandler = \"main:handler\"\n%s", name, manifestExtra)
	if err := os.WriteFile(filepath.Join(dir, "zygo.toml"), []byte(manifest), 0o644); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "main.py"), []byte(code), 0o644)
}

// PSSKiB returns the proportional set size of pid, KiB, from
// /proc/PID/smaps_rollup (Documentation/filesystems/proc.rst).
func PSSKiB(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("no Pss in smaps_rollup of %d", pid)
}

// Children returns the pids of pid's children (/proc/PID/task/*/children).
func Children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
