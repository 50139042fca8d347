package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Errors that end calls on a sandbox for reasons of the sandbox, not of the call. Each wraps
// the errdefs category the API answers with.
var (
	// ErrRemoved ends the calls in flight on (and waiting for) a sandbox that rm removes: rm
	// does not wait for them. It wraps errdefs.ErrNotFound.
	ErrRemoved = fmt.Errorf("removed while the call was in flight: %w", errdefs.ErrNotFound)
	// ErrDead ends the calls on a sandbox whose engine died (State Dead) and answers later
	// ones. It wraps errdefs.ErrFailedPrecondition.
	ErrDead = fmt.Errorf("its engine died: %w", errdefs.ErrFailedPrecondition)
	// ErrRecovering answers calls on a sandbox that a Manager started after a daemon restart
	// has not re-attached yet (State Recovering). Retry shortly. It wraps errdefs.ErrUnavailable.
	ErrRecovering = fmt.Errorf("being recovered after a daemon restart; retry shortly: %w", errdefs.ErrUnavailable)
	// errClosed ends the calls in flight when the Manager is closed.
	errClosed = fmt.Errorf("sandbox manager closed: %w", errdefs.ErrUnavailable)
)

// gate admits the calls on one sandbox: any number of shared ones (exec, run-code, files) or
// one exclusive one (checkpoint, rollback, rm), never both. An exclusive call that is waiting
// holds new shared calls back, so a busy sandbox cannot starve a checkpoint.
type gate struct {
	mu      sync.Mutex    // guards the fields below
	shared  int           // shared calls in
	excl    bool          // an exclusive call is in
	waiting int           // exclusive calls waiting
	wake    chan struct{} // closed and replaced whenever the fields above change
}

// changedLocked wakes every waiter.
func (g *gate) changedLocked() {
	if g.wake != nil {
		close(g.wake)
	}
	g.wake = make(chan struct{})
}

// lock admits one call, shared or exclusive, waiting until ctx ends. It returns ctx's error.
func (g *gate) lock(ctx context.Context, shared bool) error {
	g.mu.Lock()
	if g.wake == nil {
		g.wake = make(chan struct{})
	}
	if !shared {
		g.waiting++
	}
	for {
		switch {
		case shared && !g.excl && g.waiting == 0:
			g.shared++
			g.mu.Unlock()
			return nil
		case !shared && !g.excl && g.shared == 0:
			g.waiting--
			g.excl = true
			g.mu.Unlock()
			return nil
		}
		wake := g.wake
		g.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			g.mu.Lock()
			if !shared {
				g.waiting--
				g.changedLocked() // shared calls held back by this one may go in
			}
			g.mu.Unlock()
			return ctx.Err()
		}
		g.mu.Lock()
	}
}

// unlock lets one call out.
func (g *gate) unlock(shared bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if shared {
		g.shared--
	} else {
		g.excl = false
	}
	g.changedLocked()
}

// inFlight returns the number of shared calls in.
func (g *gate) inFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shared
}

// entry is a sandbox with a running engine instance.
type entry struct {
	id   string
	be   Backend // the backend inst runs on (the record's)
	gate gate
	// ctx ends when the sandbox is removed, its engine dies or the Manager closes; every call
	// on the sandbox runs under it, and context.Cause(ctx) says why (ErrRemoved, ErrDead,
	// errClosed).
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu        sync.Mutex // guards inst and stopWatch
	inst      *Instance
	stopWatch context.CancelFunc // stops watching inst's engine (see watch)
}

func (e *entry) instance() *Instance {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inst
}

// gone returns why calls on e end, or nil while it is usable.
func (e *entry) gone() error {
	if e.ctx.Err() == nil {
		return nil
	}
	return context.Cause(e.ctx)
}

// call is one admitted call on a sandbox: its record as it was when admitted, and a ctx that
// ends when the caller's does or when the sandbox goes (removed, dead, Manager closed).
type call struct {
	rec    SandboxRecord
	e      *entry
	ctx    context.Context
	shared bool
	stop   func() bool
	cancel context.CancelCauseFunc
}

// end releases the call and returns err, replaced by why the sandbox went when it went while
// the call was in flight (an exec cut off by rm returns ErrRemoved, not "context canceled").
func (c *call) end(err error) error {
	c.stop()
	c.cancel(nil)
	c.e.gate.unlock(c.shared)
	if err == nil {
		return nil
	}
	if errdefs.IsUnavailable(err) && c.e.gone() == nil {
		// The guest's connection broke: if the engine died, its watch says so within
		// milliseconds; give it a moment, so the caller learns why instead of "EOF".
		t := time.NewTimer(deadGrace)
		select {
		case <-c.e.ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if why := c.e.gone(); why != nil {
		return fmt.Errorf("%w (%v)", why, err) //nolint:errorlint // one cause on purpose: why the sandbox went decides the category; the call's own error (EOF) is detail
	}
	return err
}

// deadGrace is how long a call whose guest connection broke waits for the engine's watch to
// say whether the engine died.
const deadGrace = time.Second

// begin admits a call on the Running sandbox idOrName: shared (exec, run-code, files), or
// exclusive waiting at most wait for the calls in flight (0: as long as ctx allows). Release it
// with end. It returns an error wrapping errdefs.ErrNotFound for an unknown sandbox,
// ErrRecovering while it is being re-attached, ErrDead or ErrRemoved when it went,
// errdefs.ErrFailedPrecondition when it is not Running or the exclusive wait ran out.
func (m *Manager) begin(ctx context.Context, idOrName string, shared bool, wait time.Duration) (*call, error) {
	rec, err := m.get(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	if m.isRecovering(rec.ID) {
		return nil, fmt.Errorf("sandbox %s is %w", rec.ID, ErrRecovering)
	}
	m.mu.Lock()
	e := m.live[rec.ID]
	m.mu.Unlock()
	if e == nil {
		if rec.State == Dead {
			return nil, &deadError{id: rec.ID, cause: errors.New(rec.Error)}
		}
		if rec.Error != "" {
			return nil, fmt.Errorf("sandbox %s is %s (%s): %w", rec.ID, rec.State, rec.Error, errdefs.ErrFailedPrecondition)
		}
		return nil, fmt.Errorf("sandbox %s is %s: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	if why := e.gone(); why != nil {
		return nil, why
	}
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(e.ctx, func() { cancel(context.Cause(e.ctx)) })
	c := &call{e: e, ctx: cctx, shared: shared, stop: stop, cancel: cancel}
	wctx, wcancel := cctx, context.CancelFunc(func() {})
	if !shared && wait > 0 {
		wctx, wcancel = context.WithTimeout(cctx, wait)
	}
	err = e.gate.lock(wctx, shared)
	wcancel()
	if err != nil {
		stop()
		cancel(nil)
		if why := e.gone(); why != nil {
			return nil, why
		}
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("sandbox %s still has %d calls in flight (exec, run-code or files) after %s; "+
				"retry when they are done, or cancel them: %w", rec.ID, e.gate.inFlight(), wait, errdefs.ErrFailedPrecondition)
		}
		return nil, fmt.Errorf("waiting for the calls in flight on sandbox %s: %w: %w", rec.ID, ctx.Err(), errdefs.ErrFailedPrecondition)
	}
	// Re-read: the state may have moved while we waited.
	if c.rec, err = m.reg.GetSandbox(ctx, rec.ID); err == nil && c.rec.State != Running {
		err = fmt.Errorf("sandbox %s is %s: %w", rec.ID, c.rec.State, errdefs.ErrFailedPrecondition)
	}
	if err == nil {
		err = e.gone()
	}
	if err != nil {
		_ = c.end(nil)
		return nil, err
	}
	return c, nil
}

// addLive registers a Running sandbox's instance and starts watching its engine.
func (m *Manager) addLive(id string, be Backend, inst *Instance) {
	ctx, cancel := context.WithCancelCause(m.ctx)
	e := &entry{id: id, be: be, ctx: ctx, cancel: cancel, inst: inst}
	m.mu.Lock()
	m.live[id] = e
	m.mu.Unlock()
	m.watch(e, inst)
}

// dropLive forgets e if it is still the live entry of its sandbox.
func (m *Manager) dropLive(e *entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live[e.id] == e {
		delete(m.live, e.id)
	}
}
