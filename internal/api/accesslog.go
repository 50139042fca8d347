package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// caller is who made a call: over TCP or the unix socket, and with which token. The first
// of accessLog and RequireTokens to see the call attaches it to the request's context
// (withCaller); both fill and read the same one.
type caller struct {
	tcp   bool   // the call came over the TCP listener
	token string // the name of its token; "" before authentication or on the unix socket
	// sandbox is the sandbox of the call's sandbox access token (access.go); "" for any other
	// call. Its token is then "sandbox/" and that id.
	sandbox string
}

type callerKey struct{}

// callerOf returns the caller of the call whose context is ctx: nil when none was attached.
func callerOf(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	return c
}

// withCaller returns r's caller, attaching a new one to (a copy of) r when it has none.
func withCaller(r *http.Request) (*caller, *http.Request) {
	if c := callerOf(r.Context()); c != nil {
		return c, r
	}
	c := &caller{}
	return c, r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
}

// accessLog returns h behind one log record per call: method, route pattern, status,
// duration, bytes written, request id, the caller's ids (read, checked and echoed as
// caller.go says: a bad X-Request-Id is answered 400 here), and for a call over TCP the
// listener and the name of its token (empty when it had none that the daemon knows). Calls on
// the unix socket that succeed (or that the caller got wrong: 4xx) are logged at debug level,
// 5xx at info; every call over TCP is logged at info level, an audit trail of remote use. The
// request id is the one the handler set (an invoke's X-Zygo-Request-Id, which its log lines
// carry), else the caller id; caller_id is the caller's X-Request-Id, else the trace id of
// its W3C traceparent, and traceparent the whole header (each only when valid: caller.go).
func (s *Server) accessLog(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		rec := &recorder{ResponseWriter: w}
		c, r := withCaller(r)
		callerID, tp, bad := callerIDs(r)
		defer func() {
			// A handler that aborts (http.ErrAbortHandler) is still logged, then re-panics.
			p := recover()
			status := rec.status
			if status == 0 {
				status = http.StatusOK
				if p != nil {
					status = http.StatusInternalServerError
				}
			}
			level := slog.LevelDebug
			if status >= 500 || p != nil || c.tcp {
				level = slog.LevelInfo
			}
			if s.log.Enabled(r.Context(), level) {
				s.logCall(r, rec, level, status, time.Since(t0), p != nil, c, callerID, tp)
			}
			if p != nil {
				panic(p)
			}
		}()
		if bad != "" {
			badRequest(rec, bad)
			return
		}
		r = withCallerIDs(rec, r, callerID, tp)
		h.ServeHTTP(rec, r)
	})
}

// route returns the pattern of the route that served r; a call refused before the mux (a
// 401) has none, and is logged by its path.
func route(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.Method + " " + r.URL.Path
}

// logCall writes the access record of one call.
func (s *Server) logCall(r *http.Request, rec *recorder, level slog.Level, status int, took time.Duration, aborted bool, c *caller, callerID, tp string) {
	id := rec.Header().Get(wire.RequestIDHeader)
	if id == "" {
		id = callerID
	}
	attrs := []slog.Attr{slog.String("method", r.Method), slog.String("route", route(r)),
		slog.Int("status", status), slog.Duration("duration", took),
		slog.Int64("bytes", rec.bytes), slog.String("request_id", id),
		slog.String("caller_id", callerID), slog.String("traceparent", tp),
		slog.Bool("aborted", aborted)}
	if c.tcp {
		attrs = append(attrs, slog.String("listener", "tcp"), slog.String("token", c.token),
			slog.String("remote", r.RemoteAddr))
	}
	s.log.LogAttrs(r.Context(), level, "api call", attrs...)
}

// recorder is a ResponseWriter that keeps the status and the bytes written. Unwrap lets
// http.ResponseController reach the connection's Flush, deadlines and full duplex.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// printable reports whether a caller's id is short and plain ASCII without spaces.
func printable(s string) bool {
	if len(s) > wire.MaxCallerIDBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
