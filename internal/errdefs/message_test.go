package errdefs

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestMessage: a category reads once, as the predicate of the subject it was wrapped onto
// (not found, already exists), and is taken out wherever it is a tag on text that says what
// is wrong itself.
func TestMessage(t *testing.T) {
	inv, unav := ErrInvalidArgument, ErrUnavailable
	cause := errors.New("exec: runsc: no such file")
	notFound := fmt.Errorf("function %q: %w", "x", ErrNotFound)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{notFound, `function "x" not found`},
		{fmt.Errorf("invoking: %w", notFound), `invoking: function "x" not found`},
		{fmt.Errorf("%w: %w", notFound, ErrNotFound), `function "x" not found`},
		{fmt.Errorf("sandbox name %q: %w", "agent", ErrExists), `sandbox name "agent" already exists`},
		{fmt.Errorf("guest: %w: %w", errors.New("open /x: no such file or directory"), ErrNotFound), "guest: open /x: no such file or directory"},
		{fmt.Errorf("%w: pids 0: must be from 1 to 4096", inv), "pids 0: must be from 1 to 4096"},
		{fmt.Errorf("n: 17: must be between 1 and 16: %w", inv), "n: 17: must be between 1 and 16"},
		{fmt.Errorf("secret %q is used by s: remove it first: %w", "K", ErrFailedPrecondition), `secret "K" is used by s: remove it first`},
		{fmt.Errorf("creating sandbox: %w", fmt.Errorf("%w: secrets: unknown", inv)), "creating sandbox: secrets: unknown"},
		{fmt.Errorf("starting sb-1: %w: %w", cause, unav), "starting sb-1: exec: runsc: no such file"},
		{fmt.Errorf("starting the agent: %w (%w)", cause, unav), "starting the agent: exec: runsc: no such file"},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), "waiting: context deadline exceeded"},
		{ErrNotFound, "not found"},
		{nil, ""},
		// Text that merely contains the words, or a category the error does not wrap, stays.
		{fmt.Errorf("runsc: executable file not found in $PATH: %w", unav), "runsc: executable file not found in $PATH"},
		{fmt.Errorf("the engine said: invalid argument: %w", unav), "the engine said: invalid argument"},
	} {
		if got := Message(tc.err); got != tc.want {
			t.Errorf("Message(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
