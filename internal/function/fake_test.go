package function_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/store"
)

// fakeLauncher is a function.Launcher of fakeRunners, recording each one.
type fakeLauncher struct {
	mu      sync.Mutex
	runners []*fakeRunner
	// startErr, when set, is what the Start of the n-th runner (0-based)
	// returns.
	startErr func(n int) error
	// block, when set, is a channel each Run waits on before answering.
	block chan struct{}
	// startBlock, when set, is a channel each Start waits on (or its ctx,
	// whose error it then returns, leaving nothing running) before it
	// answers; starting gets one value per Start that began.
	startBlock chan struct{}
	starting   chan struct{}
}

func (l *fakeLauncher) NewRunner(opts function.RunnerOptions) (function.Runner, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &fakeRunner{opts: opts, n: len(l.runners), l: l, exited: make(chan struct{}), running: make(chan struct{}, 16)}
	l.runners = append(l.runners, r)
	return r, nil
}

func (l *fakeLauncher) all() []*fakeRunner {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*fakeRunner(nil), l.runners...)
}

// fakeRunner is a function.Runner that answers every request with
// {"runner": n, "event": EVENT} and records its lifecycle calls in order.
type fakeRunner struct {
	opts    function.RunnerOptions
	n       int
	l       *fakeLauncher
	exited  chan struct{}
	running chan struct{} // one value per Run that has started

	mu       sync.Mutex
	calls    []string
	inflight int
	draining bool
	died     bool
	err      error
}

func (r *fakeRunner) record(c string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

func (r *fakeRunner) history() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.calls, " ")
}

func (r *fakeRunner) Start(ctx context.Context) (function.Warmup, error) {
	r.record("start")
	if r.l.startBlock != nil {
		if r.l.starting != nil {
			r.l.starting <- struct{}{}
		}
		select {
		case <-r.l.startBlock:
		case <-ctx.Done():
			return function.Warmup{}, ctx.Err()
		}
	}
	if r.l.startErr != nil {
		if err := r.l.startErr(r.n); err != nil {
			return function.Warmup{}, err
		}
	}
	return function.Warmup{Ready: agentproc.Ready{ForkSafe: true, Took: time.Millisecond}}, nil
}

func (r *fakeRunner) Run(ctx context.Context, call function.Call) (*agentproc.Result, error) {
	r.mu.Lock()
	if r.draining || r.died {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: fake runner is draining", errdefs.ErrUnavailable)
	}
	r.inflight++
	r.calls = append(r.calls, "run")
	r.mu.Unlock()
	defer func() { r.mu.Lock(); r.inflight--; r.mu.Unlock() }()
	r.running <- struct{}{}
	if r.l.block != nil {
		select {
		case <-r.l.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	v, _ := json.Marshal(map[string]any{"runner": r.n, "event": json.RawMessage(call.Request.Event)})
	return &agentproc.Result{Value: v, Child: agentproc.ChildForked}, nil
}

func (r *fakeRunner) Drain(context.Context) error {
	r.mu.Lock()
	r.draining = true
	busy := r.inflight
	r.calls = append(r.calls, "drain")
	r.mu.Unlock()
	if busy != 0 {
		return fmt.Errorf("drained with %d requests in flight", busy)
	}
	return nil
}

func (r *fakeRunner) Stop() { r.record("stop") }

// die makes the runner exit by itself, as a fork zygote whose process died.
func (r *fakeRunner) die() {
	r.mu.Lock()
	r.died, r.err = true, errors.New("fake zygote killed")
	r.mu.Unlock()
	close(r.exited)
}

func (r *fakeRunner) Exited() <-chan struct{} { return r.exited }
func (r *fakeRunner) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
func (r *fakeRunner) Status() function.RunnerStatus {
	return function.RunnerStatus{HostPID: 1000 + r.n}
}

var _ function.Runner = (*fakeRunner)(nil)

// checkGoroutines records the goroutine count and returns a check that
// waits (up to 10 s) for it to come back, printing every stack if it does
// not (as internal/daemon's, after Tailscale's tstest.ResourceCheck).
func checkGoroutines(t *testing.T) func() {
	t.Helper()
	before := runtime.NumGoroutine()
	return func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Fatalf("goroutines leaked: %d before the Manager, %d after Shutdown:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
			}
		}
	}
}

// noManagerWork fails when a goroutine is still in the work of a
// deployment or a retirement after Shutdown returned: Shutdown waits for
// them, so this holds at once, not eventually.
func noManagerWork(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, frame := range []string{"function.(*deployment).", "function.(*Manager).retire"} {
		if strings.Contains(stacks, frame) {
			t.Fatalf("a goroutine is still in %s after Shutdown:\n%s", frame, stacks)
		}
	}
}

// fakeManager returns a Manager whose runners are l's fakes, and a deploy
// function for it (manifest lines after name and handler are extra).
func fakeManager(t *testing.T, l *fakeLauncher) (*function.Manager, func(name, extra string) (*function.DeployResult, error)) {
	t.Helper()
	m, err := function.NewManager(function.Config{StateDir: t.TempDir(), AgentDir: t.TempDir(), Runtimes: l,
		ReadyTimeout: 10 * time.Second}, &memRegistry{versions: map[string]store.Version{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	deploy := func(name, extra string) (*function.DeployResult, error) {
		dir := t.TempDir()
		if !strings.Contains(extra, "runtime = ") {
			extra = "runtime = \"python\"\n" + extra
		}
		if !strings.Contains(extra, "handler = ") {
			extra = "handler = \"main:handler\"\n" + extra
		}
		manifest := fmt.Sprintf("name = %q\n%s", name, extra)
		writeTree(t, dir, []treeFile{{"zygo.toml", 0o644, manifest}, {"main.py", 0o644, "def handler(e, c): return 1\n# " + extra + "\n"}})
		return m.Deploy(context.Background(), bytes.NewReader(pack(t, dir)))
	}
	return m, deploy
}

func invoke(t *testing.T, m *function.Manager, name, event string) *function.Invocation {
	t.Helper()
	inv, err := m.Invoke(context.Background(), name, strings.NewReader(event), int64(len(event)))
	if err != nil {
		t.Fatalf("invoking %s: %v", name, err)
	}
	return inv
}

// TestDeployAndInvokeThroughTheRunner: Deploy starts one runner of the kind
// the manifest names, Invoke runs on it, and Shutdown stops it; the Manager
// leaves no goroutine behind.
func TestDeployAndInvokeThroughTheRunner(t *testing.T) {
	leaks := checkGoroutines(t)
	l := &fakeLauncher{}
	m, deploy := fakeManager(t, l)
	for name, c := range map[string]struct {
		extra string
		kind  function.Kind
	}{
		"py":    {"", function.KindFork},
		"sp":    {"mode = \"spawn\"\n", function.KindSpawn},
		"nodey": {"runtime = \"node\"\nhandler = \"index.js:handler\"\n", function.KindWorker},
	} {
		if _, err := deploy(name, c.extra); err != nil {
			t.Fatalf("deploying %s: %v", name, err)
		}
		rs := l.all()
		r := rs[len(rs)-1]
		if r.opts.Kind != c.kind || r.opts.Function != name {
			t.Errorf("%s: runner for %q of kind %q, want %q", name, r.opts.Function, r.opts.Kind, c.kind)
		}
		inv := invoke(t, m, name, `{"x":1}`)
		if want := fmt.Sprintf(`{"event":{"x":1},"runner":%d}`, r.n); string(inv.Value) != want {
			t.Errorf("%s: value %s, want %s", name, inv.Value, want)
		}
		if st, _ := m.Get(name); st.State != "ready" || st.ZygotePID != 1000+r.n {
			t.Errorf("%s: status %+v", name, st)
		}
	}
	m.Shutdown()
	for _, r := range l.all() {
		if h := r.history(); h != "start run stop" {
			t.Errorf("runner %d (%s): calls %q, want start run stop", r.n, r.opts.Function, h)
		}
	}
	leaks()
}

// TestRedeployDrainsTheOldRunner: a redeploy switches new requests to the
// new runner at once, and the old one is drained only after its request in
// flight has returned, then stopped.
func TestRedeployDrainsTheOldRunner(t *testing.T) {
	leaks := checkGoroutines(t)
	l := &fakeLauncher{block: make(chan struct{})}
	m, deploy := fakeManager(t, l)
	if _, err := deploy("f", "concurrency = 4\n"); err != nil {
		t.Fatal(err)
	}
	old := l.all()[0]
	first := make(chan *function.Invocation, 1)
	go func() { first <- invoke(t, m, "f", `{"n":1}`) }()
	<-old.running
	if _, err := deploy("f", "concurrency = 4\n# v2\n"); err != nil {
		t.Fatal(err)
	}
	next := l.all()[1]
	second := make(chan *function.Invocation, 1)
	go func() { second <- invoke(t, m, "f", `{"n":2}`) }()
	<-next.running
	if h := old.history(); h != "start run" {
		t.Errorf("old runner drained or stopped with a request in flight: %q", h)
	}
	close(l.block)
	if inv := <-first; !strings.Contains(string(inv.Value), `"runner":0`) {
		t.Errorf("first request: %s", inv.Value)
	}
	if inv := <-second; !strings.Contains(string(inv.Value), `"runner":1`) {
		t.Errorf("second request went to %s, want the new runner", inv.Value)
	}
	for deadline := time.Now().Add(10 * time.Second); old.history() != "start run drain stop"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("old runner: calls %q, want start run drain stop", old.history())
		}
	}
	m.Shutdown()
	noManagerWork(t)
	leaks()
}

// TestImportFailureKeepsThePreviousRunner: a new version whose runner
// fails to start returns *ImportFailed, and the previous one keeps
// serving, untouched.
func TestImportFailureKeepsThePreviousRunner(t *testing.T) {
	l := &fakeLauncher{startErr: func(n int) error {
		if n == 1 {
			return &agentproc.ImportError{Type: "SyntaxError", Message: "bad"}
		}
		return nil
	}}
	m, deploy := fakeManager(t, l)
	defer m.Shutdown()
	if _, err := deploy("f", ""); err != nil {
		t.Fatal(err)
	}
	_, err := deploy("f", "# broken\n")
	var ie *function.ImportFailed
	if !errors.As(err, &ie) || !ie.HadPrevious || !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("deploy of a failing import: %v, want *ImportFailed with a previous version", err)
	}
	if inv := invoke(t, m, "f", `{}`); !strings.Contains(string(inv.Value), `"runner":0`) {
		t.Errorf("served by %s, want the previous runner", inv.Value)
	}
	if h := l.all()[0].history(); h != "start run" {
		t.Errorf("previous runner: calls %q", h)
	}
}

// TestRunnerDeathRestartsWithBackoff: a runner that dies is stopped and a
// new one started; starts that fail are retried (with backoff) until one
// succeeds, and requests then run on it.
func TestRunnerDeathRestartsWithBackoff(t *testing.T) {
	leaks := checkGoroutines(t)
	l := &fakeLauncher{startErr: func(n int) error {
		if n == 1 || n == 2 {
			return fmt.Errorf("%w: fake start failure %d", errdefs.ErrUnavailable, n)
		}
		return nil
	}}
	m, deploy := fakeManager(t, l)
	if _, err := deploy("f", ""); err != nil {
		t.Fatal(err)
	}
	l.all()[0].die()
	for deadline := time.Now().Add(10 * time.Second); len(l.all()) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the dead runner was never replaced")
		}
	}
	inv := invoke(t, m, "f", `{}`) // waits for a ready runner
	if !strings.Contains(string(inv.Value), `"runner":3`) {
		t.Errorf("served by %s, want the fourth runner (two failed starts)", inv.Value)
	}
	rs := l.all()
	if h := rs[0].history(); h != "start stop" {
		t.Errorf("dead runner: calls %q, want start stop", h)
	}
	for _, r := range rs[1:3] {
		if h := r.history(); h != "start" {
			t.Errorf("failed runner %d: calls %q, want start only", r.n, h)
		}
	}
	m.Shutdown()
	leaks()
}

// TestShutdownEndsARestartBackoff: a function whose runner never starts
// again waits between retries on the Manager's context: Shutdown ends a
// backoff of an hour at once (a bare time.Sleep would hold it), and no
// goroutine is left.
func TestShutdownEndsARestartBackoff(t *testing.T) {
	leaks := checkGoroutines(t)
	var mu sync.Mutex
	failing := false
	l := &fakeLauncher{startErr: func(n int) error {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return errors.New("fake start failure")
		}
		return nil
	}}
	m, deploy := fakeManager(t, l)
	function.SetRestartBackoff(m, time.Hour, time.Hour)
	if _, err := deploy("f", ""); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	failing = true
	mu.Unlock()
	l.all()[0].die()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, _ := m.Get("f"); st.State == "failed" && len(l.all()) == 2 { // in its first backoff
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failed restarts after the runner died: %d runners", len(l.all()))
		}
	}
	done := make(chan struct{})
	go func() { m.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Shutdown did not end the restart loop")
	}
	noManagerWork(t)
	leaks()
}

// TestDeploymentTransitions: the legal moves of a deployment pass, every
// other one is a *TransitionError naming from and to.
func TestDeploymentTransitions(t *testing.T) {
	S := []function.State{function.StateStarting, function.StateReady, function.StateRestarting, function.StateFailed, function.StateStopped}
	legal := map[[2]function.State]bool{}
	for _, p := range [][2]function.State{
		{function.StateStarting, function.StateReady}, {function.StateStarting, function.StateFailed}, {function.StateStarting, function.StateStopped},
		{function.StateReady, function.StateRestarting}, {function.StateReady, function.StateStopped},
		{function.StateRestarting, function.StateReady}, {function.StateRestarting, function.StateFailed}, {function.StateRestarting, function.StateStopped},
		{function.StateFailed, function.StateReady}, {function.StateFailed, function.StateFailed}, {function.StateFailed, function.StateStopped},
	} {
		legal[p] = true
	}
	for _, from := range S {
		for _, to := range S {
			err := function.Transition(from, to)
			if legal[[2]function.State{from, to}] {
				if err != nil {
					t.Errorf("%s → %s: %v", from, to, err)
				}
				continue
			}
			var te *function.TransitionError
			if !errors.As(err, &te) || te.From != from || te.To != to || !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("%s → %s: %v, want a TransitionError", from, to, err)
			}
		}
	}
}

// TestRemoveDrainsInFlight: rm of a function with a request in flight lets that request
// finish on its runner (as a redeploy does) before the runner is drained and stopped;
// it is not killed mid-request.
func TestRemoveDrainsInFlight(t *testing.T) {
	leaks := checkGoroutines(t)
	l := &fakeLauncher{block: make(chan struct{})}
	m, deploy := fakeManager(t, l)
	if _, err := deploy("f", "concurrency = 2\n"); err != nil {
		t.Fatal(err)
	}
	rt := l.all()[0]
	inflight := make(chan *function.Invocation, 1)
	go func() { inflight <- invoke(t, m, "f", `{"n":1}`) }()
	<-rt.running
	removed := make(chan error, 1)
	go func() { removed <- m.Remove(t.Context(), "f") }()
	select {
	case err := <-removed:
		t.Fatalf("Remove returned (%v) with a request in flight; runner calls %q", err, rt.history())
	case <-time.After(200 * time.Millisecond):
	}
	if h := rt.history(); h != "start run" {
		t.Errorf("runner drained or stopped with a request in flight: %q", h)
	}
	close(l.block)
	if inv := <-inflight; inv.Failure != "" || !strings.Contains(string(inv.Value), `"runner":0`) {
		t.Errorf("the in-flight request: failure %q, value %s; want it served", inv.Failure, inv.Value)
	}
	if err := <-removed; err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if h := rt.history(); h != "start run drain stop" {
		t.Errorf("runner calls %q, want start run drain stop", h)
	}
	m.Shutdown()
	noManagerWork(t)
	leaks()
}
