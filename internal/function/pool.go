package function

import (
	"context"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/zygote"
)

// workerPool keeps up to size Node workers ready (imported, waiting for
// GO). A worker serves one request and exits; the pool starts its
// replacement off the request path.
type workerPool struct {
	d     *deployment
	size  int
	ready chan *zygote.Zygote // idle, ready workers
	kick  chan struct{}       // wakes the filler
	ctx   context.Context     // cancelled by stop
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

func newWorkerPool(d *deployment, size int, first *zygote.Zygote) *workerPool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &workerPool{d: d, size: size, ready: make(chan *zygote.Zygote, size), kick: make(chan struct{}, 1), ctx: ctx, stop: cancel}
	if first != nil {
		p.ready <- first
	}
	p.wg.Add(1)
	go p.fill()
	return p
}

// fill starts workers until size are ready, and again whenever one is
// taken or dies. A worker that fails to start is retried with backoff.
func (p *workerPool) fill() {
	defer p.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		for len(p.ready) < p.size {
			if p.ctx.Err() != nil {
				return
			}
			z, err := zygote.Start(p.ctx, p.d.m.zygoteSpec(p.d, zygote.ModeWorker))
			if err != nil {
				if p.ctx.Err() != nil {
					return
				}
				p.d.m.log.Warn("starting a worker", "function", p.d.name, "err", err)
				select {
				case <-time.After(backoff):
				case <-p.ctx.Done():
					return
				}
				backoff = min(backoff*2, 10*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
			p.ready <- z
		}
		select {
		case <-p.kick:
		case <-p.ctx.Done():
			return
		case <-time.After(time.Second): // notice workers that died while idle
			p.dropDead()
		}
	}
}

// dropDead removes idle workers whose process has exited.
func (p *workerPool) dropDead() {
	for i := len(p.ready); i > 0; i-- {
		select {
		case z := <-p.ready:
			if z.Err() != nil {
				p.d.m.log.Warn("an idle worker died; replacing it", "function", p.d.name, "err", z.Err())
				z.Stop()
				continue
			}
			p.ready <- z
		default:
			return
		}
	}
}

// take returns a ready worker (the caller owns it and must Stop it after its
// request), starting one inline when none is idle (a cold start).
func (p *workerPool) take(ctx context.Context) (*zygote.Zygote, bool, error) {
	defer func() {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}()
	for {
		select {
		case z := <-p.ready:
			if z.Err() != nil {
				z.Stop()
				continue
			}
			return z, false, nil
		default:
			z, err := zygote.Start(ctx, p.d.m.zygoteSpec(p.d, zygote.ModeWorker))
			return z, true, err
		}
	}
}

// close stops the filler and every idle worker.
func (p *workerPool) close() {
	p.stop()
	p.wg.Wait()
	for {
		select {
		case z := <-p.ready:
			z.Stop()
		default:
			return
		}
	}
}

// idle returns the number of ready workers.
func (p *workerPool) idle() int { return len(p.ready) }
