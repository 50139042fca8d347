package agentproc

import (
	"context"
	"sync"
	"time"
)

// Pre-forking: a fork-mode zygote keeps a few children forked ahead of
// demand, each past its hello and waiting for GO, so the fork is off the
// request path. Everything that depends on the request (secrets, reseed,
// TMPDIR, strict filter, the start of its cgroup's CPU count) still
// happens at or after GO, so a pre-forked child is exactly as independent
// as one forked on demand. Only the move into a request cgroup of its own
// (Spec.Hold) is done in the pool: on cgroup v1 a move after a quiet
// spell costs the kernel 8-16 ms (docs/BENCHMARKS.md).
//
// The pool's target follows traffic: one more than the peak number of
// requests in flight in the last window (at least 1), at most Spec.PreFork;
// after IdleAfter without a request it shrinks to 0 (the idle children
// exit). A child joins the pool once it has said hello, which the agent
// sends after its pre-warm, so a child taken from the pool is ready for GO,
// and after Spec.Hold (its request cgroup) has readied it.
type pool struct {
	ceiling int
	ch      chan *child
	kick    chan struct{}

	mu       sync.Mutex // guards the fields below
	inflight int
	peak     int       // highest inflight in the current window
	lastReq  time.Time // when the last request started
	winStart time.Time
}

// Pool tuning.
const (
	poolWindow    = 30 * time.Second
	poolIdleAfter = 60 * time.Second
	poolTick      = time.Second
)

func newPool(ceiling int) *pool {
	if ceiling <= 0 {
		return nil
	}
	return &pool{ceiling: ceiling, ch: make(chan *child, ceiling), kick: make(chan struct{}, 1),
		lastReq: time.Now(), winStart: time.Now()}
}

// take returns an idle, live pre-forked child, or nil. Dead ones are
// released. An empty pool wakes the filler at once; after a child is taken
// the caller wakes it (wake) once the child has its GO, so that the GO
// leaves the daemon before the refill's fork request.
func (p *pool) take(z *Process) *child {
	if p == nil {
		return nil
	}
	for {
		select {
		case c := <-p.ch:
			if c.exited() {
				z.release(c)
				continue
			}
			return c
		default:
			p.wake()
			return nil
		}
	}
}

// wake tells the filler to check the pool's target (nil-safe; never blocks).
func (p *pool) wake() {
	if p == nil {
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// started and finished track requests in flight, for the target.
func (p *pool) started() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.inflight++
	p.lastReq = time.Now()
	p.peak = max(p.peak, p.inflight)
	p.mu.Unlock()
}

func (p *pool) finished() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.inflight--
	p.mu.Unlock()
}

// target is how many idle children to keep now.
func (p *pool) target(now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Sub(p.lastReq) > poolIdleAfter {
		return 0
	}
	if now.Sub(p.winStart) > poolWindow {
		p.winStart, p.peak = now, p.inflight
	}
	// One more than the peak in flight: the child a request takes is
	// replaced while a warm one still waits, so back-to-back requests never
	// find only a child that is still forking and warming up.
	return min(max(p.peak, 1)+1, p.ceiling)
}

// Idle returns the number of pre-forked children waiting.
func (z *Process) Idle() int {
	if z.pool == nil {
		return 0
	}
	return len(z.pool.ch)
}

// fill keeps the pool at its target until the zygote stops being ready,
// then releases every idle child.
func (z *Process) fill() {
	p := z.pool
	defer func() {
		for {
			select {
			case c := <-p.ch:
				z.release(c)
			case d := <-z.dirs:
				_ = d.remove(context.Background())
			default:
				return
			}
		}
	}()
	tick := time.NewTicker(poolTick)
	defer tick.Stop()
	for {
		if z.State() != StateReady {
			return
		}
		want := p.target(time.Now())
		for len(p.ch) > want {
			select {
			case c := <-p.ch:
				z.release(c)
			default:
			}
		}
		for len(p.ch) < want && z.State() == StateReady {
			c, ok := z.makeChild(context.Background(), false, func(Failure, string, ...any) {})
			if !ok || !z.hold(c) {
				break
			}
			p.ch <- c
		}
		// Request directories too: only the event is written on the request path.
		for len(z.dirs) < want {
			d, err := z.newDir()
			if err != nil {
				break
			}
			z.dirs <- d
		}
		select {
		case <-p.kick:
		case <-tick.C:
		case <-z.done:
			return
		case <-z.draining:
			return
		}
	}
}
