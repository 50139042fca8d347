package function

import (
	"context"
	"log/slog"
	"sync"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/cleanup"
	"github.com/zygo-run/zygo/internal/errdefs"
)

// Runner is the function runtime: how one deployment runs its code. A deployment
// holds exactly one; which one is the manifest's business (KindOf), and
// nothing outside the implementations knows how it serves a request.
//
// Lifecycle:
//
//	Start  imports the code once and returns when the runtime can serve
//	       (the warm-up report) or could not (*agentproc.ImportError, or
//	       errdefs.ErrUnavailable / ErrDeadlineExceeded); on error nothing
//	       is left running. Called once.
//	Run    serves one request; many may run at once. Only after Start
//	       succeeded.
//	Drain  refuses new Runs and waits until those in flight have returned
//	       and released what they held, or ctx ends.
//	Stop   releases everything the runtime holds (processes, run
//	       directories, cgroups); in-flight requests fail. Idempotent, safe
//	       at any time, bounded (about 11 s whatever a sandbox does).
//
// Exited reports a runtime that can no longer serve by itself (a fork
// zygote whose process died); the deployment then stops it and starts
// another. All methods are safe for concurrent use.
type Runner interface {
	// Start imports the code and warms up; see the lifecycle above.
	Start(ctx context.Context) (Warmup, error)
	// Run serves one request. Its error is non-nil only when the request
	// could not start (errdefs.ErrUnavailable: draining, stopped, or no
	// sandbox came up); what happened to a started request is in the
	// Result (Failure, Error, output). Result.Elapsed is the request's whole
	// time on this runtime, sandbox start included.
	Run(ctx context.Context, call Call) (*agentproc.Result, error)
	// Drain refuses new Runs and waits for those in flight (ctx.Err() if
	// ctx ends first). It does not stop anything; call Stop after.
	Drain(ctx context.Context) error
	// Stop releases everything; idempotent.
	Stop()
	// Exited is closed when the runtime's long-lived process has died and
	// it cannot serve any more (Err says why); nil for runtimes that start
	// a process per request and so never die as a whole.
	Exited() <-chan struct{}
	// Err says why Exited was closed; nil before.
	Err() error
	// Status is what `zygo ls` shows of the runtime now.
	Status() RunnerStatus
}

// Warmup is what Start reports.
type Warmup struct {
	Ready agentproc.Ready // the import's warm-up report
	// Fallback is non-empty when a fork runtime found forking unsafe
	// (threads alive, native randomness with on_native_random = "spawn")
	// and serves each request from a fresh interpreter instead: why.
	Fallback string
}

// RunnerStatus is a runtime's state for status calls.
type RunnerStatus struct {
	HostPID     int // the fork zygote's host pid; 0 for runtimes without a long-lived process
	IdleWorkers int // ready Node workers (the worker pool only)
	// IdleChildren counts the fork zygote's pre-forked children waiting for a request.
	IdleChildren int
}

// Call is one request for Runner.Run.
type Call struct {
	// Request is the request; the runtime sets its BeforeGo from Secrets
	// and Place.
	Request agentproc.Request
	// Secrets are written into the serving sandbox's /run/secrets (0400,
	// its uid) before GO and removed when the last request using them
	// ends; nil writes none.
	Secrets map[string][]byte
	// Place, when set, moves the request's process (host pid) into its
	// cgroup before GO, unless RunnerOptions.Hold put it there ahead of the
	// request; its after runs once the outcome is known (it may reclassify
	// the failure). See agentproc.Request.BeforeGo.
	Place func(ctx context.Context, hostPID int) (after func(*agentproc.Result), err error)
}

// Kind names a Runner implementation.
type Kind string

const (
	KindFork   Kind = "fork"   // one long-lived zygote forks a child per request (Python)
	KindSpawn  Kind = "spawn"  // a fresh interpreter per request (Python, mode = "spawn")
	KindWorker Kind = "worker" // a pool of Node workers, one request each
)

// KindOf says which runtime serves manifest m: the one place a runtime or
// mode in the manifest chooses how requests are served.
func KindOf(m *Manifest) Kind {
	switch {
	case m.Runtime == RuntimeNode:
		return KindWorker
	case m.Mode == ModeSpawn:
		return KindSpawn
	}
	return KindFork
}

// RunnerOptions says what a runtime runs.
type RunnerOptions struct {
	Kind     Kind
	Function string
	Version  string
	Manifest *Manifest
	CodeDir  string // the version's directory, bound read-only at /code
	HostUID  uint32 // host uid and gid of its sandboxes; 0: the daemon's own
	// NetNS, when set, is the path of the network namespace every sandbox
	// of the runtime starts in instead of a new empty one (the deployment's
	// internal/network endpoint, which the caller owns and closes after the
	// runtime has stopped); ResolvConf is then the sandboxes' /etc/resolv.conf.
	NetNS      string
	ResolvConf string
	// Hold, when set, is agentproc.Spec.Hold of the runtime's sandboxes:
	// the request cgroup of a pre-forked child or ready worker, made ready
	// when it joins the pool (Manager.holdInCgroup).
	Hold func(ctx context.Context, hostPID int) (agentproc.Held, error)
	// Output receives what the sandboxes print on their own fds
	// (agentproc.Spec.Output); may be nil.
	Output func(requestID, stream string, lines []string)
	Log    *slog.Logger
}

// Launcher makes runtimes. The Manager's default runs each sandbox with
// bubblewrap (NewSandboxLauncher); tests pass fakes.
type Launcher interface {
	// NewRunner returns a runtime for opts, not started. Errors:
	// errdefs.ErrInvalidArgument for options it cannot honour.
	NewRunner(opts RunnerOptions) (Runner, error)
}

// secretsHolder is one sandbox's /run/secrets, as the runtimes need it.
type secretsHolder interface {
	SecretsDir() string
	HostUID() int
}

// request returns c's request with a BeforeGo hook that writes c's secrets
// into files and places the child in its cgroup, undoing what it did (on
// failure at once, on success after the outcome) through a cleanup stack.
func (c Call) request(files *secretFiles) agentproc.Request {
	req := c.Request
	if len(c.Secrets) == 0 && c.Place == nil {
		return req
	}
	req.BeforeGo = func(ctx context.Context, hostPID int, held bool) (func(*agentproc.Result), error) {
		var afters []func(*agentproc.Result)
		after := func(res *agentproc.Result) {
			for i := len(afters) - 1; i >= 0; i-- {
				afters[i](res)
			}
		}
		var undo cleanup.Stack
		defer func() { _ = undo.Run(ctx, 0) }()
		if len(c.Secrets) > 0 {
			if err := files.acquire(c.Secrets); err != nil {
				return nil, err
			}
			afters = append(afters, func(*agentproc.Result) { files.release() })
			undo.Add(func(context.Context) error { files.release(); return nil })
		}
		if c.Place != nil && !held { // a held child sits in its request cgroup already (RunnerOptions.Hold)
			placed, err := c.Place(ctx, hostPID)
			if err != nil {
				return nil, err
			}
			afters = append(afters, placed)
		}
		undo.Release()
		return after, nil
	}
	return req
}

// filesOf returns a fresh secretFiles for sandbox s.
func filesOf(s secretsHolder) *secretFiles {
	return &secretFiles{dir: s.SecretsDir(), uid: s.HostUID()}
}

// gate admits Runs until closed and counts those in flight: the Drain of
// runtimes that have no zygote of their own to drain.
type gate struct {
	mu       sync.Mutex // guards closed; Add on inflight happens under it
	closed   bool
	inflight sync.WaitGroup
}

// enter admits one Run (call leave when it returns), or fails with
// errdefs.ErrUnavailable once the gate is closed.
func (g *gate) enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errUnavailable("the runtime is draining")
	}
	g.inflight.Add(1)
	return nil
}

func (g *gate) leave() { g.inflight.Done() }

// hold counts one more piece of work in flight (call leave when it ends),
// closed or not: only for a Run already admitted by enter, whose work goes
// on after it returns.
func (g *gate) hold() { g.inflight.Add(1) }

// shut refuses new Runs.
func (g *gate) shut() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// close refuses new Runs and waits for those in flight, or ctx.
func (g *gate) close(ctx context.Context) error {
	g.shut()
	idle := make(chan struct{})
	go func() { g.inflight.Wait(); close(idle) }()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type unavailableError string

func (e unavailableError) Error() string { return string(e) }
func (e unavailableError) Unwrap() error { return errdefs.ErrUnavailable }

func errUnavailable(msg string) error { return unavailableError(msg) }
