package function

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/cleanup"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/metrics"
	"github.com/zygo-run/zygo/internal/network"
	"github.com/zygo-run/zygo/internal/store"
)

// deployment is one active version of a function and the Runner that
// serves it.
type deployment struct {
	m        *Manager
	name     string
	version  string
	manifest *Manifest
	codeDir  string
	uid      uint32        // host uid and gid of its sandboxes; 0: the daemon's own
	sem      chan struct{} // concurrency slots; a request holds one from before it picks the runtime until Run returns
	retired  chan struct{} // closed by halt: waiters for a slot move to the current deployment
	released sync.Once     // the code directory's in-use count, given back once fully stopped
	served   atomic.Int64
	inflight atomic.Int64
	queued   atomic.Int64      // requests waiting for a slot (queue.go; zygo_function_requests_waiting)
	obs      *metrics.Function // the function's request series; nil: none kept
	// meanRunNs is the recent mean of requests' run time, nanoseconds (Retry-After's estimate).
	meanRunNs atomic.Int64
	// firstDeploy: d is its function's first version, published (listed as
	// "deploying", invokes wait for it) while it starts; set before d is
	// published, then only read. deployFailed: that start failed and d was
	// withdrawn; invokes that waited for it are told so.
	firstDeploy  bool
	deployFailed atomic.Bool

	mu       sync.Mutex // guards the fields below
	state    State
	rt       Runner        // the serving runtime; nil unless ready
	warm     Warmup        // the last successful start's report
	changed  chan struct{} // closed and replaced whenever rt or state changes
	lastErr  error
	haltedRT Runner // the runtime halt took out of service
	// net is the deployment's network endpoint (egress = "allow"), shared
	// by all its runtimes' sandboxes; nil otherwise and once closed (netns.go).
	net *network.Endpoint
}

func newDeployment(m *Manager, name, version string, man *Manifest, codeDir string, uid uint32) *deployment {
	return &deployment{m: m, name: name, version: version, manifest: man, codeDir: codeDir, uid: uid,
		obs: m.cfg.Metrics.Function(name),
		sem: make(chan struct{}, man.Concurrency), retired: make(chan struct{}), state: StateStarting, changed: make(chan struct{})}
}

// toLocked moves d to state to with runtime rt (nil unless ready) and the
// error that caused the move; it returns a *TransitionError, and changes
// nothing, for an illegal move. d.mu must be held.
func (d *deployment) toLocked(to State, rt Runner, err error) error {
	if terr := Transition(d.state, to); terr != nil {
		return terr
	}
	d.state, d.rt, d.lastErr = to, rt, err
	close(d.changed)
	d.changed = make(chan struct{})
	return nil
}

// start makes a runtime for the version, starts it (the import and
// warm-up), reports the warm-up findings to the logs and puts it in
// service, with a supervisor when it can die by itself. errRetired when d
// was halted meanwhile (the runtime is then stopped).
func (d *deployment) start(ctx context.Context) (err error) {
	var undo cleanup.Stack
	defer func() { _ = undo.Run(ctx, 0) }()
	defer func() {
		if err != nil && !errors.Is(err, errRetired) {
			d.mu.Lock()
			_ = d.toLocked(StateFailed, nil, err) // refused when halted meanwhile
			d.mu.Unlock()
		}
	}()
	if err := d.attachNetwork(ctx); err != nil {
		return err
	}
	rt, err := d.m.newRunner(d)
	if err != nil {
		return err
	}
	warm, err := rt.Start(ctx)
	if err != nil {
		return err
	}
	undo.Add(func(context.Context) error { d.m.stopRunner(rt); return nil })
	d.m.appendLogs(ctx, d.zygoLines(warmupReport(warm.Ready)))
	if warm.Fallback != "" {
		d.m.appendLogs(ctx, d.zygoLines("falling back to spawn mode: "+warm.Fallback))
	}
	d.mu.Lock()
	if err := d.toLocked(StateReady, rt, nil); err != nil {
		d.mu.Unlock()
		return errRetired // halted while it started (a restart racing a stop)
	}
	d.warm = warm
	d.mu.Unlock()
	undo.Release()
	if rt.Exited() != nil {
		d.m.goTracked(func() { d.supervise(rt) })
	}
	return nil
}

func threadDetail(r agentproc.Ready) string {
	for _, c := range r.Checks {
		if c.Name == "threads" {
			return c.Detail
		}
	}
	return "unknown threads"
}

// nativeRandomLibraries returns how many libraries the native_random check
// found drawing OS randomness before the first fork, unreseeded; -1 when the
// guard was not loaded (cannot tell).
func nativeRandomLibraries(r agentproc.Ready) int {
	for _, c := range r.Checks {
		if c.Name == "native_random" {
			return c.Count
		}
	}
	return 0
}

func warmupReport(r agentproc.Ready) string {
	var b strings.Builder
	fmt.Fprintf(&b, "zygote ready in %d ms: pid %d (host %d), python %s, %s, fork_safe=%v",
		r.Took.Milliseconds(), r.PID, r.HostPID, r.Python, r.OpenSSL, r.ForkSafe)
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "\nwarm-up %s [%s]: %s", c.Name, c.Level, c.Detail)
	}
	return b.String()
}

// supervise waits until rt dies by itself (Runner.Exited) and starts
// another with backoff; it returns early when d is halted.
func (d *deployment) supervise(rt Runner) {
	select {
	case <-rt.Exited():
	case <-d.retired:
		return // whoever halted d stops rt
	}
	d.mu.Lock()
	if d.rt != rt || d.toLocked(StateRestarting, nil, rt.Err()) != nil {
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	rt.Stop() // it has exited: this only gives back its run directory and /tmp
	d.obs.ZygoteRestarted()
	msg := fmt.Sprintf("zygote died (%v); restarting", rt.Err())
	d.m.log.Warn(msg, "function", d.name)
	d.m.appendLogs(d.m.ctx, d.zygoLines(msg))
	d.restartLoop()
}

func (d *deployment) superviseAfterFailure(err error) {
	d.m.appendLogs(d.m.ctx, d.zygoLines(fmt.Sprintf("zygote failed to start (%v); retrying", err)))
	d.restartLoop()
}

// Restart backoff: doubled after each failed start, from min to max.
const (
	restartBackoffMin = 200 * time.Millisecond
	restartBackoffMax = 30 * time.Second
)

// restartLoop starts a new runtime until one is ready, backing off between
// failed starts; it ends when d is halted or the Manager shuts down.
func (d *deployment) restartLoop() {
	backoff := d.m.restartBackoff[0]
	for !d.isStopped() {
		err := d.start(d.m.ctx)
		if err == nil || errors.Is(err, errRetired) {
			return
		}
		d.m.log.Error("restarting zygote", "function", d.name, "err", err)
		if !d.m.backoff(backoff, d.retired) {
			return
		}
		backoff = min(backoff*2, d.m.restartBackoff[1])
	}
}

// current waits until the deployment can take a request and returns its
// runtime.
func (d *deployment) current(ctx context.Context) (Runner, error) {
	limit := time.NewTimer(d.m.importTimeout(d.manifest))
	defer limit.Stop()
	for {
		d.mu.Lock()
		state, rt, ch, lastErr := d.state, d.rt, d.changed, d.lastErr
		d.mu.Unlock()
		switch state {
		case StateReady:
			return rt, nil
		case StateStopped:
			return nil, errRetired
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-limit.C:
			if d.firstDeploy && state == StateStarting {
				return nil, fmt.Errorf("%w: function %q is still deploying", errdefs.ErrUnavailable, d.name)
			}
			return nil, fmt.Errorf("%w: function %q is %s: %v", errdefs.ErrUnavailable, d.name, state, lastErr) //nolint:errorlint // one cause on purpose: lastErr (maybe nil) is the last start's, the call's category is unavailable
		}
	}
}

// errRetired says a deployment was halted (replaced, removed or shut down)
// before a request could start on it; Invoke moves the request to the
// function's current deployment.
var errRetired = errors.New("deployment retired")

// acquireSlot waits for one of d's concurrency slots (admit counts the wait in d.queued);
// errRetired when d is halted first (or by the time the slot is free).
func (d *deployment) acquireSlot(ctx context.Context) error {
	select {
	case d.sem <- struct{}{}:
		return d.checkSlot()
	case <-d.retired:
		return errRetired
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkSlot gives back the slot just taken and returns errRetired when d was
// halted meanwhile.
func (d *deployment) checkSlot() error {
	if d.isStopped() {
		<-d.sem
		return errRetired
	}
	return nil
}

func (d *deployment) releaseSlot() { <-d.sem }

func (d *deployment) isStopped() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state == StateStopped
}

// halt moves d to stopped and wakes the requests waiting for its slots; it
// returns the runtime that was serving (nil if none), which still runs. It
// is idempotent and returns the same runtime each time.
func (d *deployment) halt() Runner {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == StateStopped {
		return d.haltedRT
	}
	d.haltedRT = d.rt
	_ = d.toLocked(StateStopped, nil, nil) // legal from every other state
	close(d.retired)
	return d.haltedRT
}

// drainAndStop halts d, waits (up to the longest timeout plus 5 s, or
// until the Manager shuts down) until no request holds one of its slots,
// drains its runtime and stops it.
func (d *deployment) drainAndStop() {
	rt := d.halt()
	ctx, cancel := context.WithTimeout(d.m.ctx, time.Duration(d.manifest.Limits.TimeoutMs)*time.Millisecond+5*time.Second)
	defer cancel()
	// Holding every slot means no request is between picking this version
	// and the end of its Run (spawn and worker requests included).
	for range cap(d.sem) {
		select {
		case d.sem <- struct{}{}:
		case <-ctx.Done():
		}
	}
	if rt != nil {
		_ = rt.Drain(ctx)
		d.m.stopRunner(rt)
	}
	d.closeNetwork()
	d.released.Do(func() { d.m.releaseDir(d.codeDir) })
}

// stop halts d and stops its runtime at once (in-flight requests fail).
func (d *deployment) stop() {
	if rt := d.halt(); rt != nil {
		d.m.stopRunner(rt)
	}
	d.closeNetwork()
	d.released.Do(func() { d.m.releaseDir(d.codeDir) })
}

func (d *deployment) status() Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Status{Name: d.name, Version: d.version, Runtime: d.manifest.Runtime, Mode: d.manifest.Mode,
		State: d.state.String(), Fallback: d.warm.Fallback, InFlight: int(d.inflight.Load()), Queued: int(d.queued.Load()),
		Served: d.served.Load(), Manifest: d.manifest}
	if d.firstDeploy && d.state == StateStarting {
		s.State = StateDeploying
	}
	if d.rt != nil {
		rs := d.rt.Status()
		s.ZygotePID, s.IdleWorkers, s.idleChildren = rs.HostPID, rs.IdleWorkers, rs.IdleChildren
	}
	return s
}

func (d *deployment) result(unchanged bool) *DeployResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	return &DeployResult{Name: d.name, Version: d.version, Unchanged: unchanged, Mode: d.manifest.Mode,
		Fallback: d.warm.Fallback, Checks: d.warm.Ready.Checks, ReadyMs: d.warm.Ready.Took.Milliseconds()}
}

// outputSink stores what the agent prints on its own fds: outside
// requests, and a spawned agent's or worker's after GO (bounded and
// redacted by the zygote, agentproc.Spec.Output).
func (d *deployment) outputSink() func(requestID, stream string, lines []string) {
	return func(requestID, stream string, lines []string) {
		now := time.Now()
		out := make([]store.LogLine, len(lines))
		for i, l := range lines {
			out[i] = store.LogLine{Function: d.name, Version: d.version, RequestID: requestID, Stream: stream, At: now, Line: l}
		}
		d.m.appendLogs(d.m.ctx, out)
	}
}

// zygoLines turns a Zygo report into log lines of stream "zygo".
func (d *deployment) zygoLines(text string) []store.LogLine {
	var out []store.LogLine
	now := time.Now()
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		out = append(out, store.LogLine{Function: d.name, Version: d.version, Stream: "zygo", At: now, Line: l})
	}
	return out
}

func sortStatus(s []Status) {
	sort.Slice(s, func(i, j int) bool { return s[i].Name < s[j].Name })
}
