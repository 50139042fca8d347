// Package errdefs holds Zygo's error categories. Packages wrap one of these
// sentinels (with %w) so that the API edge can map an error to an HTTP status
// without knowing where it came from (the containerd errdefs pattern).
//
// Only internal/api maps categories to status codes; everything else just
// wraps and tests with errors.Is.
package errdefs

import "errors"

var (
	// ErrNotFound: the named object (function, version, sandbox, checkpoint,
	// secret) does not exist. HTTP 404.
	ErrNotFound = errors.New("not found")
	// ErrExists: the object already exists and cannot be created again. HTTP 409.
	ErrExists = errors.New("already exists")
	// ErrInvalidArgument: the caller's input is malformed or out of range.
	// HTTP 400.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrFailedPrecondition: the request is well formed but the system is not
	// in a state that allows it (a checkpoint still referenced, a version that
	// failed to import). HTTP 409 or 422 depending on the call.
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrUnavailable: a backing process is not ready or died (zygote
	// restarting, sandbox engine gone). HTTP 503.
	ErrUnavailable = errors.New("unavailable")
	// ErrTooLarge: a request or response body exceeds its limit. HTTP 413.
	ErrTooLarge = errors.New("too large")
	// ErrDeadlineExceeded: the operation ran past its time limit. HTTP 504.
	ErrDeadlineExceeded = errors.New("deadline exceeded")
)
