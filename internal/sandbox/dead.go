package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrEngineExited is what ExitWatcher.WaitExit wraps when the engine exited.
var ErrEngineExited = errors.New("engine exited")

// ExitWatcher is an optional Backend capability: it notices an instance's engine dying while
// the daemon runs (killed, crashed, its PID 1 gone), so the Manager can mark the sandbox Dead
// at once instead of at the next daemon start. Find it with a type assertion.
type ExitWatcher interface {
	// WaitExit blocks until instance id's engine exits or ctx ends. It returns an error
	// wrapping ErrEngineExited, with the cause, when the engine exited (or was already gone);
	// ctx's error when ctx ended first; any other error when it cannot watch the instance.
	// The caller ends the wait (ctx) before it destroys the instance itself. Safe for
	// concurrent use.
	WaitExit(ctx context.Context, id string) error
}

// deadError is what a call on a dead sandbox fails with: ErrDead (so errors.Is finds it and
// errdefs.ErrFailedPrecondition) and the cause, and the message ends with the next step.
type deadError struct {
	id    string
	cause error // why the engine died, as recorded (Record.Error)
}

func (e *deadError) Error() string {
	return fmt.Sprintf("sandbox %s is dead (%v): %v (zygo sandbox rm %s removes it)", e.id, e.cause, ErrDead, e.id)
}

func (e *deadError) Unwrap() []error { return []error{ErrDead, e.cause} }

// deadMarkTimeout bounds how long marking a sandbox Dead waits for its calls to unwind.
const deadMarkTimeout = 30 * time.Second

// watch starts watching inst, e's current instance, when the backend can; it stops watching
// the instance watched before (a rollback replaced it). The watch ends with e.ctx.
func (m *Manager) watch(e *entry, inst *Instance) {
	w, ok := e.be.(ExitWatcher)
	if !ok {
		return
	}
	ctx, stop := context.WithCancel(e.ctx)
	e.mu.Lock()
	if e.stopWatch != nil {
		e.stopWatch()
	}
	e.stopWatch = stop
	e.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer stop()
		err := w.WaitExit(ctx, inst.ID)
		if ctx.Err() != nil { // stopped on purpose: rm, rollback, Close
			return
		}
		if !errors.Is(err, ErrEngineExited) {
			m.log.Warn("cannot watch the sandbox's engine; a death will be noticed at the next daemon start",
				"sandbox_id", e.id, "engine_id", inst.ID, "err", err)
			return
		}
		m.engineDied(e, inst.ID, err)
	}()
}

// engineDied ends every call on e with ErrDead, waits (bounded) for them to unwind, and marks
// the sandbox Dead with the cause, unless it was removed or rolled back to another instance
// meanwhile. rm cleans a Dead sandbox up.
func (m *Manager) engineDied(e *entry, engineID string, cause error) {
	m.log.Error("sandbox engine died; marking the sandbox dead (zygo sandbox rm removes it)",
		"sandbox_id", e.id, "engine_id", engineID, "err", cause)
	e.cancel(&deadError{id: e.id, cause: cause})
	ctx, cancel := context.WithTimeout(m.ctx, deadMarkTimeout)
	defer cancel()
	if err := e.gate.lock(ctx, false); err == nil {
		defer e.gate.unlock(false)
	}
	if m.ctx.Err() != nil { // closing: the next daemon's recovery marks it
		return
	}
	rec, err := m.reg.GetSandbox(ctx, e.id)
	if err != nil || rec.EngineID != engineID || rec.State == Dead { // a failed rollback may have marked it
		return
	}
	m.dropLive(e)
	if err := m.setState(ctx, &rec, Dead, cause); err != nil {
		m.log.Error("marking sandbox dead", "sandbox_id", e.id, "err", err)
	}
}
