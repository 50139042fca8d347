package api_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

const validTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// A caller's X-Request-Id and valid traceparent are echoed and reach the invoke's context
// (the X-Request-Id first, else the trace id); a malformed traceparent is ignored; a
// malformed X-Request-Id is a 400 naming the header that runs nothing.
func TestCallerIDs(t *testing.T) {
	cases := []struct {
		name, xrid, tp       string
		status               int
		wantCaller, wantEcho string // the caller id Invoke sees; the traceparent echoed
	}{
		{"x-request-id", "caller-42", "", 200, "caller-42", ""},
		{"both", "caller-42", validTP, 200, "caller-42", validTP},
		{"traceparent only", "", validTP, 200, "4bf92f3577b34da6a3ce929d0e0e4736", validTP},
		{"future version with more fields", "", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", 200, "4bf92f3577b34da6a3ce929d0e0e4736", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"},
		{"uppercase hex", "", strings.ToUpper(validTP), 200, "", ""},
		{"version ff", "", "ff" + validTP[2:], 200, "", ""},
		{"zero trace id", "", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", 200, "", ""},
		{"zero parent id", "", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", 200, "", ""},
		{"version 00 with more", "", validTP + "-x", 200, "", ""},
		{"short", "", validTP[:54], 200, "", ""},
		{"garbage", "", "hello", 200, "", ""},
		{"space in id", "a b", "", 400, "", ""},
		{"control char", "a\x01", "", 400, "", ""},
		{"too long", strings.Repeat("x", wire.MaxCallerIDBytes+1), "", 400, "", ""},
		{"longest", strings.Repeat("x", wire.MaxCallerIDBytes), "", 200, strings.Repeat("x", wire.MaxCallerIDBytes), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture()
			f.fns.inv = &function.Invocation{RequestID: "r-1", Value: []byte(`1`)}
			req := httptest.NewRequest("POST", "/v1/functions/hello/invoke", strings.NewReader(`{}`))
			if c.xrid != "" {
				req.Header.Set("X-Request-Id", c.xrid)
			}
			if c.tp != "" {
				req.Header.Set("traceparent", c.tp)
			}
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, req)
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
			}
			if c.status == 400 {
				if e := errorOf(t, rec); e.Code != wire.CodeBadRequest || !strings.HasPrefix(e.Message, "X-Request-Id: ") {
					t.Errorf("error %+v, want bad_request naming X-Request-Id", e)
				}
				if f.fns.invoked != nil {
					t.Errorf("a refused call ran the function")
				}
				return
			}
			if f.fns.caller != c.wantCaller {
				t.Errorf("caller id in the context %q, want %q", f.fns.caller, c.wantCaller)
			}
			if got := rec.Header().Get("X-Request-Id"); got != c.xrid {
				t.Errorf("X-Request-Id echoed %q, want %q", got, c.xrid)
			}
			if got := rec.Header().Get("Traceparent"); got != c.wantEcho {
				t.Errorf("traceparent echoed %q, want %q", got, c.wantEcho)
			}
		})
	}
}

// The logs route reads since (an RFC 3339 time or a duration) and tail, and names the
// parameter of a bad value.
func TestLogsSinceAndTail(t *testing.T) {
	f := newFixture()
	rec := f.do("GET", "/v1/functions/hello/logs?since=2026-01-02T15:04:05Z", nil)
	if rec.Code != 200 || f.logs.q.Since.Format("2006-01-02T15:04:05Z07:00") != "2026-01-02T15:04:05Z" || f.logs.tail != -1 {
		t.Errorf("since as a time: %d, query %+v, tail %d", rec.Code, f.logs.q, f.logs.tail)
	}
	rec = f.do("GET", "/v1/functions/hello/logs?since=10m", nil)
	if rec.Code != 200 || f.logs.q.Since.IsZero() {
		t.Errorf("since as a duration: %d, query %+v", rec.Code, f.logs.q)
	}
	f.logs.end = 77
	rec = f.do("GET", "/v1/functions/hello/logs?tail=5&request=r-1", nil)
	if rec.Code != 200 || f.logs.tail != 5 || f.logs.q.RequestID != "r-1" || !strings.Contains(rec.Body.String(), `"next": 77`) {
		t.Errorf("tail: %d, tail %d, query %+v, body %s", rec.Code, f.logs.tail, f.logs.q, rec.Body)
	}
	for q, field := range map[string]string{
		"since=yesterday": "since: ", "since=-5m": "since: ", "since=2026-13-01T00:00:00Z": "since: ",
		"tail=-1": "tail: ", "tail=10001": "tail: ", "tail=x": "tail: ", "tail=3&after=9": "tail: ",
	} {
		rec := f.do("GET", "/v1/functions/hello/logs?"+q, nil)
		if e := errorOf(t, rec); rec.Code != 400 || !strings.HasPrefix(e.Message, field) {
			t.Errorf("?%s: %d %+v, want 400 naming %s", q, rec.Code, e, field)
		}
	}
}

// GET /metrics is served (on the unix socket's handler, and behind the token on TCP); the
// deploy, rm and secret changes are logged, a secret by name only; an auth failure is logged
// with the remote address.
func TestMetricsRouteAndAuditLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	f := newFixture()
	h := api.NewServer(f.fns, f.logs, f.secrets, log, "v").WithMetrics(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("zygo_up 1\n"))
	})).Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 || rec.Body.String() != "zygo_up 1\n" {
		t.Errorf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	tcp := api.RequireToken(strings.Repeat("ab", 32), log, h)
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.RemoteAddr = "127.0.0.1:40000"
	rec = httptest.NewRecorder()
	tcp.ServeHTTP(rec, req)
	if rec.Code != 401 || !strings.Contains(buf.String(), "authentication failed") || !strings.Contains(buf.String(), "remote_addr=127.0.0.1:40000") {
		t.Errorf("GET /metrics without a token: %d; log %s", rec.Code, buf.String())
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("PUT", "/v1/secrets/API_KEY", strings.NewReader("hunter2-value")))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("DELETE", "/v1/functions/hello", nil))
	out := buf.String()
	if !strings.Contains(out, `msg="secret set" secret=API_KEY`) || strings.Contains(out, "hunter2") {
		t.Errorf("secret change log: %s", out)
	}
	if !strings.Contains(out, `msg="function removed" function=hello`) {
		t.Errorf("rm log: %s", out)
	}
}
