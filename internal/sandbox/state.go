package sandbox

import (
	"fmt"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// State is where a sandbox is in its lifecycle (see the package doc).
type State string

// The states. Only Running sandboxes accept exec, run-code, files, checkpoint, fork and
// rollback.
const (
	Creating      State = "creating"
	Restoring     State = "restoring"
	Resealing     State = "resealing"
	Running       State = "running"
	Checkpointing State = "checkpointing"
	RollingBack   State = "rolling_back"
	Failed        State = "failed"
	Removing      State = "removing"
)

// transitions lists the legal moves. Removing is reachable from everywhere (rm, cleanup of a
// failed step) and is handled in transition.
var transitions = map[State][]State{
	Creating:      {Running, Failed},
	Restoring:     {Resealing, Failed},
	Resealing:     {Running, Failed},
	Running:       {Checkpointing, RollingBack, Failed},
	Checkpointing: {Running, Failed},
	RollingBack:   {Running, Failed},
	Failed:        {},
	Removing:      {Failed}, // the engine could not be cleaned up
}

// TransitionError is an illegal state move. It unwraps to errdefs.ErrFailedPrecondition.
type TransitionError struct {
	ID       string
	From, To State
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("sandbox %s is %s, cannot become %s", e.ID, e.From, e.To)
}

func (e *TransitionError) Unwrap() error { return errdefs.ErrFailedPrecondition }

// transition returns nil when id may move from one state to the other, else a
// *TransitionError.
func transition(id string, from, to State) error {
	if to == Removing && from != Removing {
		return nil
	}
	for _, s := range transitions[from] {
		if s == to {
			return nil
		}
	}
	return &TransitionError{ID: id, From: from, To: to}
}
