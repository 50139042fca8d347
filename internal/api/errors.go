package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// categoryCodes is the one mapping from Zygo's error categories to the API's typed codes
// (the HTTP status comes from the code: wire.StatusOf). An error wrapping several
// categories gets the first that matches, in errdefs.All's order. context.DeadlineExceeded
// and context.Canceled are the standard library's categories of the same kind.
// TestCategoryCodes checks every errdefs category is here.
var categoryCodes = []struct {
	category error
	code     wire.Code
}{
	{errdefs.ErrNotFound, wire.CodeNotFound},
	{errdefs.ErrInvalidArgument, wire.CodeBadRequest},
	{errdefs.ErrTooLarge, wire.CodeTooLarge},
	{errdefs.ErrPermissionDenied, wire.CodePermissionDenied},
	{errdefs.ErrExists, wire.CodeExists},
	{errdefs.ErrFailedPrecondition, wire.CodeFailedPrecondition},
	{errdefs.ErrUnavailable, wire.CodeUnavailable},
	{errdefs.ErrDeadlineExceeded, wire.CodeDeadlineExceeded},
	{errdefs.ErrTooManyRequests, wire.CodeTooManyRequests},
	{context.DeadlineExceeded, wire.CodeDeadlineExceeded},
	{context.Canceled, wire.CodeCancelled},
}

// errorCode returns the code of err's category and its HTTP status; wire.CodeInternal (500),
// logged, for an error of no category. Server.fail uses it, and so do errors reported inside
// a stream or a body of their own.
func (s *Server) errorCode(err error) (wire.Code, int) {
	for _, c := range categoryCodes {
		if errors.Is(err, c.category) {
			return c.code, wire.StatusOf(c.code)
		}
	}
	s.log.Error("api: an error of no category", "err", err)
	return wire.CodeInternal, wire.StatusOf(wire.CodeInternal)
}

// errorBody is err as an error body: its code, and its message without the category's text.
func (s *Server) errorBody(err error) *wire.ErrorBody {
	code, _ := s.errorCode(err)
	return &wire.ErrorBody{Code: code, Message: userMessage(err)}
}

// fail answers err with the status and code of its category (errorCode). An error that
// says when to retry (a RetryAfter() time.Duration method, such as a full queue's) also sets
// Retry-After, in whole seconds rounded up (at least 1); a 429 always has one (the API's
// contract), 1 second when err does not say.
func (s *Server) fail(w http.ResponseWriter, err error) {
	body := *s.errorBody(err)
	var ra interface{ RetryAfter() time.Duration }
	switch {
	case errors.As(err, &ra):
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(ra.RetryAfter())))
	case body.Code == wire.CodeTooManyRequests:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(0)))
	}
	writeError(w, body)
}

// retryAfterSeconds is d in whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// writeError answers e with the HTTP status of its code (wire.StatusOf): the status is never
// chosen apart from the code.
func writeError(w http.ResponseWriter, e wire.ErrorBody) {
	writeJSON(w, wire.StatusOf(e.Code), wire.ErrorAnswer{Error: e})
}

// userMessage is err's text as a caller reads it (errdefs.Message): one sentence, the
// category at most once and only as its predicate, so the message never repeats what the
// code says and the CLI prints it as it is.
func userMessage(err error) string { return errdefs.Message(err) }
