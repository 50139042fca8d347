// Package metrics is the daemon's Prometheus registry: what GET /metrics serves (text
// exposition format, github.com/prometheus/client_golang). It is a leaf: the function manager
// and the daemon's sandbox side report into it, and it reads the rest at scrape time through
// the samplers they give it (collector.go).
//
// The series (every duration in seconds, every size in bytes):
//
//	zygo_function_requests_total{function,outcome}          counter, outcome: Outcomes
//	zygo_function_request_duration_seconds{function}        histogram, from the call's arrival to its answer
//	zygo_function_requests_in_flight{function}              gauge, requests holding a concurrency slot
//	zygo_function_requests_waiting{function}                gauge, requests waiting for a slot (the queue)
//	zygo_function_pool_idle{function}                       gauge, pre-forked children or Node workers ready
//	zygo_function_zygote_restarts_total{function}           counter, zygotes that died and were restarted
//	zygo_function_zygote_rss_bytes{function}                gauge, the zygote's Rss (smaps_rollup)
//	zygo_function_zygote_pss_bytes{function}                gauge, the zygote's Pss (smaps_rollup)
//	zygo_sandboxes{state}                                   gauge, sandboxes by state
//	zygo_sandbox_operation_duration_seconds{operation}      histogram, operation: SandboxOperations
//	zygo_sandbox_operation_failures_total{operation}        counter
//	go_*, process_*                                          the standard Go and process collectors
//
// A function's series exist from its first deploy (every outcome at 0) until Forget (zygo
// rm), so their number is bounded by the functions deployed. The request path costs one
// counter increment and one histogram observation on handles made once per function
// (Function); nothing is allocated per request.
package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Outcomes are the values of the outcome label of zygo_function_requests_total: "ok", the
// failures of a request that ran (agentproc.Failure's values), and those of one that could
// not run: "unavailable" (no zygote in time, the daemon stopping), "too_large" (event over
// max_request_kib), "bad_request" (event not UTF-8 JSON), "canceled" (the caller went away
// first) and "error" (anything else).
var Outcomes = []string{
	"ok", "handler_error", "timeout", "crashed", "zygote_died", "response_too_large", "internal",
	"limit_exceeded", "bad_event", "unavailable", "too_large", "bad_request", "canceled", "error",
}

// SandboxOperations are the values of the operation label of the sandbox histograms and
// failure counters.
var SandboxOperations = []string{"create", "checkpoint", "fork", "rollback", "reseal"}

// Request latency buckets, seconds: a warm request takes a few milliseconds, a cold one or a
// slow handler seconds, a timeout up to timeout_ms (at most 900 s).
var requestBuckets = []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// Sandbox operation buckets, seconds: a reseal takes milliseconds, a checkpoint or a fork of
// a large sandbox tens of seconds.
var sandboxBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// Registry holds the daemon's series. Its zero value is not usable; use New. A nil *Registry
// is valid and records nothing (its Function handles are nil, which record nothing either).
// It is safe for concurrent use.
type Registry struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	restarts  *prometheus.CounterVec
	sbDur     *prometheus.HistogramVec
	sbFailed  *prometheus.CounterVec
	mu        sync.Mutex // guards fns
	fns       map[string]*Function
	sandboxOp map[string]prometheus.Observer // read-only after New
	sandboxKO map[string]prometheus.Counter  // read-only after New
}

// New returns a Registry of its own (never the global default) with the Go and process
// collectors registered.
func New() *Registry {
	r := &Registry{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zygo_function_requests_total",
			Help: "Requests of a function by outcome (ok, or why it failed)."}, []string{"function", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "zygo_function_request_duration_seconds",
			Help: "Time from a request's arrival to its answer, seconds (queueing included).", Buckets: requestBuckets}, []string{"function"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zygo_function_zygote_restarts_total",
			Help: "Zygotes of a function that died by themselves and were restarted."}, []string{"function"}),
		sbDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "zygo_sandbox_operation_duration_seconds",
			Help: "Duration of sandbox operations that succeeded, seconds.", Buckets: sandboxBuckets}, []string{"operation"}),
		sbFailed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zygo_sandbox_operation_failures_total",
			Help: "Sandbox operations that failed, by operation."}, []string{"operation"}),
		fns:       map[string]*Function{},
		sandboxOp: map[string]prometheus.Observer{},
		sandboxKO: map[string]prometheus.Counter{},
	}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		r.requests, r.latency, r.restarts, r.sbDur, r.sbFailed)
	for _, op := range SandboxOperations {
		r.sandboxOp[op] = r.sbDur.WithLabelValues(op)
		r.sandboxKO[op] = r.sbFailed.WithLabelValues(op)
	}
	return r
}

// Handler serves the registry in the Prometheus text format (or what the scraper negotiates).
// A collector that fails makes the scrape answer 500 naming it (promhttp.HTTPErrorOnError).
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}

// Gatherer returns the registry for tests and tools that read it directly.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Function returns the handle of function name's series, made (every outcome at 0) on the
// first call and the same until Forget. Call it when a function is deployed, never per request.
// A nil Registry returns nil.
func (r *Registry) Function(name string) *Function {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.fns[name]; f != nil {
		return f
	}
	f := &Function{outcomes: make(map[string]prometheus.Counter, len(Outcomes)),
		latency: r.latency.WithLabelValues(name), restarts: r.restarts.WithLabelValues(name)}
	for _, o := range Outcomes {
		f.outcomes[o] = r.requests.WithLabelValues(name, o)
	}
	r.fns[name] = f
	return f
}

// Forget deletes function name's series (zygo rm). A handle still held keeps counting into
// series that are no longer exported; the next Function call makes fresh ones at 0.
func (r *Registry) Forget(name string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.fns, name)
	for _, o := range Outcomes {
		r.requests.DeleteLabelValues(name, o)
	}
	r.latency.DeleteLabelValues(name)
	r.restarts.DeleteLabelValues(name)
}

// SandboxOperation records one sandbox operation (one of SandboxOperations): its duration
// when err is nil, a failure otherwise. An unknown operation is ignored.
func (r *Registry) SandboxOperation(op string, took time.Duration, err error) {
	if r == nil {
		return
	}
	if err != nil {
		if c := r.sandboxKO[op]; c != nil {
			c.Inc()
		}
		return
	}
	if o := r.sandboxOp[op]; o != nil {
		o.Observe(took.Seconds())
	}
}

// Function is the handle of one function's request series. A nil *Function records nothing.
// Its methods are safe for concurrent use and allocate nothing.
type Function struct {
	outcomes map[string]prometheus.Counter // read-only after Registry.Function
	latency  prometheus.Observer
	restarts prometheus.Counter
}

// Request records one request: its outcome (one of Outcomes; another counts as "error") and
// how long the daemon took to answer it.
func (f *Function) Request(outcome string, took time.Duration) {
	if f == nil {
		return
	}
	c := f.outcomes[outcome]
	if c == nil {
		c = f.outcomes["error"]
	}
	c.Inc()
	f.latency.Observe(took.Seconds())
}

// ZygoteRestarted records that the function's zygote died by itself and is being restarted.
func (f *Function) ZygoteRestarted() {
	if f != nil {
		f.restarts.Inc()
	}
}
