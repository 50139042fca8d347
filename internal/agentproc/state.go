package agentproc

import (
	"fmt"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// State is where a zygote is in its lifecycle:
//
//	starting ──▶ ready ──▶ draining ──▶ stopped
//	    │          └───────────────────────▲
//	    └──────────────────────────────────┘
//
// Start moves starting → ready once the agent answered ready; Drain (and
// the one Run a spawned agent or worker serves) ready → draining; the exit
// of the sandbox process moves any state to stopped. Every change goes
// through toLocked.
type State int

const (
	StateStarting State = iota
	StateReady
	StateDraining
	StateStopped
)

func (s State) String() string {
	return [...]string{"starting", "ready", "draining", "stopped"}[s]
}

// TransitionError is returned for an illegal state change.
type TransitionError struct{ From, To State }

func (e *TransitionError) Error() string {
	return fmt.Sprintf("zygote cannot go from %s to %s", e.From, e.To)
}

func (e *TransitionError) Unwrap() error { return errdefs.ErrFailedPrecondition }

// transitions lists the legal moves from each state.
var transitions = map[State][]State{
	StateStarting: {StateReady, StateStopped},
	StateReady:    {StateDraining, StateStopped},
	StateDraining: {StateStopped},
}

// Transition reports whether a zygote may go from one state to another:
// nil, or a *TransitionError (wrapping errdefs.ErrFailedPrecondition).
func Transition(from, to State) error {
	for _, s := range transitions[from] {
		if s == to {
			return nil
		}
	}
	return &TransitionError{From: from, To: to}
}

// toLocked moves z to state to, or leaves it where it is and returns the
// *TransitionError. z.mu must be held.
func (z *Process) toLocked(to State) error {
	if err := Transition(z.state, to); err != nil {
		return err
	}
	z.state = to
	return nil
}
