// Package cleanup is an undo stack for multi-step operations (gVisor's pkg/cleanup with a
// context): each step that makes something pushes how to unmake it; on success the caller
// releases the stack, on failure it runs the undos newest first under a detached,
// time-bounded context, so a cancelled request still cleans up after itself.
package cleanup

import (
	"context"
	"errors"
	"time"
)

// DefaultTimeout bounds the undo run when no other timeout is given.
const DefaultTimeout = 30 * time.Second

// Stack holds undo functions. The zero value is ready; it is not safe for concurrent use.
type Stack struct {
	fns      []func(context.Context) error
	released bool
}

// Add pushes fn; it runs on Run unless the stack was released.
func (s *Stack) Add(fn func(context.Context) error) { s.fns = append(s.fns, fn) }

// Release drops every undo: the operation succeeded.
func (s *Stack) Release() { s.released, s.fns = true, nil }

// Run runs the undos newest first unless released, with a context detached from parent's
// cancellation (values kept) and bounded by timeout (DefaultTimeout if zero). It returns the
// joined undo errors. Meant for defer.
func (s *Stack) Run(parent context.Context, timeout time.Duration) error {
	if s.released || len(s.fns) == 0 {
		return nil
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), timeout)
	defer cancel()
	var errs []error
	for i := len(s.fns) - 1; i >= 0; i-- {
		if err := s.fns[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.fns = nil
	return errors.Join(errs...)
}
