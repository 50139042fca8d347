package agentproc_test

import (
	"errors"
	"testing"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
)

// TestZygoteTransitions: the legal moves pass, every other one is a
// *TransitionError naming from and to (a 409-class error).
func TestZygoteTransitions(t *testing.T) {
	legal := map[[2]agentproc.State]bool{
		{agentproc.StateStarting, agentproc.StateReady}:   true,
		{agentproc.StateStarting, agentproc.StateStopped}: true,
		{agentproc.StateReady, agentproc.StateDraining}:   true,
		{agentproc.StateReady, agentproc.StateStopped}:    true,
		{agentproc.StateDraining, agentproc.StateStopped}: true,
	}
	all := []agentproc.State{agentproc.StateStarting, agentproc.StateReady, agentproc.StateDraining, agentproc.StateStopped}
	for _, from := range all {
		for _, to := range all {
			err := agentproc.Transition(from, to)
			if legal[[2]agentproc.State{from, to}] {
				if err != nil {
					t.Errorf("%s → %s: %v", from, to, err)
				}
				continue
			}
			var te *agentproc.TransitionError
			if !errors.As(err, &te) || te.From != from || te.To != to || !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("%s → %s: got %v, want a TransitionError from/to", from, to, err)
			}
		}
	}
}
