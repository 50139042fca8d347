package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// accessRecords serves the request on a server whose sandbox routes fail with err (nil: 503
// unavailable) and returns the access-log records it wrote, decoded.
func accessRecords(t *testing.T, req *http.Request) []map[string]any {
	t.Helper()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := NewServer(nil, nil, nil, log, "test").WithSandboxes(nil, errors.New("no runsc here"))
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == "api call" {
			out = append(out, m)
		}
	}
	return out
}

// One record per call, with the route's pattern (not the path), the status, the bytes sent
// and the caller's request id; 4xx at debug level, 5xx at info.
func TestAccessLog(t *testing.T) {
	req := httptest.NewRequest("GET", "/v1/sandboxes/sb-123", nil)
	req.Header.Set("X-Request-Id", "caller-42")
	recs := accessRecords(t, req)
	if len(recs) != 1 {
		t.Fatalf("%d access records, want 1: %v", len(recs), recs)
	}
	r := recs[0]
	if r["method"] != "GET" || r["route"] != "GET /v1/sandboxes/{id}" || r["status"] != float64(503) ||
		r["request_id"] != "caller-42" || r["level"] != "INFO" || r["bytes"].(float64) <= 0 {
		t.Errorf("access record %v", r)
	}
	if _, ok := r["duration"]; !ok {
		t.Errorf("access record without a duration: %v", r)
	}

	// An unknown route: 404 at debug; the trace id of a traceparent is the request id.
	req = httptest.NewRequest("GET", "/v2/nothing", nil)
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	recs = accessRecords(t, req)
	if len(recs) != 1 || recs[0]["status"] != float64(404) || recs[0]["level"] != "DEBUG" ||
		recs[0]["request_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("access records of a 404: %v", recs)
	}

	// A caller's id with spaces or control characters is not logged.
	req = httptest.NewRequest("GET", "/v2/nothing", nil)
	req.Header.Set("X-Request-Id", "evil\x01 id")
	if recs = accessRecords(t, req); len(recs) != 1 || recs[0]["request_id"] != "" {
		t.Errorf("access record of a bad caller id: %v", recs)
	}
}

// The invoke route's own request id (X-Zygo-Request-Id, the one its log lines carry) wins
// over the caller's.
func TestAccessLogInvokeRequestID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := (&Server{log: log}).accessLog(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Zygo-Request-Id", "r-own")
		http.Error(w, errdefs.ErrUnavailable.Error(), http.StatusServiceUnavailable)
	}))
	req := httptest.NewRequest("POST", "/v1/functions/f/invoke", nil)
	req.Header.Set("X-Request-Id", "caller-1")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if !strings.Contains(buf.String(), `"request_id":"r-own"`) || !strings.Contains(buf.String(), `"status":503`) {
		t.Errorf("access log %s", buf.String())
	}
}
