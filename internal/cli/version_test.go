package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// A daemon of another API version is refused by every command, saying both versions.
func TestAPIVersionMismatch(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(wire.APIVersionHeader, "2")
		w.Write([]byte(`{"items": []}`))
	}))
	defer ts.Close()
	t.Setenv("ZYGO_TOKEN", "t")
	for _, args := range [][]string{{"status"}, {"ls"}, {"sandbox", "ls"}} {
		code, _, stderr := runCLI(t, append([]string{"--addr", strings.TrimPrefix(ts.URL, "http://")}, args...)...)
		if code == 0 || !strings.Contains(stderr, "the daemon speaks API version 2; this client speaks 1") {
			t.Errorf("zygo %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
		}
	}
}
