package daemon_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/daemon"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// call sends one raw HTTP request, as curl would, with token as a bearer
// token unless it is "", and returns the status and the error code of the
// body ("" for a success).
func call(t *testing.T, hc *http.Client, method, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var eb struct {
		Error struct{ Code string } `json:"error"`
	}
	if resp.StatusCode >= 300 {
		if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
			t.Errorf("%s %s: %d with a body that is not a JSON error: %v", method, url, resp.StatusCode, err)
		}
	}
	return resp.StatusCode, eb.Error.Code
}

// The --listen TCP address is open to every local user, so it demands the
// token the daemon keeps in STATE/api.token; the unix socket (mode 0600)
// does not.
func TestListenRequiresToken(t *testing.T) {
	requireBwrap(t)
	ctx := context.Background()
	leaks := checkGoroutines(t)
	dir := stateDir(t)
	cfg, logs := configWithLog(t, dir)
	cfg.Listen = "localhost:0" // 127.0.0.1, a port picked by the kernel and logged
	d := start(t, cfg)

	m := regexp.MustCompile(`listen=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		d.stop(t)
		t.Fatalf("the daemon did not log its listen address:\n%s", logs)
	}
	addr := m[1]
	if host, port, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" || port == "0" {
		t.Errorf("logged listen address %q: want 127.0.0.1 and the real port", addr)
	}

	path := daemon.TokenPath(dir)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file: mode %v (%v), want 0600", fi.Mode(), err)
	}
	b, _ := os.ReadFile(path)
	tok := string(b)
	if raw, err := hex.DecodeString(tok); err != nil || len(raw) != 32 {
		t.Errorf("token file holds %q, want 32 bytes in hex", tok)
	}

	tcp := &http.Client{Timeout: 10 * time.Second}
	defer tcp.CloseIdleConnections()
	base := "http://" + addr
	for _, c := range []struct {
		method, path, token string
		status              int
		code                string
	}{
		{"GET", "/v1/status", "", 401, "unauthenticated"},
		{"DELETE", "/v1/functions/ex", "", 401, "unauthenticated"}, // the call the tester made as nobody
		{"PUT", "/v1/secrets/KEY", "", 401, "unauthenticated"},
		{"GET", "/v1/status", strings.Repeat("0", len(tok)), 401, "unauthenticated"},
		{"GET", "/v1/status", tok, 200, ""},
		{"DELETE", "/v1/functions/ex", tok, 404, "not_found"}, // past the token: no such function
	} {
		status, code := call(t, tcp, c.method, base+c.path, c.token)
		if status != c.status || code != c.code {
			t.Errorf("TCP %s %s (token %t): %d %q, want %d %q", c.method, c.path, c.token != "", status, code, c.status, c.code)
		}
	}

	// The unix socket takes no token.
	unix := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", daemon.SocketPath(dir))
		}}}
	defer unix.CloseIdleConnections()
	if status, code := call(t, unix, "GET", "http://zygo/v1/status", ""); status != 200 {
		t.Errorf("unix socket without a token: %d %q, want 200", status, code)
	}

	// The Go client: with the token, and without.
	if _, err := zygo.NewTCPClient(addr, tok).Status(ctx); err != nil {
		t.Errorf("client with the token: %v", err)
	}
	if _, err := zygo.NewTCPClient(addr, "").Status(ctx); !zygo.IsUnauthenticated(err) {
		t.Errorf("client without a token: %v, want a 401", err)
	}
	if err := d.stop(t); err != nil {
		t.Errorf("Run after cancel = %v", err)
	}

	// A restart keeps the token.
	cfg.Listen = freeLoopbackAddr(t)
	d = start(t, cfg)
	if b, _ := os.ReadFile(path); string(b) != tok {
		t.Errorf("the token changed across a restart: %q, was %q", b, tok)
	}
	if status, _ := call(t, tcp, "GET", "http://"+cfg.Listen+"/v1/status", tok); status != 200 {
		t.Errorf("after a restart, the token got %d", status)
	}
	if err := d.stop(t); err != nil {
		t.Errorf("Run after cancel = %v", err)
	}
	tcp.CloseIdleConnections()
	unix.CloseIdleConnections()
	leaks()
}

// A token file others can read is refused, and the daemon does not start.
func TestListenRefusesAnOpenTokenFile(t *testing.T) {
	requireBwrap(t)
	dir := stateDir(t)
	path := daemon.TokenPath(dir)
	if err := os.WriteFile(path, []byte(strings.Repeat("ab", 32)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	cfg := config(t, dir)
	cfg.Listen = freeLoopbackAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := daemon.Run(ctx, cfg, func() { t.Error("the daemon started") })
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "0600") {
		t.Errorf("Run with a 0644 token file = %v, want a refusal naming the file and 0600", err)
	}
	if _, err := os.Stat(daemon.SocketPath(dir)); err == nil {
		t.Error("the refused daemon left its socket behind")
	}
	if c, err := net.Dial("tcp", cfg.Listen); err == nil {
		c.Close()
		t.Errorf("something listens on %s after the refusal", cfg.Listen)
	}

	// Without --listen the token file is not read: the socket alone serves.
	d := start(t, config(t, dir))
	if err := d.stop(t); err != nil {
		t.Errorf("Run without --listen = %v", err)
	}
}
