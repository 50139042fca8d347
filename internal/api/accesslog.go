package api

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// accessLog returns h behind one log record per call: method, route pattern, status,
// duration, bytes written, request id and the caller's ids (read, checked and echoed as
// caller.go says: a bad X-Request-Id is answered 400 here). Calls that succeed (or that the
// caller got wrong: 4xx) are logged at debug level, 5xx at info. The request id is the one
// the handler set (an invoke's X-Zygo-Request-Id, which its log lines carry), else the
// caller id; caller_id is the caller's X-Request-Id, else the trace id of its W3C
// traceparent, and traceparent the whole header (each only when valid: caller.go).
func (s *Server) accessLog(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		rec := &recorder{ResponseWriter: w}
		caller, tp, bad := callerIDs(r)
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
			if status >= 500 || p != nil {
				level = slog.LevelInfo
			}
			if s.log.Enabled(r.Context(), level) {
				s.logCall(r, rec, level, status, time.Since(t0), p != nil, caller, tp)
			}
			if p != nil {
				panic(p)
			}
		}()
		if bad != "" {
			badRequest(rec, bad)
			return
		}
		r = withCaller(rec, r, caller, tp)
		h.ServeHTTP(rec, r)
	})
}

// logCall writes the access record of one call.
func (s *Server) logCall(r *http.Request, rec *recorder, level slog.Level, status int, took time.Duration, aborted bool, caller, tp string) {
	id := rec.Header().Get(wire.RequestIDHeader)
	if id == "" {
		id = caller
	}
	s.log.LogAttrs(r.Context(), level, "api call",
		slog.String("method", r.Method), slog.String("route", r.Pattern),
		slog.Int("status", status), slog.Duration("duration", took),
		slog.Int64("bytes", rec.bytes), slog.String("request_id", id),
		slog.String("caller_id", caller), slog.String("traceparent", tp),
		slog.Bool("aborted", aborted))
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
