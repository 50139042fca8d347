package daemon

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/internal/e2b"
)

// E2BKeyName is the file in the state dir holding the key the envd access tokens of the E2B
// API are derived from (e2b.AccessToken): 32 random bytes, hex, mode 0600, made on the first
// start with --e2b, so tokens handed out survive restarts.
const E2BKeyName = "e2b.key"

// tlsOrLoopback checks an address flag served as the API is: "" is fine; a loopback host
// (localhost meaning 127.0.0.1, never looked up) in plain HTTP; any other only with TLS.
func tlsOrLoopback(flag, addr string, withTLS bool) (string, error) {
	if addr == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		host = "127.0.0.1"
		addr = net.JoinHostPort(host, port)
	}
	if ip := net.ParseIP(host); !withTLS && (ip == nil || !ip.IsLoopback()) {
		return "", fmt.Errorf("%s %q: an address beyond loopback is served only with TLS: give --tls-cert and --tls-key "+
			"(or listen on 127.0.0.1:PORT, [::1]:PORT or localhost:PORT)", flag, addr)
	}
	return addr, nil
}

// e2bAPI returns the handler of the --e2b listener, or nil without --e2b. Without sandboxes
// every call on it answers 503 in E2B's shape.
func e2bAPI(cfg Config, sbx *sandboxes, tokens *api.Tokens) (http.Handler, error) {
	if cfg.E2B == "" {
		return nil, nil
	}
	if sbx.mgr == nil {
		msg := "sandboxes are unavailable on this daemon"
		if sbx.err != nil {
			msg = sbx.err.Error()
		}
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "{\"code\":503,\"message\":%q}\n", msg)
		}), nil
	}
	keyHex, err := api.LoadToken(filepath.Join(cfg.StateDir, E2BKeyName))
	if err != nil {
		return nil, fmt.Errorf("--e2b: %w", err)
	}
	key, err := hex.DecodeString(keyHex)
	if err != nil {
		return nil, fmt.Errorf("--e2b: %s: %w", E2BKeyName, err)
	}
	return e2b.Handler(e2b.Config{Sandboxes: sbx.mgr, Auth: tokens, AccessKey: key, Envd: newEnvd(sbx),
		Log: cfg.Log.With("component", "e2b")}), nil
}

// newEnvd returns the envd API over the daemon's sandboxes (internal/e2b/envd, through the
// adapter internal/e2b.EnvdSandboxes); nil until that package is wired.
func newEnvd(*sandboxes) http.Handler { return nil }
