package api_test

import (
	"context"
	"encoding/hex"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

const testToken = "3f1c0d2e4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"

// TestRequireToken drives the real API handler behind the middleware: only
// a request with the right bearer token gets through.
func TestRequireToken(t *testing.T) {
	for _, c := range []struct {
		name, header string
		want         int
	}{
		{"no header", "", http.StatusUnauthorized},
		{"basic scheme", "Basic " + testToken, http.StatusUnauthorized},
		{"no scheme", testToken, http.StatusUnauthorized},
		{"empty bearer", "Bearer ", http.StatusUnauthorized},
		{"wrong token", "Bearer " + strings.Repeat("0", len(testToken)), http.StatusUnauthorized},
		{"prefix of the token", "Bearer " + testToken[:len(testToken)-1], http.StatusUnauthorized},
		{"token and more", "Bearer " + testToken + "0", http.StatusUnauthorized},
		{"token in upper case", "Bearer " + strings.ToUpper(testToken), http.StatusUnauthorized},
		{"right token", "Bearer " + testToken, http.StatusNoContent},
		{"right token, scheme in lower case", "bearer " + testToken, http.StatusNoContent},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture()
			req := httptest.NewRequest("DELETE", "/v1/functions/hello", nil)
			if c.header != "" {
				req.Header.Set("Authorization", c.header)
			}
			rec := httptest.NewRecorder()
			api.RequireToken(testToken, slog.New(slog.DiscardHandler), f.h).ServeHTTP(rec, req)
			if rec.Code != c.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.want, rec.Body)
			}
			if c.want == http.StatusNoContent {
				if len(f.fns.removed) != 1 {
					t.Errorf("the authorised call did not reach the server: removed %q", f.fns.removed)
				}
				return
			}
			if len(f.fns.removed) != 0 {
				t.Errorf("an unauthenticated call reached the server: removed %q", f.fns.removed)
			}
			if eb := errorOf(t, rec); eb.Code != "unauthenticated" || !strings.Contains(eb.Message, "api.token") {
				t.Errorf("error body %+v, want code unauthenticated and a message naming api.token", eb)
			}
			if got := rec.Header().Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Errorf("WWW-Authenticate %q, want a Bearer challenge", got)
			}
		})
	}
}

// TestTCPClientToken checks that NewTCPClient sends its token on every
// request, including Fork's (which bypasses the common request path), and
// that a client without one gets an *Error that IsUnauthenticated.
func TestTCPClientToken(t *testing.T) {
	ctx := context.Background()
	f := newFixture()
	ts := httptest.NewServer(api.RequireToken(testToken, slog.New(slog.DiscardHandler), f.h))
	t.Cleanup(ts.Close)
	addr := strings.TrimPrefix(ts.URL, "http://")

	if _, err := zygo.NewTCPClient(addr, "").Status(ctx); !zygo.IsUnauthenticated(err) {
		t.Errorf("Status without a token = %v, want a 401", err)
	}
	if _, err := zygo.NewTCPClient(addr, "wrong").Status(ctx); !zygo.IsUnauthenticated(err) {
		t.Errorf("Status with a wrong token = %v, want a 401", err)
	}
	c := zygo.NewTCPClient(addr, testToken)
	if st, err := c.Status(ctx); err != nil || st.Version != "test-version" {
		t.Errorf("Status with the token = %+v, %v", st, err)
	}
	if err := c.RemoveFunction(ctx, "hello"); err != nil || len(f.fns.removed) != 1 {
		t.Errorf("Remove with the token = %v (removed %q)", err, f.fns.removed)
	}
	// No sandbox API is wired: past the token check, Fork gets a 503.
	if _, err := zygo.NewTCPClient(addr, "").Fork(ctx, "sb", 2, "", nil); !zygo.IsUnauthenticated(err) {
		t.Errorf("Fork without a token = %v, want a 401", err)
	}
	var ae *zygo.Error
	if _, err := c.Fork(ctx, "sb", 2, "", nil); !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Errorf("Fork with the token = %v, want a 503 from past the token check", err)
	}
}

// TestRequireTokenComparesInConstantTime reads auth.go and checks that the
// token is compared with crypto/subtle and by nothing that returns early:
// every ==, != and equality helper in the file has a literal, nil or a
// constant of the file on one side, so none can compare the presented token with the real one. A timing
// measurement would be flaky; this is the property that matters.
func TestRequireTokenComparesInConstantTime(t *testing.T) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "auth.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]bool{"nil": true, "true": true, "false": true}
	for _, d := range file.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, spec := range g.Specs {
				for _, name := range spec.(*ast.ValueSpec).Names {
					consts[name.Name] = true
				}
			}
		}
	}
	literal := func(e ast.Expr) bool {
		switch e := ast.Unparen(e).(type) {
		case *ast.BasicLit:
			return true
		case *ast.Ident:
			return consts[e.Name]
		}
		return false
	}
	equalityHelpers := map[string]bool{"strings.EqualFold": true, "strings.Compare": true,
		"bytes.Equal": true, "bytes.Compare": true, "bytes.EqualFold": true, "reflect.DeepEqual": true, "slices.Equal": true}
	constantTime := false
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && !literal(n.X) && !literal(n.Y) {
				t.Errorf("%s: %s compares two computed values", fset.Position(n.Pos()), n.Op)
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			name := pkg.Name + "." + sel.Sel.Name
			if name == "subtle.ConstantTimeCompare" {
				constantTime = true
			}
			if equalityHelpers[name] && len(n.Args) == 2 && !literal(n.Args[0]) && !literal(n.Args[1]) {
				t.Errorf("%s: %s compares two computed values", fset.Position(n.Pos()), name)
			}
		}
		return true
	})
	if !constantTime {
		t.Error("auth.go does not call subtle.ConstantTimeCompare")
	}
}

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "api.token")

	tok, err := api.LoadToken(path)
	if err != nil {
		t.Fatalf("creating: %v", err)
	}
	if raw, err := hex.DecodeString(tok); err != nil || len(raw) != 32 {
		t.Errorf("new token %q is not 32 bytes in hex", tok)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v (%v), want 0600", fi.Mode(), err)
	}
	if again, err := api.LoadToken(path); err != nil || again != tok {
		t.Errorf("loading again = %q, %v; want the same token", again, err)
	}
	other, err := api.LoadToken(filepath.Join(dir, "other.token"))
	if err != nil || other == tok {
		t.Errorf("a second file got token %q (%v), want a fresh one", other, err)
	}

	// Written by hand with a trailing newline: accepted.
	if err := os.WriteFile(path, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := api.LoadToken(path); err != nil || got != testToken {
		t.Errorf("token with a newline = %q, %v", got, err)
	}

	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := api.LoadToken(path)
		if err == nil || !strings.Contains(err.Error(), "0600") || !strings.Contains(err.Error(), path) {
			t.Errorf("mode %o: LoadToken = %v, want a refusal naming the file and 0600", mode, err)
		}
	}

	for _, bad := range []string{"", "\n", "short", strings.Repeat("z", 64), testToken + "00"} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := api.LoadToken(path); err == nil || !strings.Contains(err.Error(), "64 hex digits") {
			t.Errorf("content %q: LoadToken = %q, %v; want a refusal", bad, got, err)
		}
	}
}
