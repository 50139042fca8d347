// Package errdefs holds the category errors shared by Zygo's managers, backends and the API
// edge. Callers test with errors.Is; only the API edge maps a category to an HTTP status
// (containerd's errdefs, smaller).
//
// Every package wraps one of these with context ("restoring checkpoint %q: %w") rather than
// defining its own category; a typed error that needs fields (sandbox.TransitionError) unwraps
// to one of them.
package errdefs

import "errors"

var (
	// ErrNotFound: the named object (sandbox, checkpoint, file) does not exist. HTTP 404.
	ErrNotFound = errors.New("not found")
	// ErrExists: an object with that id or name already exists. HTTP 409.
	ErrExists = errors.New("already exists")
	// ErrFailedPrecondition: the object exists but is in a state that forbids the operation
	// (an illegal state transition, a checkpoint still referenced by children). HTTP 409.
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrUnavailable: a dependency (the engine, the guest agent) did not answer or died;
	// retrying later may succeed. HTTP 503.
	ErrUnavailable = errors.New("unavailable")
	// ErrInvalidArgument: the request itself is malformed or out of range (fork N above the
	// bound, an empty argv). HTTP 400.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrTooLarge: a request or response body exceeds its limit. HTTP 413.
	ErrTooLarge = errors.New("too large")
	// ErrDeadlineExceeded: the operation ran past its time limit. HTTP 504.
	ErrDeadlineExceeded = errors.New("deadline exceeded")
	// ErrPermissionDenied: the caller may not do this to that object (a read-only or
	// root-only file in a sandbox). HTTP 403.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrTooManyRequests: the target is at its capacity and its queue is full (a function's
	// concurrency and queue, a pool tenant's); the caller should retry later. HTTP 429, with
	// Retry-After when the error says how long (a RetryAfter() time.Duration method).
	ErrTooManyRequests = errors.New("too many requests")
)

// IsNotFound reports whether err is, or wraps, ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsExists reports whether err is, or wraps, ErrExists.
func IsExists(err error) bool { return errors.Is(err, ErrExists) }

// IsFailedPrecondition reports whether err is, or wraps, ErrFailedPrecondition.
func IsFailedPrecondition(err error) bool { return errors.Is(err, ErrFailedPrecondition) }

// IsUnavailable reports whether err is, or wraps, ErrUnavailable.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// IsInvalidArgument reports whether err is, or wraps, ErrInvalidArgument.
func IsInvalidArgument(err error) bool { return errors.Is(err, ErrInvalidArgument) }

// All returns every category above, in the order a caller that must pick one for an error
// wrapping several should try them (the API edge's table follows it). The slice is new on
// each call.
func All() []error {
	return []error{ErrNotFound, ErrInvalidArgument, ErrTooLarge, ErrPermissionDenied, ErrExists,
		ErrFailedPrecondition, ErrUnavailable, ErrDeadlineExceeded, ErrTooManyRequests}
}
