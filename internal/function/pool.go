package function

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
)

// oneShot is a sandbox that serves one request and exits: a spawned agent
// or a Node worker. *agentproc.Process implements it.
type oneShot interface {
	Run(ctx context.Context, req agentproc.Request) (*agentproc.Result, error)
	Stop()
	Done() <-chan struct{} // closed once the sandbox has exited and its output is read
	Err() error            // non-nil once the process has exited
	SecretsDir() string
	HostUID() int
}

var _ oneShot = (*agentproc.Process)(nil)

// workerRunner is the Node runtime: a pool of pool_size workers, each a
// fresh node in the function's sandbox that loaded the handler and waits
// for GO; a request takes one (or starts one when none is idle), and the
// worker exits after it.
type workerRunner struct {
	l    *sandboxLauncher
	opts RunnerOptions
	g    gate

	mu   sync.Mutex // guards pool
	pool *workerPool
}

var _ Runner = (*workerRunner)(nil)

func newWorkerRunner(l *sandboxLauncher, opts RunnerOptions) *workerRunner {
	return &workerRunner{l: l, opts: opts}
}

func (r *workerRunner) startWorker(ctx context.Context) (oneShot, error) {
	z, err := r.l.start(ctx, r.opts, agentproc.ModeWorker)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return z, nil
}

// Start implements Runner: the first worker is the import check, and the
// pool's first ready worker (stopped when pool_size is 0).
func (r *workerRunner) Start(ctx context.Context) (Warmup, error) {
	z, err := r.l.start(ctx, r.opts, agentproc.ModeWorker)
	if err != nil {
		return Warmup{}, err
	}
	ready := z.Ready()
	size := 0
	if r.opts.Manifest.PoolSize != nil {
		size = *r.opts.Manifest.PoolSize
	}
	var first oneShot = z
	if size == 0 {
		z.Stop() // every request starts its own worker
		first = nil
	}
	r.mu.Lock()
	r.pool = newWorkerPool(size, first, r.startWorker, r.opts.Log)
	r.mu.Unlock()
	return Warmup{Ready: ready}, nil
}

func (r *workerRunner) getPool() *workerPool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pool
}

// Run implements Runner.
func (r *workerRunner) Run(ctx context.Context, call Call) (*agentproc.Result, error) {
	if err := r.g.enter(); err != nil {
		return nil, err
	}
	defer r.g.leave()
	p := r.getPool()
	if p == nil {
		return nil, errUnavailable("the worker pool has not started")
	}
	t0 := time.Now()
	w, _, err := p.take(ctx)
	defer p.done()
	if err != nil {
		return nil, fmt.Errorf("%w: starting a worker: %w", errdefs.ErrUnavailable, err)
	}
	return runOnce(ctx, &r.g, w, call, t0)
}

// Drain implements Runner: idle workers are stopped at once, then the
// requests in flight are waited for.
func (r *workerRunner) Drain(ctx context.Context) error {
	r.g.shut()
	if p := r.getPool(); p != nil {
		p.close()
	}
	return r.g.close(ctx)
}

// Stop implements Runner: the filler and every idle worker are stopped; a
// request in flight owns its worker and stops it when it ends.
func (r *workerRunner) Stop() {
	r.g.shut()
	if p := r.getPool(); p != nil {
		p.close()
	}
}

// Exited implements Runner: nil, the pool replaces workers that die.
func (r *workerRunner) Exited() <-chan struct{} { return nil }

// Err implements Runner.
func (r *workerRunner) Err() error { return nil }

// Status implements Runner.
func (r *workerRunner) Status() RunnerStatus {
	if p := r.getPool(); p != nil {
		return RunnerStatus{IdleWorkers: p.idle()}
	}
	return RunnerStatus{}
}

// workerPool keeps up to size one-shot sandboxes ready (imported, waiting
// for GO). A worker serves one request and exits; the pool starts its
// replacement off the request path. While a worker is still ready for the
// next request, a replacement waits for the requests in flight on the pool
// to have their outcome and for answerGrace more (the daemon's answer to
// them), refillDelay at most in all (settle): a worker's start is a Node
// start-up, tens of milliseconds of CPU, and on a machine with few cores it
// slowed the request that took the worker when it ran beside it, and that
// request's answer when it started with the outcome. When none is ready, it
// starts at once.
type workerPool struct {
	size        int
	start       func(ctx context.Context) (oneShot, error)
	log         *slog.Logger
	ready       chan oneShot    // idle, ready workers
	kick        chan struct{}   // wakes the filler
	inflight    atomic.Int32    // requests between take and done
	settled     chan struct{}   // done's signal to a filler waiting in settle
	refillDelay time.Duration   // settle's bound
	answerGrace time.Duration   // settle's wait after the outcome
	ctx         context.Context // cancelled by close
	stop        context.CancelFunc
	wg          sync.WaitGroup // the filler
	once        sync.Once
}

// newWorkerPool returns a pool of size workers made by start, holding
// first (may be nil) as its first ready one, and starts its filler; close
// stops it.
func newWorkerPool(size int, first oneShot, start func(context.Context) (oneShot, error), log *slog.Logger) *workerPool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &workerPool{size: size, start: start, log: log, ready: make(chan oneShot, size), kick: make(chan struct{}, 1),
		settled: make(chan struct{}, 1), refillDelay: workerRefillDelay, answerGrace: workerAnswerGrace, ctx: ctx, stop: cancel}
	if first != nil {
		p.ready <- first
	}
	p.wg.Add(1)
	go p.fill()
	return p
}

// Pool tuning: backoff after a worker failed to start, how often idle
// workers are checked for having died, and how long a replacement's start
// waits at most for the requests in flight (settle), and after their
// outcome for the daemon to answer them.
const (
	workerBackoffMin  = 100 * time.Millisecond
	workerBackoffMax  = 10 * time.Second
	workerCheck       = time.Second
	workerRefillDelay = 20 * time.Millisecond
	workerAnswerGrace = 5 * time.Millisecond
)

// fill starts workers until size are ready, and again whenever one is
// taken or dies. A worker that fails to start is retried with backoff.
func (p *workerPool) fill() {
	defer p.wg.Done()
	backoff := workerBackoffMin
	for {
		for len(p.ready) < p.size {
			if !p.settle() {
				return
			}
			w, err := p.start(p.ctx)
			if err != nil {
				if p.ctx.Err() != nil {
					return
				}
				p.log.Warn("starting a worker", "err", err)
				if !sleepCtx(p.ctx, backoff) {
					return
				}
				backoff = min(backoff*2, workerBackoffMax)
				continue
			}
			backoff = workerBackoffMin
			p.ready <- w
		}
		t := time.NewTimer(workerCheck)
		select {
		case <-p.kick:
		case <-p.ctx.Done():
			t.Stop()
			return
		case <-t.C: // notice workers that died while idle
			p.dropDead()
		}
		t.Stop()
	}
}

// settle waits before a replacement's start, while a worker is still ready:
// until no request taken from the pool is in flight, then answerGrace more,
// refillDelay at most in all. It returns at once when no worker is ready (a
// request now would start one itself) or none is in flight; false when the
// pool was closed.
func (p *workerPool) settle() bool {
	if len(p.ready) == 0 || p.inflight.Load() == 0 {
		return p.ctx.Err() == nil
	}
	t := time.NewTimer(p.refillDelay)
	defer t.Stop()
	for p.inflight.Load() > 0 {
		select {
		case <-p.settled:
		case <-t.C:
			return p.ctx.Err() == nil
		case <-p.ctx.Done():
			return false
		}
	}
	grace := time.NewTimer(p.answerGrace)
	defer grace.Stop()
	select {
	case <-grace.C:
	case <-t.C:
	case <-p.ctx.Done():
		return false
	}
	return p.ctx.Err() == nil
}

// sleepCtx waits d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// dropDead removes idle workers whose process has exited.
func (p *workerPool) dropDead() {
	for i := len(p.ready); i > 0; i-- {
		select {
		case w := <-p.ready:
			if w.Err() != nil {
				p.log.Warn("an idle worker died; replacing it", "err", w.Err())
				w.Stop()
				continue
			}
			p.ready <- w
		default:
			return
		}
	}
}

// take returns a ready worker (the caller owns it and must Stop it after its
// request), starting one inline when none is idle (a cold start: true). The
// caller calls done once the request has its outcome (also after an error).
func (p *workerPool) take(ctx context.Context) (oneShot, bool, error) {
	p.inflight.Add(1)
	defer func() {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}()
	for {
		select {
		case w := <-p.ready:
			if w.Err() != nil {
				w.Stop()
				continue
			}
			return w, false, nil
		default:
			w, err := p.start(ctx)
			return w, true, err
		}
	}
}

// done says that a request from take has its outcome: a replacement may
// start now (settle).
func (p *workerPool) done() {
	p.inflight.Add(-1)
	select {
	case p.settled <- struct{}{}:
	default:
	}
}

// close stops the filler and every idle worker; idempotent.
func (p *workerPool) close() {
	p.once.Do(func() {
		p.stop()
		p.wg.Wait()
		for {
			select {
			case w := <-p.ready:
				w.Stop()
			default:
				return
			}
		}
	})
}

// idle returns the number of ready workers.
func (p *workerPool) idle() int { return len(p.ready) }
