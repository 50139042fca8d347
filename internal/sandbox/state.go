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
	// Paused: checkpointed and stopped (pause.go). No engine instance runs: it holds no CPU
	// or memory, only its image (CheckpointID). Resume restores it, resealed.
	Paused State = "paused"
	// Resuming: a paused sandbox's image is being restored and resealed.
	Resuming State = "resuming"
	// Dead: the engine instance died (killed, crashed, PID 1 gone), noticed while the daemon
	// ran or at its start; Error says why. Calls fail at once (ErrDead); rm cleans it up.
	Dead State = "dead"
	// Failed: a step could not be undone (rm could not clean the engine up); Error says why.
	Failed   State = "failed"
	Removing State = "removing"
	// Recovering is shown, never stored: a Manager started after a daemon restart has not
	// re-attached the sandbox yet (the stored record keeps its state). Calls answer
	// ErrRecovering (retry); rm waits for it.
	Recovering State = "recovering"
)

// transitions lists the legal moves of stored states. Removing is reachable from everywhere
// (rm, cleanup of a failed step) and is handled in transition.
var transitions = map[State][]State{
	Creating:      {Running, Failed},
	Restoring:     {Resealing, Failed},
	Resealing:     {Running, Failed},
	Running:       {Checkpointing, RollingBack, Paused, Dead, Failed},
	Paused:        {Resuming},
	Resuming:      {Running, Paused, Failed},
	Checkpointing: {Running, Dead, Failed},
	RollingBack:   {Running, Dead, Failed},
	Dead:          {},
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
