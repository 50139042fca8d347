package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// A refused sandbox access token gets a hint about sandbox tokens (not zygo token ls): a
// malformed one is called malformed, a well-formed one's sandbox is gone.
func TestSandboxTokenHints(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(wire.APIVersionHeader, "1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(wire.ErrorAnswer{Error: wire.ErrorBody{Code: wire.CodeUnauthenticated, Message: "refused"}})
	}))
	defer ts.Close()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("ZYGO_ADDR", "")
	addr := strings.TrimPrefix(ts.URL, "http://")
	for _, c := range []struct {
		token, want string
	}{
		{"zygo_sbx_garbage", "the sandbox access token in $ZYGO_TOKEN is malformed"},
		{"zygo_sbx_sb-00000000000000aa_" + strings.Repeat("0", 64), "its sandbox is gone (removed)"},
	} {
		t.Setenv("ZYGO_TOKEN", c.token)
		code, _, stderr := runCLI(t, "--addr", addr, "sandbox", "get", "sb-00000000000000aa")
		if code == 0 || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "zygo sandbox token ID") || strings.Contains(stderr, "zygo token ls") {
			t.Errorf("token %.20q: exit %d, stderr %q; want %q and a pointer to zygo sandbox token, not zygo token ls", c.token, code, stderr, c.want)
		}
	}
}

// $ZYGO_TOKEN without an address is not sent (the unix socket needs none and has full
// rights): zygo says so on stderr rather than ignoring it silently.
func TestTokenUnusedOverTheSocketWarns(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("ZYGO_ADDR", "")
	t.Setenv("ZYGO_TOKEN", "zygo_sbx_sb-00000000000000aa_"+strings.Repeat("0", 64))
	_, _, stderr := runCLI(t, "--state-dir", t.TempDir(), "sandbox", "ls")
	if !strings.Contains(stderr, "warning: $ZYGO_TOKEN is not used over the local socket") {
		t.Errorf("stderr %q, want the warning that $ZYGO_TOKEN is not used", stderr)
	}
	t.Setenv("ZYGO_TOKEN", "")
	if _, _, stderr := runCLI(t, "--state-dir", t.TempDir(), "sandbox", "ls"); strings.Contains(stderr, "ZYGO_TOKEN") {
		t.Errorf("without ZYGO_TOKEN: stderr %q warns about it", stderr)
	}
}
