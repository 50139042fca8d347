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

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/network"
	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/internal/zygote"
)

// deployment is one active version of a function and its zygote.
type deployment struct {
	m        *Manager
	name     string
	version  string
	manifest *Manifest
	codeDir  string
	uid      uint32        // host uid and gid of its sandboxes; 0: the daemon's own
	sem      chan struct{} // concurrency slots; a request holds one from before it picks a zygote until Run returns
	retired  chan struct{} // closed by halt: waiters for a slot move to the current deployment
	released sync.Once     // the code directory's in-use count, given back once fully stopped
	served   atomic.Int64
	inflight atomic.Int64

	mu       sync.Mutex // guards the fields below
	z        *zygote.Zygote
	ready    zygote.Ready
	fallback string        // non-empty: fork mode fell back to spawn, and why
	state    string        // starting, ready, restarting, failed, stopped
	changed  chan struct{} // closed and replaced whenever z or state changes
	lastErr  error
	stopped  bool
	haltedZ  *zygote.Zygote // the zygote halt took out of service
	files    *secretFiles   // the current zygote's /run/secrets
	filesZ   *zygote.Zygote
	pool     *workerPool // Node functions: ready workers
	// net is the deployment's network endpoint (egress = "allow"), shared
	// by all its sandboxes; nil otherwise and once closed (netns.go).
	net *network.Endpoint
}

// filesFor returns the secret files of zygote z.
func (d *deployment) filesFor(z *zygote.Zygote) *secretFiles {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.filesZ != z {
		d.files, d.filesZ = &secretFiles{dir: z.SecretsDir(), uid: z.HostUID()}, z
	}
	return d.files
}

func newDeployment(m *Manager, name, version string, man *Manifest, codeDir string, uid uint32) *deployment {
	return &deployment{m: m, name: name, version: version, manifest: man, codeDir: codeDir, uid: uid,
		sem: make(chan struct{}, man.Concurrency), retired: make(chan struct{}), state: "starting", changed: make(chan struct{})}
}

func (d *deployment) setLocked(state string, z *zygote.Zygote, err error) {
	d.state, d.z, d.lastErr = state, z, err
	close(d.changed)
	d.changed = make(chan struct{})
}

// start imports the version once (in fork mode, as the long-lived zygote;
// in spawn mode, as an import check that is then stopped) and reports the
// warm-up findings to the logs.
func (d *deployment) start(ctx context.Context) error {
	mode := zygote.ModeFork
	switch {
	case d.manifest.Runtime == RuntimeNode:
		mode = zygote.ModeWorker
	case d.manifest.Mode == ModeSpawn:
		mode = zygote.ModeSpawn
	}
	err := d.attachNetwork(ctx)
	var z *zygote.Zygote
	if err == nil {
		z, err = zygote.Start(ctx, d.m.zygoteSpec(d, mode))
	}
	if err != nil {
		d.mu.Lock()
		d.setLocked("failed", nil, err)
		d.mu.Unlock()
		return err
	}
	r := z.Ready()
	d.m.appendLogs(ctx, d.zygoLines(warmupReport(r)))
	// What this start retires (an import-check zygote, a replaced worker
	// pool) is stopped after d.mu is released: status and requests must not
	// wait for a sandbox to stop.
	var retired *zygote.Zygote
	var oldPool *workerPool
	defer func() {
		if oldPool != nil {
			oldPool.close()
		}
		if retired != nil {
			retired.Stop()
		}
	}()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped { // halted while this zygote started (a restart racing a stop)
		go z.Stop()
		return errRetired
	}
	d.ready = r
	switch {
	case mode == zygote.ModeWorker:
		oldPool = d.pool
		size := 0
		if d.manifest.PoolSize != nil {
			size = *d.manifest.PoolSize
		}
		if size == 0 {
			retired, z = z, nil // the import check; every request starts its own worker
		}
		d.pool = newWorkerPool(d, size, z)
		d.setLocked("ready", nil, nil)
	case mode == zygote.ModeSpawn:
		retired = z
		d.setLocked("ready", nil, nil)
	case !r.ForkSafe:
		retired = z
		d.fallback = "threads alive at warm-up (" + threadDetail(r) + "): serving each request from a fresh interpreter (spawn) instead of forking"
		d.m.appendLogs(ctx, d.zygoLines("falling back to spawn mode: "+d.fallback))
		d.setLocked("ready", nil, nil)
	case d.manifest.OnNativeRandom == NativeRandomSpawn && nativeRandomLibraries(r) != 0:
		retired = z
		why := "native code drew OS randomness before the first fork"
		if nativeRandomLibraries(r) < 0 {
			why = "the native-randomness guard is not loaded, so native draws cannot be ruled out"
		}
		d.fallback = why + " and on_native_random = \"spawn\" (see the native_random check): serving each request from a fresh interpreter (spawn) instead of forking"
		d.m.appendLogs(ctx, d.zygoLines("falling back to spawn mode: "+d.fallback))
		d.setLocked("ready", nil, nil)
	default:
		d.setLocked("ready", z, nil)
		go d.supervise(z)
	}
	return nil
}

func threadDetail(r zygote.Ready) string {
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
func nativeRandomLibraries(r zygote.Ready) int {
	for _, c := range r.Checks {
		if c.Name == "native_random" {
			return c.Count
		}
	}
	return 0
}

func warmupReport(r zygote.Ready) string {
	var b strings.Builder
	fmt.Fprintf(&b, "zygote ready in %d ms: pid %d (host %d), python %s, %s, fork_safe=%v",
		r.Took.Milliseconds(), r.PID, r.HostPID, r.Python, r.OpenSSL, r.ForkSafe)
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "\nwarm-up %s [%s]: %s", c.Name, c.Level, c.Detail)
	}
	return b.String()
}

// supervise restarts the zygote when it dies unexpectedly, with backoff.
func (d *deployment) supervise(z *zygote.Zygote) {
	<-z.Done()
	d.mu.Lock()
	if d.stopped || d.z != z {
		d.mu.Unlock()
		return
	}
	d.setLocked("restarting", nil, z.Err())
	d.mu.Unlock()
	z.Stop() // it has exited: this only gives back its run directory and /tmp
	msg := fmt.Sprintf("zygote died (%v); restarting", z.Err())
	d.m.log.Warn(msg, "function", d.name)
	d.m.appendLogs(context.Background(), d.zygoLines(msg))
	d.restartLoop()
}

func (d *deployment) superviseAfterFailure(err error) {
	d.m.appendLogs(context.Background(), d.zygoLines(fmt.Sprintf("zygote failed to start (%v); retrying", err)))
	d.restartLoop()
}

func (d *deployment) restartLoop() {
	backoff := 200 * time.Millisecond
	for {
		d.mu.Lock()
		stopped := d.stopped
		d.mu.Unlock()
		if stopped {
			return
		}
		err := d.start(context.Background())
		if err == nil {
			return
		}
		d.m.log.Error("restarting zygote", "function", d.name, "err", err)
		time.Sleep(backoff)
		backoff = min(backoff*2, 30*time.Second)
	}
}

// current waits until the deployment can take a request and returns its
// zygote (nil means: spawn a fresh interpreter).
func (d *deployment) current(ctx context.Context) (*zygote.Zygote, error) {
	limit := time.NewTimer(d.m.cfg.ReadyTimeout)
	defer limit.Stop()
	for {
		d.mu.Lock()
		state, z, ch, lastErr := d.state, d.z, d.changed, d.lastErr
		d.mu.Unlock()
		switch state {
		case "ready":
			return z, nil
		case "stopped":
			return nil, errRetired
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-limit.C:
			return nil, fmt.Errorf("%w: function %q is %s: %v", errdefs.ErrUnavailable, d.name, state, lastErr)
		}
	}
}

// errRetired says a deployment was halted (replaced, removed or shut down)
// before a request could start on it; Invoke moves the request to the
// function's current deployment.
var errRetired = errors.New("deployment retired")

// acquireSlot waits for one of d's concurrency slots; errRetired when d is
// halted first (or by the time the slot is free).
func (d *deployment) acquireSlot(ctx context.Context) error {
	select {
	case d.sem <- struct{}{}:
		if d.isStopped() {
			<-d.sem
			return errRetired
		}
		return nil
	case <-d.retired:
		return errRetired
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *deployment) releaseSlot() { <-d.sem }

func (d *deployment) isStopped() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stopped
}

// halt marks d stopped, wakes the requests waiting for its slots and closes
// its worker pool; it returns the zygote, which still runs. It is
// idempotent and returns the same zygote each time.
func (d *deployment) halt() *zygote.Zygote {
	d.mu.Lock()
	if d.stopped {
		z := d.haltedZ
		d.mu.Unlock()
		return z
	}
	z, pool := d.z, d.pool
	d.stopped, d.haltedZ = true, z
	d.setLocked("stopped", nil, nil)
	close(d.retired)
	d.mu.Unlock()
	if pool != nil {
		pool.close()
	}
	return z
}

// drainAndStop halts d, waits (up to the longest timeout plus 5 s) until
// no request holds one of its slots and its zygote has released them, and
// stops the zygote.
func (d *deployment) drainAndStop() {
	z := d.halt()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(d.manifest.Limits.TimeoutMs)*time.Millisecond+5*time.Second)
	defer cancel()
	// Holding every slot means no request is between picking this version
	// and the end of its Run (spawn and worker requests included).
	for range cap(d.sem) {
		select {
		case d.sem <- struct{}{}:
		case <-ctx.Done():
		}
	}
	if z != nil {
		_ = z.Drain(ctx)
		d.m.stopZygote(z)
	}
	d.closeNetwork()
	d.released.Do(func() { d.m.releaseDir(d.codeDir) })
}

// stop halts d and stops its zygote at once (in-flight requests fail).
func (d *deployment) stop() {
	if z := d.halt(); z != nil {
		d.m.stopZygote(z)
	}
	d.closeNetwork()
	d.released.Do(func() { d.m.releaseDir(d.codeDir) })
}

func (d *deployment) status() Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Status{Name: d.name, Version: d.version, Runtime: d.manifest.Runtime, Mode: d.manifest.Mode,
		State: d.state, Fallback: d.fallback, InFlight: int(d.inflight.Load()), Served: d.served.Load(), Manifest: d.manifest}
	if d.z != nil {
		s.ZygotePID = d.z.Ready().HostPID
	}
	if d.pool != nil {
		s.IdleWorkers = d.pool.idle()
	}
	return s
}

func (d *deployment) result(unchanged bool) *DeployResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	return &DeployResult{Name: d.name, Version: d.version, Unchanged: unchanged, Mode: d.manifest.Mode,
		Fallback: d.fallback, Checks: d.ready.Checks, ReadyMs: d.ready.Took.Milliseconds()}
}

// outputSink stores what the agent prints on its own fds: outside
// requests, and a spawned agent's or worker's after GO (bounded and
// redacted by the zygote, zygote.Spec.Output).
func (d *deployment) outputSink() func(requestID, stream string, lines []string) {
	return func(requestID, stream string, lines []string) {
		now := time.Now()
		out := make([]store.LogLine, len(lines))
		for i, l := range lines {
			out[i] = store.LogLine{Function: d.name, Version: d.version, RequestID: requestID, Stream: stream, At: now, Line: l}
		}
		d.m.appendLogs(context.Background(), out)
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
