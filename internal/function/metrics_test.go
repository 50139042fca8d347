package function_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/metrics"
	"github.com/zygo-run/zygo/internal/store"
)

// counterOf returns the value of the series of family name with labels want in reg (-1: none).
func counterOf(t *testing.T, reg *metrics.Registry, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// The Manager counts each request by outcome with its latency, counts a request waiting for
// a concurrency slot and one in flight while they last, counts a runner that died as a
// restart, and forgets the function's series on Remove.
func TestManagerMetrics(t *testing.T) {
	reg := metrics.New()
	l := &fakeLauncher{block: make(chan struct{})}
	m, err := function.NewManager(function.Config{StateDir: t.TempDir(), AgentDir: t.TempDir(), Runtimes: l,
		ReadyTimeout: 10 * time.Second, Metrics: reg}, &memRegistry{versions: map[string]store.Version{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	deploy := func(extra string) {
		dir := t.TempDir()
		writeTree(t, dir, []treeFile{{"zygo.toml", 0o644, "name = \"f\"\nruntime = \"python\"\nhandler = \"main:handler\"\n" + extra},
			{"main.py", 0o644, "def handler(e, c): return 1\n"}})
		if _, err := m.Deploy(context.Background(), strings.NewReader(string(pack(t, dir)))); err != nil {
			t.Fatal(err)
		}
	}
	deploy("concurrency = 1\n")
	done := make(chan struct{}, 2)
	for range 2 {
		go func() { invoke(t, m, "f", `{}`); done <- struct{}{} }()
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s := m.MetricSamples()
		if len(s) == 1 && s[0].InFlight == 1 && s[0].Waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("samples %+v, want 1 in flight and 1 waiting", s)
		}
	}
	close(l.block)
	<-done
	<-done
	if s := m.MetricSamples(); len(s) != 1 || s[0].InFlight != 0 || s[0].Waiting != 0 || s[0].ZygoteHostPID == 0 {
		t.Errorf("samples after the requests %+v, want nothing in flight or waiting", s)
	}
	if _, err := m.Invoke(context.Background(), "f", strings.NewReader("not json"), 8); err == nil {
		t.Fatal("a bad event was invoked")
	}
	fn := map[string]string{"function": "f"}
	for outcome, want := range map[string]float64{"ok": 2, "bad_request": 1, "handler_error": 0} {
		if got := counterOf(t, reg, "zygo_function_requests_total", map[string]string{"function": "f", "outcome": outcome}); got != want {
			t.Errorf("requests %s: %v, want %v", outcome, got, want)
		}
	}
	if got := counterOf(t, reg, "zygo_function_request_duration_seconds", fn); got != 3 {
		t.Errorf("latency samples %v, want 3", got)
	}
	l.all()[0].die()
	for deadline := time.Now().Add(10 * time.Second); counterOf(t, reg, "zygo_function_zygote_restarts_total", fn) != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the runner's death was not counted as a restart")
		}
	}
	if err := m.Remove(context.Background(), "f"); err != nil {
		t.Fatal(err)
	}
	if got := counterOf(t, reg, "zygo_function_requests_total", fn); got != -1 {
		t.Errorf("a removed function still has request series (%v)", got)
	}
}
