package function

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
)

// forkRunner is the fork zygote: one long-lived agent that imported the
// code and forks a child per request (docs/protocol.md). When warm-up finds
// forking unsafe it stops the zygote and serves every request from a fresh
// interpreter instead (Warmup.Fallback).
type forkRunner struct {
	l    *sandboxLauncher
	opts RunnerOptions

	mu    sync.Mutex         // guards the fields below, set once by Start
	z     *agentproc.Process // nil before Start and after a fallback
	files *secretFiles       // z's /run/secrets, shared by its requests
	spawn *spawnRunner       // set after a fallback
}

var _ Runner = (*forkRunner)(nil)

// Start implements Runner.
func (r *forkRunner) Start(ctx context.Context) (Warmup, error) {
	z, err := r.l.start(ctx, r.opts, agentproc.ModeFork)
	if err != nil {
		return Warmup{}, err
	}
	ready := z.Ready()
	if why := forkUnsafe(r.opts.Manifest, ready); why != "" {
		z.Stop() // it was the import check; every request gets its own interpreter
		spawn := &spawnRunner{l: r.l, opts: r.opts}
		r.mu.Lock()
		r.spawn = spawn
		r.mu.Unlock()
		return Warmup{Ready: ready, Fallback: why}, nil
	}
	r.mu.Lock()
	r.z, r.files = z, filesOf(z)
	r.mu.Unlock()
	return Warmup{Ready: ready}, nil
}

// forkUnsafe says why forking from a zygote with warm-up report ready is
// not safe for manifest m ("" when it is).
func forkUnsafe(m *Manifest, ready agentproc.Ready) string {
	switch n := nativeRandomLibraries(ready); {
	case !ready.ForkSafe:
		return "threads alive at warm-up (" + threadDetail(ready) + "): serving each request from a fresh interpreter (spawn) instead of forking"
	case m.OnNativeRandom == NativeRandomSpawn && n != 0:
		why := "native code drew OS randomness before the first fork"
		if n < 0 {
			why = "the native-randomness guard is not loaded, so native draws cannot be ruled out"
		}
		return why + " and on_native_random = \"spawn\" (see the native_random check): serving each request from a fresh interpreter (spawn) instead of forking"
	}
	return ""
}

func (r *forkRunner) current() (*agentproc.Process, *secretFiles, *spawnRunner) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.z, r.files, r.spawn
}

// Run implements Runner.
func (r *forkRunner) Run(ctx context.Context, call Call) (*agentproc.Result, error) {
	z, files, spawn := r.current()
	switch {
	case spawn != nil:
		return spawn.Run(ctx, call)
	case z == nil:
		return nil, errUnavailable("the zygote has not started")
	}
	return z.Run(ctx, call.request(files))
}

// Drain implements Runner.
func (r *forkRunner) Drain(ctx context.Context) error {
	z, _, spawn := r.current()
	switch {
	case spawn != nil:
		return spawn.Drain(ctx)
	case z != nil:
		return z.Drain(ctx)
	}
	return nil
}

// Stop implements Runner.
func (r *forkRunner) Stop() {
	z, _, spawn := r.current()
	if spawn != nil {
		spawn.Stop()
	}
	if z != nil {
		z.Stop()
	}
}

// Exited implements Runner: the zygote's Done (nil after a fallback).
func (r *forkRunner) Exited() <-chan struct{} {
	if z, _, _ := r.current(); z != nil {
		return z.Done()
	}
	return nil
}

// Err implements Runner.
func (r *forkRunner) Err() error {
	if z, _, _ := r.current(); z != nil {
		return z.Err()
	}
	return nil
}

// Status implements Runner.
func (r *forkRunner) Status() RunnerStatus {
	if z, _, _ := r.current(); z != nil {
		return RunnerStatus{HostPID: z.Ready().HostPID, IdleChildren: z.Idle()}
	}
	return RunnerStatus{}
}

// spawnRunner serves each request from a fresh interpreter that imports
// the code, runs that one request and exits; Start is an import check.
type spawnRunner struct {
	l    *sandboxLauncher
	opts RunnerOptions
	g    gate
}

var _ Runner = (*spawnRunner)(nil)

// Start implements Runner: one import in spawn mode, then stopped.
func (r *spawnRunner) Start(ctx context.Context) (Warmup, error) {
	z, err := r.l.start(ctx, r.opts, agentproc.ModeSpawn)
	if err != nil {
		return Warmup{}, err
	}
	ready := z.Ready()
	z.Stop()
	return Warmup{Ready: ready}, nil
}

// Run implements Runner.
func (r *spawnRunner) Run(ctx context.Context, call Call) (*agentproc.Result, error) {
	if err := r.g.enter(); err != nil {
		return nil, err
	}
	defer r.g.leave()
	t0 := time.Now()
	z, err := r.l.start(ctx, r.opts, agentproc.ModeSpawn)
	if err != nil {
		return nil, fmt.Errorf("%w: starting a fresh interpreter: %w", errdefs.ErrUnavailable, err)
	}
	return runOnce(ctx, &r.g, z, call, t0)
}

// Drain implements Runner.
func (r *spawnRunner) Drain(ctx context.Context) error { return r.g.close(ctx) }

// Stop implements Runner: new Runs are refused; a request in flight owns
// its interpreter and stops it when it ends.
func (r *spawnRunner) Stop() { r.g.shut() }

// Exited implements Runner: nil, nothing long-lived can die.
func (r *spawnRunner) Exited() <-chan struct{} { return nil }

// Err implements Runner.
func (r *spawnRunner) Err() error { return nil }

// Status implements Runner.
func (r *spawnRunner) Status() RunnerStatus { return RunnerStatus{} }
