package envd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// errNotRunning is the category of a call whose sandbox is missing, paused or stopped. E2B's
// proxy answers such calls 502 (Connect: unavailable), which the SDK raises as TimeoutError
// ("the sandbox was probably killed or timed out"); Zygo answers the same.
var errNotRunning = errors.New("sandbox is not running")

// notRunning is the error of a call on sandbox id, which CheckRunning refused with cause.
func notRunning(id string, cause error) error {
	return &tagged{msg: fmt.Sprintf("sandbox %s is not running (%s)", id, errdefs.Message(cause)), tag: errNotRunning}
}

// tagged is an error whose text is msg alone and whose category is tag.
type tagged struct {
	msg string
	tag error
}

func (e *tagged) Error() string        { return e.msg }
func (e *tagged) Is(target error) bool { return target == e.tag }

// invalidf is a bad-input error: the message names the field and what is wanted.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// notFoundf is a not-found error whose message says what is missing.
func notFoundf(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errdefs.ErrNotFound)
}

// errUnsupported marks what E2B's envd does and Zygo does not (a PTY).
var errUnsupported = errors.New("not supported")

// unsupportedf is an error for a feature Zygo does not serve.
func unsupportedf(format string, args ...any) error {
	return &tagged{msg: fmt.Sprintf(format, args...), tag: errUnsupported}
}

// kinds maps an error's category to its Connect code and HTTP status, first match wins
// (errdefs.All's order, then the context's). An error of none is internal (500).
var kinds = []struct {
	category error
	code     connect.Code
	status   int
}{
	{errNotRunning, connect.CodeUnavailable, http.StatusBadGateway},
	{errUnsupported, connect.CodeUnimplemented, http.StatusNotImplemented},
	{errUnauthenticated, connect.CodeUnauthenticated, http.StatusUnauthorized},
	{errdefs.ErrNotFound, connect.CodeNotFound, http.StatusNotFound},
	{errdefs.ErrInvalidArgument, connect.CodeInvalidArgument, http.StatusBadRequest},
	// The SDK would read resource_exhausted as a rate limit: a body or file over its bound
	// is bad input of its kind.
	{errdefs.ErrTooLarge, connect.CodeInvalidArgument, http.StatusRequestEntityTooLarge},
	{errdefs.ErrPermissionDenied, connect.CodePermissionDenied, http.StatusForbidden},
	{errdefs.ErrExists, connect.CodeAlreadyExists, http.StatusConflict},
	{errdefs.ErrFailedPrecondition, connect.CodeFailedPrecondition, http.StatusConflict},
	{errdefs.ErrUnavailable, connect.CodeUnavailable, http.StatusServiceUnavailable},
	{errdefs.ErrDeadlineExceeded, connect.CodeDeadlineExceeded, http.StatusGatewayTimeout},
	{errdefs.ErrTooManyRequests, connect.CodeResourceExhausted, http.StatusTooManyRequests},
	{context.DeadlineExceeded, connect.CodeDeadlineExceeded, http.StatusGatewayTimeout},
	{context.Canceled, connect.CodeCanceled, 499},
}

// classify returns err's Connect code and HTTP status; ok is false for an error of no
// category (internal).
func classify(err error) (connect.Code, int, bool) {
	for _, k := range kinds {
		if errors.Is(err, k.category) {
			return k.code, k.status, true
		}
	}
	return connect.CodeInternal, http.StatusInternalServerError, false
}

// explain turns an error of the backend into the one the client gets: a not-found error
// on a sandbox that does not run becomes errNotRunning (the backend reports a missing
// sandbox and a missing file alike).
func (s *Server) explain(ctx context.Context, id string, err error) error {
	if id == "" || !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrFailedPrecondition) && !errors.Is(err, errdefs.ErrUnavailable) {
		return err
	}
	if cerr := s.sb.CheckRunning(ctx, id); cerr != nil && ctx.Err() == nil {
		return notRunning(id, cerr)
	}
	return err
}

// rpcError is err as a Connect error for a call on sandbox id, logged when it has no
// category.
func (s *Server) rpcError(ctx context.Context, id string, err error) error {
	err = s.explain(ctx, id, err)
	code, _, ok := classify(err)
	if !ok {
		s.log.Error("envd: an error of no category", "sandbox_id", id, "err", err)
	}
	return connect.NewError(code, errors.New(errdefs.Message(err)))
}

// errorBody is the REST error shape of E2B's envd, which the SDK reads.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeError answers a REST call on sandbox id with err's status and {"code","message"}.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, id string, err error) {
	err = s.explain(r.Context(), id, err)
	_, status, ok := classify(err)
	if !ok {
		s.log.Error("envd: an error of no category", "sandbox_id", id, "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, status, errorBody{Code: status, Message: errdefs.Message(err)})
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client went away: nothing to tell it
}
