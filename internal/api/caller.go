package api

import (
	"net/http"

	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// callerIDs reads the caller's ids of r. An X-Request-Id must be at most
// wire.MaxCallerIDBytes printable ASCII characters without spaces: another makes bad a
// message naming the header, for a 400 (a caller that sets one wants to find its call by it,
// and a value we would not log is a bug to report, not to hide). A valid W3C traceparent is
// kept; a malformed one is ignored (""), as the W3C recommendation says of a header a
// participant cannot parse. caller is the X-Request-Id, else the traceparent's trace id.
func callerIDs(r *http.Request) (caller, traceparent, bad string) {
	id := r.Header.Get(wire.CallerRequestIDHeader)
	if id != "" && !printable(id) {
		return "", "", wire.CallerRequestIDHeader + ": must be 1 to 200 printable ASCII characters without spaces"
	}
	tp := r.Header.Get(wire.TraceparentHeader)
	traceID, ok := parseTraceparent(tp)
	if !ok {
		tp = ""
	}
	if id == "" {
		id = traceID
	}
	return id, tp, ""
}

// withCallerIDs echoes the caller's ids on the answer (X-Request-Id as given, traceparent when
// valid) and returns r with the caller id in its context for the function manager
// (function.WithCallerID: an invoke's log lines carry it).
func withCallerIDs(w http.ResponseWriter, r *http.Request, caller, traceparent string) *http.Request {
	if id := r.Header.Get(wire.CallerRequestIDHeader); id != "" {
		w.Header().Set(wire.CallerRequestIDHeader, id)
	}
	if traceparent != "" {
		w.Header().Set(wire.TraceparentHeader, traceparent)
	}
	if caller == "" {
		return r
	}
	return r.WithContext(function.WithCallerID(r.Context(), caller))
}

// parseTraceparent returns the trace id of a W3C traceparent
// (version "-" trace-id "-" parent-id "-" flags, lowercase hex of 2, 32, 16 and 2 digits);
// false when tp is not one: version ff, an all-zero trace or parent id, or uppercase hex are
// invalid. A version above 00 may carry more fields after the flags ("-..."), which are
// ignored; version 00 may not.
func parseTraceparent(tp string) (string, bool) {
	const n = 55 // 2+1+32+1+16+1+2
	if len(tp) < n || (len(tp) > n && (tp[:2] == "00" || tp[n] != '-')) {
		return "", false
	}
	if tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return "", false
	}
	version, traceID, parentID, flags := tp[:2], tp[3:35], tp[36:52], tp[53:55]
	for _, f := range []string{version, traceID, parentID, flags} {
		if !lowerHex(f) {
			return "", false
		}
	}
	if version == "ff" || allZero(traceID) || allZero(parentID) {
		return "", false
	}
	return traceID, true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}
