package zygote_test

import (
	"errors"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/zygote"
)

// TestZygoteTransitions: the legal moves pass, every other one is a
// *TransitionError naming from and to (a 409-class error).
func TestZygoteTransitions(t *testing.T) {
	legal := map[[2]zygote.State]bool{
		{zygote.StateStarting, zygote.StateReady}:   true,
		{zygote.StateStarting, zygote.StateStopped}: true,
		{zygote.StateReady, zygote.StateDraining}:   true,
		{zygote.StateReady, zygote.StateStopped}:    true,
		{zygote.StateDraining, zygote.StateStopped}: true,
	}
	all := []zygote.State{zygote.StateStarting, zygote.StateReady, zygote.StateDraining, zygote.StateStopped}
	for _, from := range all {
		for _, to := range all {
			err := zygote.Transition(from, to)
			if legal[[2]zygote.State{from, to}] {
				if err != nil {
					t.Errorf("%s → %s: %v", from, to, err)
				}
				continue
			}
			var te *zygote.TransitionError
			if !errors.As(err, &te) || te.From != from || te.To != to || !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("%s → %s: got %v, want a TransitionError from/to", from, to, err)
			}
		}
	}
}
