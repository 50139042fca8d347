// Package wire is the contract of Zygo's HTTP API (version v1): the request and response
// bodies, the error body and its typed codes, the headers, and the HTTP transports (unix
// socket, TCP with a bearer token). The daemon (internal/api) answers with these types,
// translating its own at the edge; the Go client (package zygo) and the CLI decode them.
// It depends on the standard library only, so anything may import it.
//
// JSON field names are the API's: changing one changes the protocol (docs/protocol.md).
package wire

import "net/http"

// Code is the machine-readable kind of a failed call: the "code" of an error body.
type Code string

// The codes every route may answer, with the HTTP status StatusOf gives them.
const (
	CodeNotFound           Code = "not_found"           // 404: no such function, sandbox, checkpoint, file, binary or route
	CodeBadRequest         Code = "bad_request"         // 400: a malformed or out-of-range request; the message names the field
	CodeTooLarge           Code = "too_large"           // 413: a body over its limit
	CodeExists             Code = "exists"              // 409: the name is taken
	CodeFailedPrecondition Code = "failed_precondition" // 409: the object's state forbids the call
	CodePermissionDenied   Code = "permission_denied"   // 403: the target refuses it (a read-only or protected path in a sandbox)
	CodeUnavailable        Code = "unavailable"         // 503: not available on this daemon now; the message says why
	CodeDeadlineExceeded   Code = "deadline_exceeded"   // 504
	CodeCancelled          Code = "cancelled"           // 499: the caller went away
	CodeInternal           Code = "internal"            // 500
	CodeUnauthenticated    Code = "unauthenticated"     // 401: no or a wrong bearer token (TCP listener)
	CodeImportFailed       Code = "import_failed"       // 422: a deploy whose new version failed to import
	CodeMethodNotAllowed   Code = "method_not_allowed"  // 405: the path exists, not with this method; the Allow header lists those it has
	// CodeHTTP is never sent by the daemon: a client gives it to an answer that carried no
	// error body (a proxy's page, say).
	CodeHTTP Code = "http"
)

// The codes of a failed invoke (the request ran, or was meant to), with their statuses.
const (
	CodeHandlerError     Code = "handler_error"      // 500: the handler raised
	CodeTimeout          Code = "timeout"            // 504: killed at the function's timeout
	CodeCrashed          Code = "crashed"            // 502: the request's process died without a result
	CodeZygoteDied       Code = "zygote_died"        // 503: the zygote died under the request
	CodeResponseTooLarge Code = "response_too_large" // 502: the result was over max_response_kib
	CodeLimitExceeded    Code = "limit_exceeded"     // 502: memory_mib, pids or cpu_ms killed it
	CodeBadEvent         Code = "bad_event"          // 400: the runtime's JSON parser refused the event
)

var codeStatus = map[Code]int{
	CodeNotFound: http.StatusNotFound, CodeBadRequest: http.StatusBadRequest,
	CodeTooLarge: http.StatusRequestEntityTooLarge, CodeExists: http.StatusConflict,
	CodeFailedPrecondition: http.StatusConflict, CodeUnavailable: http.StatusServiceUnavailable,
	CodeDeadlineExceeded: http.StatusGatewayTimeout, CodeCancelled: 499,
	CodeInternal: http.StatusInternalServerError, CodeUnauthenticated: http.StatusUnauthorized,
	CodeImportFailed: http.StatusUnprocessableEntity, CodePermissionDenied: http.StatusForbidden,
	CodeHandlerError: http.StatusInternalServerError, CodeTimeout: http.StatusGatewayTimeout,
	CodeCrashed: http.StatusBadGateway, CodeZygoteDied: http.StatusServiceUnavailable,
	CodeResponseTooLarge: http.StatusBadGateway, CodeLimitExceeded: http.StatusBadGateway,
	CodeBadEvent: http.StatusBadRequest, CodeMethodNotAllowed: http.StatusMethodNotAllowed,
}

// categoryText is the phrase of each code that names a category of failure rather than an
// outcome of a request. A message the daemon sends is a whole sentence that names its
// category at most once, as its predicate (`function "x" not found`, docs/errors.md): a
// client prints the message as it is, and uses the phrase only for an empty message.
var categoryText = map[Code]string{
	CodeNotFound: "not found", CodeBadRequest: "invalid argument", CodeTooLarge: "too large",
	CodeExists: "already exists", CodeFailedPrecondition: "failed precondition",
	CodePermissionDenied: "permission denied", CodeUnavailable: "unavailable",
	CodeDeadlineExceeded: "deadline exceeded", CodeCancelled: "cancelled",
}

// Text returns the short lowercase phrase of a category code ("not found" for
// CodeNotFound), or "" for a code whose message says everything (an invoke's handler_error,
// internal, import_failed).
func (c Code) Text() string { return categoryText[c] }

// StatusOf returns the HTTP status the daemon answers code with; 500 for a code it does not
// know. A client uses it for an error that arrives inside a stream, after the 200.
func StatusOf(code Code) int {
	if st, ok := codeStatus[code]; ok {
		return st
	}
	return http.StatusInternalServerError
}

// ErrorBody is what every failed call answers, as {"error": ErrorBody}; a stream (exec,
// run-code) ends with one in its last event instead when the call fails after it began.
type ErrorBody struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Type, Traceback: the handler's exception of a failed invoke or import.
	Type      string `json:"type,omitempty"`
	Traceback string `json:"traceback,omitempty"`
	RequestID string `json:"request_id,omitempty"` // of a failed invoke
}

// Text returns the message as a person reads it: Message as the daemon wrote it (one
// sentence, its category said at most once: `function "x" not found`), so a client prints
// what the server sent; the code's phrase (Code.Text), else the code, for an empty message.
func (b ErrorBody) Text() string {
	switch {
	case b.Message != "":
		return b.Message
	case b.Code.Text() != "":
		return b.Code.Text()
	}
	return string(b.Code)
}

// ErrorAnswer is the JSON object of an error answer.
type ErrorAnswer struct {
	Error ErrorBody `json:"error"`
}

// APIVersion is the version of the API this package describes. The daemon sends it on every
// answer (APIVersionHeader) and in StatusBody; a client built for another version refuses
// the answer rather than misread it.
const APIVersion = 1

// Headers of the API.
const (
	// APIVersionHeader carries APIVersion, in decimal, on every answer of the daemon
	// (errors, 404s and 405s included).
	APIVersionHeader = "Zygo-Api-Version"
	// RequestIDHeader carries an invoke's request id on its answer: the id its log lines
	// carry (GET /v1/functions/{name}/logs?request=ID).
	RequestIDHeader = "X-Zygo-Request-Id"
	// CallerRequestIDHeader is the conventional header a proxy or caller sets; the daemon's
	// access log records it (or a traceparent's trace id) for calls that have no id of their
	// own.
	CallerRequestIDHeader = "X-Request-Id"
	VersionHeader         = "X-Zygo-Version"     // invoke: the function version that served it
	ChildHeader           = "X-Zygo-Child"       // invoke: preforked, forked, spawned or worker
	DurationHeader        = "X-Zygo-Duration-Ms" // invoke: the daemon's time, milliseconds
	// ServerTimingHeader (invoke) lists the daemon's timed steps of the request in
	// order, W3C Server Timing syntax: "dir;dur=0.041, fork+hello;dur=0.012, ..."
	// (milliseconds). FormatServerTiming and ParseServerTiming write and read it.
	ServerTimingHeader = "Server-Timing"
	// EntriesTotalHeader carries a file listing's total number of entries; the body holds
	// at most MaxListEntries of them.
	EntriesTotalHeader = "Zygo-Entries-Total"
)

// StatusBody is the answer of GET /v1/status.
type StatusBody struct {
	APIVersion int    `json:"api_version"` // APIVersion
	Version    string `json:"version"`
	UptimeMs   int64  `json:"uptime_ms"`
	Functions  int    `json:"functions"`
}

// Bounds of a page of a list (see Page).
const (
	DefaultPageLimit = 100  // the items of a page when ?limit= is not given
	MaxPageLimit     = 1000 // the largest ?limit=
)

// Page is one page of a list: the answer of GET of every list route (functions, sandboxes,
// checkpoints, secrets). The route takes ?limit=N (1..MaxPageLimit, default DefaultPageLimit)
// and ?cursor=C, C being a previous page's NextCursor, opaque; an out-of-range limit or a
// cursor the list did not give is a 400 naming the field. Pages follow the list's key order
// (each route says which), and a cursor is a position in that order, not an offset: an item
// added or removed while a client pages through neither repeats nor skips another.
type Page[T any] struct {
	Items []T `json:"items"`
	// NextCursor continues the list; empty (left out) on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}
