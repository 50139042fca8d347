package function

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
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
	sem      chan struct{} // concurrency slots
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
	files    *secretFiles // the current zygote's /run/secrets
	filesZ   *zygote.Zygote
	pool     *workerPool // Node functions: ready workers
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
		sem: make(chan struct{}, man.Concurrency), state: "starting", changed: make(chan struct{})}
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
	z, err := zygote.Start(ctx, d.m.zygoteSpec(d, mode))
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
			return nil, fmt.Errorf("%w: function %q was replaced or removed", errdefs.ErrUnavailable, d.name)
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

// markStopped marks d stopped: no request gets its zygote or a worker any
// more, and a supervisor does not restart it. Cheap; it stops nothing.
func (d *deployment) markStopped() {
	d.mu.Lock()
	d.stopped = true
	d.setLocked("stopped", d.z, nil)
	d.mu.Unlock()
}

// halt marks d stopped and closes its worker pool; it returns the zygote, which still runs.
func (d *deployment) halt() *zygote.Zygote {
	d.mu.Lock()
	z, pool := d.z, d.pool
	d.stopped = true
	d.setLocked("stopped", nil, nil)
	d.mu.Unlock()
	if pool != nil {
		pool.close()
	}
	return z
}

// drainAndStop waits for in-flight requests (up to the longest timeout) and
// stops the zygote.
func (d *deployment) drainAndStop() {
	if z := d.halt(); z != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(d.manifest.Limits.TimeoutMs)*time.Millisecond+5*time.Second)
		defer cancel()
		_ = z.Drain(ctx)
		d.m.stopZygote(z)
	}
}

func (d *deployment) stop() {
	if z := d.halt(); z != nil {
		d.m.stopZygote(z)
	}
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

// outputSink stores what the agent prints outside requests.
func (d *deployment) outputSink() func(requestID, stream, line string) {
	return func(requestID, stream, line string) {
		if requestID != "" && len(d.manifest.Secrets) > 0 {
			// A worker's or spawned agent's own fds after GO: scrub secrets
			// like the request's captured output.
			if values, err := d.m.secretValues(context.Background(), d.manifest.Secrets); err == nil {
				line = redact(line, values)
			}
		}
		d.m.appendLogs(context.Background(), []store.LogLine{{Function: d.name, Version: d.version,
			RequestID: requestID, Stream: stream, At: time.Now(), Line: line}})
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
