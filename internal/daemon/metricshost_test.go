package daemon

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The metrics listener answers only a request whose Host is loopback: a DNS name rebound to
// 127.0.0.1 (a web page the local user visits) gets 421, not the metrics.
func TestMetricsListenerOnlyLoopbackHost(t *testing.T) {
	h := onlyLoopbackHost(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	for host, want := range map[string]int{
		"127.0.0.1:9100": http.StatusOK, "localhost:9100": http.StatusOK, "[::1]:9100": http.StatusOK, "127.0.0.1": http.StatusOK,
		"evil.example:9100": http.StatusMisdirectedRequest, "10.0.0.1:9100": http.StatusMisdirectedRequest,
		"localhost.evil.example": http.StatusMisdirectedRequest, "": http.StatusMisdirectedRequest,
	} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %q: %d, want %d", host, rec.Code, want)
		}
	}
}
