package function

import (
	"fmt"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// State is where a deployment is in its lifecycle:
//
//	starting ──▶ ready ──▶ restarting ──▶ ready
//	   │           │           │
//	   ▼           │           ▼
//	 failed ◀──────┼─────── failed ──▶ ready (a retry that succeeded)
//	   all ──────▶ stopped (halted: replaced, removed, shut down)
//
// starting: its runtime is being started; ready: it serves; restarting:
// its runtime died and another is being started; failed: the last start
// failed and another is tried after a backoff (failed → failed is another
// failed attempt); stopped: final. Every change goes through
// deployment.toLocked, which refuses any other move.
type State int

const (
	StateStarting State = iota
	StateReady
	StateRestarting
	StateFailed
	StateStopped
)

// String is the name `zygo ls` shows.
func (s State) String() string {
	return [...]string{"starting", "ready", "restarting", "failed", "stopped"}[s]
}

// TransitionError is returned for an illegal state change of a deployment.
type TransitionError struct{ From, To State }

func (e *TransitionError) Error() string {
	return fmt.Sprintf("deployment cannot go from %s to %s", e.From, e.To)
}

func (e *TransitionError) Unwrap() error { return errdefs.ErrFailedPrecondition }

var transitions = map[State][]State{
	StateStarting:   {StateReady, StateFailed, StateStopped},
	StateReady:      {StateRestarting, StateStopped},
	StateRestarting: {StateReady, StateFailed, StateStopped},
	StateFailed:     {StateReady, StateFailed, StateStopped},
}

// Transition reports whether a deployment may go from one state to
// another: nil, or a *TransitionError (wrapping
// errdefs.ErrFailedPrecondition).
func Transition(from, to State) error {
	for _, s := range transitions[from] {
		if s == to {
			return nil
		}
	}
	return &TransitionError{From: from, To: to}
}
