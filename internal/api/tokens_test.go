package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// tokenServer returns a server with tokens kept in a real store (with testToken as the
// default one, kept in a file), its unix-socket and TCP handlers, and the log they write.
func tokenServer(t *testing.T) (unix, tcp http.Handler, defaultFile string, logs *bytes.Buffer) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "zygo.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	defaultFile = filepath.Join(dir, "api.token")
	if err := os.WriteFile(defaultFile, []byte(testToken), 0o600); err != nil {
		t.Fatal(err)
	}
	logs = &bytes.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	toks, err := api.NewTokens(ctx, st, defaultFile, testToken, log)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture()
	srv := api.NewServer(f.fns, f.logs, f.secrets, log, "test").WithTokens(toks)
	return srv.Handler(), srv.TCPHandler(), defaultFile, logs
}

// serve sends one request to h (with the bearer token tok unless "") and returns the answer.
func serve(h http.Handler, method, target, body, tok string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// Tokens: created on the unix socket, accepted over TCP by name (logged), listed in pages
// without secrets, refused (401) once revoked; creating and revoking over TCP is 403; bad
// names, limits and cursors are 400s naming the field.
func TestTokens(t *testing.T) {
	unix, tcp, defaultFile, logs := tokenServer(t)
	rec := serve(unix, "POST", "/v1/tokens", `{"name": "ci"}`, "")
	var ci wire.TokenCreated
	if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &ci) != nil || ci.Name != "ci" || len(ci.Secret) != 69 {
		t.Fatalf("create ci: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(tcp, "GET", "/v1/status", "", ci.Secret); rec.Code != http.StatusOK {
		t.Errorf("status with ci's secret over TCP: %d %s", rec.Code, rec.Body)
	}
	if !strings.Contains(logs.String(), `"token":"ci"`) || !strings.Contains(logs.String(), `"listener":"tcp"`) {
		t.Errorf("the access log does not name the token:\n%s", logs)
	}
	if rec := serve(tcp, "GET", "/v1/status", "", testToken); rec.Code != http.StatusOK {
		t.Errorf("status with the default token: %d", rec.Code)
	}
	for _, c := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"taken", `{"name": "ci"}`, http.StatusConflict, `"message": "token \"ci\" already exists"`},
		{"the daemon's own", `{"name": "default"}`, http.StatusBadRequest, "api.token"},
		{"upper case", `{"name": "CI"}`, http.StatusBadRequest, "name"},
		{"empty", `{"name": ""}`, http.StatusBadRequest, "name"},
		{"unknown field", `{"name": "x", "admin": true}`, http.StatusBadRequest, "admin"},
	} {
		if rec := serve(unix, "POST", "/v1/tokens", c.body, ""); rec.Code != c.code || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("create %s: %d %s; want %d naming %s", c.name, rec.Code, rec.Body, c.code, c.want)
		}
	}
	if rec := serve(tcp, "POST", "/v1/tokens", `{"name": "evil"}`, ci.Secret); rec.Code != http.StatusForbidden {
		t.Errorf("create over TCP: %d %s, want 403", rec.Code, rec.Body)
	}
	if rec := serve(tcp, "DELETE", "/v1/tokens/default", "", ci.Secret); rec.Code != http.StatusForbidden {
		t.Errorf("revoke over TCP: %d %s, want 403", rec.Code, rec.Body)
	}
	for _, n := range []string{"a", "b", "c"} {
		serve(unix, "POST", "/v1/tokens", `{"name": "`+n+`"}`, "")
	}
	// Pages of two, over TCP: a, b | c, ci | default.
	var names []string
	cursor := ""
	for pages := 0; ; pages++ {
		rec := serve(tcp, "GET", "/v1/tokens?limit=2&cursor="+cursor, "", ci.Secret)
		var page wire.TokensPage
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &page) != nil || pages > 5 {
			t.Fatalf("list page %d: %d %s", pages, rec.Code, rec.Body)
		}
		if strings.Contains(rec.Body.String(), "zygo_") || strings.Contains(rec.Body.String(), "secret") {
			t.Errorf("a listing shows a secret: %s", rec.Body)
		}
		for _, tk := range page.Items {
			names = append(names, tk.Name)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if got := strings.Join(names, " "); got != "a b c ci default" {
		t.Errorf("paged names %q", got)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=%21%21"} {
		want := strings.Split(q, "=")[0]
		if rec := serve(unix, "GET", "/v1/tokens?"+q, "", ""); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("list ?%s: %d %s; want 400 naming %s", q, rec.Code, rec.Body, want)
		}
	}
	// Revoked: 401 from then on; revoking default removes its file.
	if rec := serve(unix, "DELETE", "/v1/tokens/ci", "", ""); rec.Code != http.StatusNoContent {
		t.Fatalf("revoke ci: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(tcp, "GET", "/v1/status", "", ci.Secret); rec.Code != http.StatusUnauthorized {
		t.Errorf("status with a revoked token: %d, want 401", rec.Code)
	}
	if rec := serve(unix, "DELETE", "/v1/tokens/ci", "", ""); rec.Code != http.StatusNotFound {
		t.Errorf("revoke ci twice: %d, want 404", rec.Code)
	}
	if rec := serve(unix, "DELETE", "/v1/tokens/default", "", ""); rec.Code != http.StatusNoContent {
		t.Fatalf("revoke default: %d %s", rec.Code, rec.Body)
	}
	if _, err := os.Stat(defaultFile); !os.IsNotExist(err) {
		t.Errorf("api.token after revoking default: %v", err)
	}
	if rec := serve(tcp, "GET", "/v1/status", "", testToken); rec.Code != http.StatusUnauthorized {
		t.Errorf("status with the revoked default token: %d, want 401", rec.Code)
	}
	if !strings.Contains(logs.String(), `"status":401`) {
		t.Errorf("refused calls are not in the access log:\n%s", logs)
	}
}
