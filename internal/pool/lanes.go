package pool

import (
	"context"
	"fmt"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
)

// sharedLane is the key of a pool's shared zygote in pool.lanes.
const sharedLane = ""

// tenantSecretsBind is the secret list a tenant's lane is started with:
// any non-empty list binds the sandbox's /run/secrets; the files
// themselves are written per request (function.Call.Secrets).
var tenantSecretsBind = []string{"tenant"}

// lane is one zygote of a pool: the shared one (key "") or a tenant's own
// (key = the tenant), which only that tenant's children are ever forked
// from, so the secret files its requests receive are never beside another
// tenant's child.
type lane struct {
	key    string
	runner function.Runner
	ready  chan struct{} // closed once Start returned; err says how
	err    error
	// guarded by pool.mu:
	inflight int
	lastUsed time.Time
}

// laneFor returns the lane that serves a request of tenant (its own when
// own is set), started if needed, with its inflight count raised: call
// p.leave(l) when the request ends. Errors: the start's (import failed,
// unavailable), or ctx's.
func (p *pool) laneFor(ctx context.Context, tenant string, own bool) (*lane, error) {
	key := sharedLane
	if own {
		key = tenant
	}
	p.mu.Lock()
	l := p.lanes[key]
	if l != nil && l.startedDead() {
		delete(p.lanes, key) // its zygote died: start another
		go l.runner.Stop()
		l = nil
	}
	if p.removed {
		p.mu.Unlock()
		return nil, fmt.Errorf("pool %q (removed or replaced while the request waited): %w", p.name, errdefs.ErrNotFound)
	}
	if l == nil {
		var err error
		if l, err = p.newLaneLocked(key); err != nil {
			p.mu.Unlock()
			return nil, err
		}
	}
	l.inflight++
	p.mu.Unlock()
	select {
	case <-l.ready:
	case <-ctx.Done():
		p.leave(l)
		return nil, ctx.Err()
	}
	if l.err != nil {
		p.leave(l)
		return nil, l.err
	}
	return l, nil
}

// startedDead reports whether l started and its zygote has since died.
func (l *lane) startedDead() bool {
	select {
	case <-l.ready:
	default:
		return false
	}
	if l.err != nil {
		return true
	}
	if ex := l.runner.Exited(); ex != nil {
		select {
		case <-ex:
			return true
		default:
		}
	}
	return false
}

// newLaneLocked makes lane key and starts its zygote in the background.
func (p *pool) newLaneLocked(key string) (*lane, error) {
	var secrets []string
	if key != sharedLane {
		secrets = tenantSecretsBind
	}
	fm, err := p.man.FunctionManifest(secrets)
	if err != nil {
		return nil, err
	}
	r, err := p.m.cfg.Launcher.NewRunner(function.RunnerOptions{
		Kind: function.KindFork, Function: p.owner(), Version: p.bootHash[:12], Manifest: fm,
		CodeDir: p.bootDir, HostUID: p.hostUID, Output: p.zygoteOutput, Log: p.log.With("lane", laneName(key)),
		Hold: p.hold(),
	})
	if err != nil {
		return nil, err
	}
	l := &lane{key: key, runner: r, ready: make(chan struct{}), lastUsed: time.Now()}
	p.lanes[key] = l
	p.m.goTracked(func() {
		defer close(l.ready)
		ctx, cancel := context.WithTimeout(p.m.ctx, p.m.cfg.ReadyTimeout+10*time.Second)
		defer cancel()
		w, err := r.Start(ctx)
		if err != nil {
			l.err = startError(p.name, key, err)
			p.log.Warn("pool zygote did not start", "lane", laneName(key), "err", err)
			return
		}
		p.mu.Lock()
		p.warmup = w
		p.mu.Unlock()
		p.log.Info("pool zygote ready", "lane", laneName(key), "host_pid", r.Status().HostPID, "fallback", w.Fallback)
	})
	return l, nil
}

// leave ends one request's use of l.
func (p *pool) leave(l *lane) {
	p.mu.Lock()
	l.inflight--
	l.lastUsed = time.Now()
	p.mu.Unlock()
}

// reapIdle stops the tenant lanes with no request for idle or longer.
func (p *pool) reapIdle(now time.Time, idle time.Duration) {
	var stop []*lane
	p.mu.Lock()
	for key, l := range p.lanes {
		if key != sharedLane && l.inflight == 0 && now.Sub(l.lastUsed) >= idle {
			delete(p.lanes, key)
			stop = append(stop, l)
		}
	}
	p.mu.Unlock()
	for _, l := range stop {
		p.log.Info("stopping an idle tenant zygote", "lane", laneName(l.key))
		l.runner.Stop()
	}
}

func laneName(key string) string {
	if key == sharedLane {
		return "shared"
	}
	return "tenant:" + key
}

// startError says why a lane's zygote did not start, keeping the
// function runtime's category (an import failure is the pool's
// preload's).
func startError(pool, key string, err error) error {
	return fmt.Errorf("starting the %s zygote of pool %q: %w", laneName(key), pool, err)
}
