package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// zygo sandbox restore --name sends the new sandbox's name in the restore body, and the
// daemon's 400 about it names the flag.
func TestSandboxRestoreName(t *testing.T) {
	var got wire.RestoreBody
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(wire.APIVersionHeader, "1")
		w.Header().Set("Content-Type", "application/json")
		if r.Method != http.MethodPost || r.URL.Path != "/v1/checkpoints/cp-1/restore" {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(wire.ErrorAnswer{Error: wire.ErrorBody{Code: wire.CodeNotFound, Message: r.Method + " " + r.URL.Path}})
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Errorf("restore body: %v", err)
		}
		if got.Name == "Bad Name" {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(wire.ErrorAnswer{Error: wire.ErrorBody{Code: wire.CodeBadRequest, Message: `name "Bad Name": must be lower case`}})
			return
		}
		json.NewEncoder(w).Encode(wire.Sandbox{ID: "sb-new", Name: got.Name})
	}))
	defer ts.Close()
	t.Setenv("ZYGO_TOKEN", "t")
	addr := strings.TrimPrefix(ts.URL, "http://")

	code, stdout, stderr := runCLI(t, "--addr", addr, "sandbox", "restore", "cp-1", "--name", "moved2")
	if code != 0 || strings.TrimSpace(stdout) != "sb-new" || got.Name != "moved2" {
		t.Errorf("restore --name moved2: exit %d, stdout %q, stderr %q, body %+v; want sb-new made with name moved2", code, stdout, stderr, got)
	}
	code, _, stderr = runCLI(t, "--addr", addr, "sandbox", "restore", "cp-1", "--name", "Bad Name")
	if code == 0 || !strings.Contains(stderr, `--name "Bad Name"`) {
		t.Errorf("restore --name 'Bad Name': exit %d, stderr %q; want a refusal naming --name", code, stderr)
	}
}
