package metrics

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// A function's handle counts each outcome and observes each latency; an unknown outcome
// counts as "error"; Forget removes every series of the function and a later handle starts
// at 0.
func TestFunctionSeries(t *testing.T) {
	r := New()
	f := r.Function("hello")
	if r.Function("hello") != f {
		t.Fatal("Function made a second handle for the same name")
	}
	for range 3 {
		f.Request("ok", 2*time.Millisecond)
	}
	f.Request("handler_error", time.Second)
	f.Request("no-such-outcome", time.Millisecond)
	f.ZygoteRestarted()
	if got := testutil.ToFloat64(r.requests.WithLabelValues("hello", "ok")); got != 3 {
		t.Errorf("ok count %v, want 3", got)
	}
	if got := testutil.ToFloat64(r.requests.WithLabelValues("hello", "error")); got != 1 {
		t.Errorf("error count %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.restarts.WithLabelValues("hello")); got != 1 {
		t.Errorf("restarts %v, want 1", got)
	}
	fams := scrape(t, r)
	h := fams["zygo_function_request_duration_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 5 || h.GetSampleSum() < 1 {
		t.Errorf("histogram count %d sum %v, want 5 and at least 1 s", h.GetSampleCount(), h.GetSampleSum())
	}
	// Every outcome is exported from the start, at 0.
	if n := len(fams["zygo_function_requests_total"].GetMetric()); n != len(Outcomes) {
		t.Errorf("%d request series, want one per outcome (%d)", n, len(Outcomes))
	}
	r.Forget("hello")
	fams = scrape(t, r)
	for _, name := range []string{"zygo_function_requests_total", "zygo_function_request_duration_seconds", "zygo_function_zygote_restarts_total"} {
		if len(fams[name].GetMetric()) != 0 {
			t.Errorf("%s still has series after Forget: %v", name, fams[name])
		}
	}
	f.Request("ok", time.Millisecond) // a stale handle counts into nothing exported
	if got := testutil.ToFloat64(r.Function("hello").outcomes["ok"]); got != 0 {
		t.Errorf("ok count of a fresh handle %v, want 0", got)
	}
	var nilReg *Registry
	nilReg.Function("x").Request("ok", time.Millisecond) // nil registry and handle record nothing
	nilReg.Forget("x")
	nilReg.SandboxOperation("fork", time.Second, nil)
}

// The function collector exports each sample's gauges, and the zygote's memory only when it
// can be read.
func TestFunctionCollector(t *testing.T) {
	r := New()
	c := &functionCollector{
		sample: func() []FunctionSample {
			return []FunctionSample{{Name: "a", InFlight: 2, Waiting: 3, PoolIdle: 1, ZygoteHostPID: 10}, {Name: "b", ZygoteHostPID: 11}}
		},
		smaps: func(pid int) (int64, int64, error) {
			if pid == 10 {
				return 4 << 20, 3 << 20, nil
			}
			return 0, 0, errors.New("gone")
		},
	}
	r.reg.MustRegister(c)
	fams := scrape(t, r)
	want := map[string]map[string]float64{
		"zygo_function_requests_in_flight": {"a": 2, "b": 0},
		"zygo_function_requests_waiting":   {"a": 3, "b": 0},
		"zygo_function_pool_idle":          {"a": 1, "b": 0},
		"zygo_function_zygote_rss_bytes":   {"a": 4 << 20},
		"zygo_function_zygote_pss_bytes":   {"a": 3 << 20},
	}
	for name, byFn := range want {
		got := map[string]float64{}
		for _, m := range fams[name].GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
		if len(got) != len(byFn) {
			t.Errorf("%s: %v, want %v", name, got, byFn)
		}
		for fn, v := range byFn {
			if got[fn] != v {
				t.Errorf("%s{function=%q} = %v, want %v", name, fn, got[fn], v)
			}
		}
	}
	for _, name := range []string{"go_goroutines", "process_open_fds"} {
		if len(fams[name].GetMetric()) != 1 {
			t.Errorf("no %s: the standard collectors are not registered", name)
		}
	}
}

// Every sandbox state is exported (0 when empty); operations record durations when they
// succeed and failures otherwise; a failing count fails the scrape.
func TestSandboxSeries(t *testing.T) {
	r := New()
	var fail error
	r.WatchSandboxes([]string{"running", "dead"}, func(context.Context) ([]SandboxCount, error) {
		return []SandboxCount{{State: "running", Count: 2}}, fail
	})
	r.SandboxOperation("fork", 300*time.Millisecond, nil)
	r.SandboxOperation("fork", 0, errors.New("restore failed"))
	r.SandboxOperation("reseal", 0, errors.New("guest gone"))
	r.SandboxOperation("no-such-op", time.Second, nil)
	fams := scrape(t, r)
	states := map[string]float64{}
	for _, m := range fams["zygo_sandboxes"].GetMetric() {
		states[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	if len(states) != 2 || states["running"] != 2 || states["dead"] != 0 {
		t.Errorf("zygo_sandboxes %v, want running 2, dead 0", states)
	}
	if got := testutil.ToFloat64(r.sbFailed.WithLabelValues("fork")); got != 1 {
		t.Errorf("fork failures %v", got)
	}
	if got := testutil.ToFloat64(r.sbFailed.WithLabelValues("reseal")); got != 1 {
		t.Errorf("reseal failures %v", got)
	}
	for _, m := range fams["zygo_sandbox_operation_duration_seconds"].GetMetric() {
		n := m.GetHistogram().GetSampleCount()
		if op := m.GetLabel()[0].GetValue(); (op == "fork") != (n == 1) || n > 1 {
			t.Errorf("%s: %d durations", op, n)
		}
	}
	fail = errors.New("store closed")
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), "counting sandboxes: store closed") {
		t.Errorf("scrape with a failing count: %d %s", rec.Code, rec.Body)
	}
}

func TestParseSmapsRollup(t *testing.T) {
	const text = `55d0c0a00000-7ffd1d3f3000 ---p 00000000 00:00 0                          [rollup]
Rss:               10240 kB
Pss:                4096 kB
Pss_Anon:           2048 kB
Shared_Clean:       6000 kB
`
	rss, pss, err := parseSmapsRollup(strings.NewReader(text))
	if err != nil || rss != 10240<<10 || pss != 4096<<10 {
		t.Errorf("parse: rss %d pss %d %v", rss, pss, err)
	}
	for _, bad := range []string{"", "Rss: 12 kB\n", "Rss: x kB\nPss: 1 kB\n", "Rss: 12 MB\nPss: 1 kB\n"} {
		if _, _, err := parseSmapsRollup(strings.NewReader(bad)); err == nil {
			t.Errorf("parse %q: no error", bad)
		}
	}
	// This process's own, as the collector reads a zygote's.
	rss, pss, err = readSmapsRollup(os.Getpid())
	if err != nil || rss <= 0 || pss <= 0 {
		t.Errorf("smaps_rollup of this process: rss %d pss %d %v", rss, pss, err)
	}
}

// scrape serves the registry's text format and parses it back, by family name.
func scrape(t *testing.T, r *Registry) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	fams, err := parseText(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func parseText(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// BenchmarkFunctionRequest is the request path's cost: one counter and one histogram.
func BenchmarkFunctionRequest(b *testing.B) {
	f := New().Function("bench")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			f.Request("ok", 3*time.Millisecond)
		}
	})
}
