package metrics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// FunctionSample is what a scrape reads of one loaded function.
type FunctionSample struct {
	Name     string
	InFlight int // requests holding a concurrency slot
	Waiting  int // requests waiting for a slot
	PoolIdle int // pre-forked children (Python) or ready workers (Node) waiting for a request
	// ZygoteHostPID is the zygote's host pid, whose memory is read from
	// /proc/PID/smaps_rollup; 0 when the function has no long-lived zygote (spawn mode, Node,
	// not ready).
	ZygoteHostPID int
}

// SandboxCount is how many sandboxes are in one state.
type SandboxCount struct {
	State string
	Count int
}

// scrapeTimeout bounds what one scrape waits for the sandbox sampler.
const scrapeTimeout = 5 * time.Second

// WatchFunctions registers a collector that calls sample at every scrape for the gauges of
// each loaded function (in flight, waiting, pool, zygote memory). sample must be cheap and
// safe for concurrent use; it is called once per scrape.
func (r *Registry) WatchFunctions(sample func() []FunctionSample) {
	r.reg.MustRegister(&functionCollector{sample: sample, smaps: readSmapsRollup})
}

// WatchSandboxes registers a collector that calls count at every scrape (bounded by 5 s) for
// zygo_sandboxes{state}. Every state of states is exported, at 0 when none is in it. An error
// of count fails the scrape (500 naming it).
func (r *Registry) WatchSandboxes(states []string, count func(context.Context) ([]SandboxCount, error)) {
	r.reg.MustRegister(&sandboxCollector{states: states, count: count})
}

var (
	inFlightDesc = prometheus.NewDesc("zygo_function_requests_in_flight",
		"Requests of a function holding a concurrency slot.", []string{"function"}, nil)
	waitingDesc = prometheus.NewDesc("zygo_function_requests_waiting",
		"Requests of a function waiting for a concurrency slot (its queue).", []string{"function"}, nil)
	poolDesc = prometheus.NewDesc("zygo_function_pool_idle",
		"Pre-forked children (Python) or ready workers (Node) of a function waiting for a request.", []string{"function"}, nil)
	rssDesc = prometheus.NewDesc("zygo_function_zygote_rss_bytes",
		"Resident memory of a function's zygote (Rss of /proc/PID/smaps_rollup), bytes.", []string{"function"}, nil)
	pssDesc = prometheus.NewDesc("zygo_function_zygote_pss_bytes",
		"Proportional set size of a function's zygote (Pss of /proc/PID/smaps_rollup), bytes.", []string{"function"}, nil)
	sandboxesDesc = prometheus.NewDesc("zygo_sandboxes", "Sandboxes by state.", []string{"state"}, nil)
)

// functionCollector reads the function gauges at scrape time.
type functionCollector struct {
	sample func() []FunctionSample
	smaps  func(pid int) (rss, pss int64, err error)
}

func (c *functionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{inFlightDesc, waitingDesc, poolDesc, rssDesc, pssDesc} {
		ch <- d
	}
}

// Collect exports each function's gauges; a zygote whose memory cannot be read (it just
// exited) has no memory series in this scrape.
func (c *functionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.sample() {
		ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(s.InFlight), s.Name)
		ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(s.Waiting), s.Name)
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(s.PoolIdle), s.Name)
		if s.ZygoteHostPID <= 0 {
			continue
		}
		if rss, pss, err := c.smaps(s.ZygoteHostPID); err == nil {
			ch <- prometheus.MustNewConstMetric(rssDesc, prometheus.GaugeValue, float64(rss), s.Name)
			ch <- prometheus.MustNewConstMetric(pssDesc, prometheus.GaugeValue, float64(pss), s.Name)
		}
	}
}

// sandboxCollector reads the sandbox counts at scrape time.
type sandboxCollector struct {
	states []string
	count  func(context.Context) ([]SandboxCount, error)
}

func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sandboxesDesc }

func (c *sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	counts, err := c.count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(sandboxesDesc, fmt.Errorf("counting sandboxes: %w", err))
		return
	}
	by := make(map[string]int, len(c.states))
	for _, s := range c.states {
		by[s] = 0
	}
	for _, n := range counts {
		by[n.State] += n.Count
	}
	for state, n := range by {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n), state)
	}
}

// maxSmapsBytes bounds what is read of one smaps_rollup (a few hundred bytes in practice).
const maxSmapsBytes = 8 << 10

// readSmapsRollup returns the Rss and Pss of process pid, bytes, from /proc/PID/smaps_rollup
// (the kernel's sums over every mapping; reading it costs one walk of the process's page
// tables). procfs is the kernel's, not something a sandbox can write.
func readSmapsRollup(pid int) (rss, pss int64, err error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	return parseSmapsRollup(io.LimitReader(f, maxSmapsBytes))
}

// parseSmapsRollup reads the "Rss:" and "Pss:" lines (kB) of an smaps_rollup, in bytes.
func parseSmapsRollup(r io.Reader) (rss, pss int64, err error) {
	seen := 0
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "Rss" && key != "Pss") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("smaps_rollup: malformed %s line %q", key, sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("smaps_rollup: %s: %w", key, err)
		}
		if key == "Rss" {
			rss = kb << 10
		} else {
			pss = kb << 10
		}
		seen++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if seen < 2 {
		return 0, 0, errors.New("smaps_rollup: no Rss and Pss lines")
	}
	return rss, pss, nil
}
