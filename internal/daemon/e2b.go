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
	"github.com/zygo-run/zygo/internal/e2b/envd"
)

// AccessKeyName is the file in the state dir holding the key the sandboxes' access tokens are
// derived from (sandbox.AccessMAC): the API's sandbox access tokens and the E2B API's envd
// access tokens. 32 random bytes, hex, mode 0600, made on the first start with sandboxes, so
// tokens handed out survive restarts; replacing it (daemon stopped) revokes every one.
const AccessKeyName = "sandbox-access.key"

// loadAccessKey returns the key of AccessKeyName, made on first use; nil without sandboxes.
func loadAccessKey(cfg Config, sbx *sandboxes) ([]byte, error) {
	if sbx.mgr == nil {
		return nil, nil
	}
	keyHex, err := api.LoadToken(filepath.Join(cfg.StateDir, AccessKeyName))
	if err != nil {
		return nil, fmt.Errorf("the sandbox access key: %w", err)
	}
	key, err := hex.DecodeString(keyHex)
	if err != nil {
		return nil, fmt.Errorf("the sandbox access key %s: %w", AccessKeyName, err)
	}
	return key, nil
}

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

// e2bAPI returns the handler of the --e2b listener and what stops it (the envd API's watchers),
// or nil and a no-op without --e2b. key is loadAccessKey's. Without sandboxes every call on it answers 503 in E2B's
// shape.
func e2bAPI(cfg Config, sbx *sandboxes, tokens *api.Tokens, key []byte) (http.Handler, func(), error) {
	if cfg.E2B == "" {
		return nil, func() {}, nil
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
		}), func() {}, nil
	}
	// The envd API over the Manager, through the adapter that also gives it each sandbox's
	// access token (so it checks X-Access-Token on every call on a sandbox).
	ev := envd.New(e2b.EnvdSandboxes{M: sbx.mgr, Key: key}, cfg.Log.With("component", "envd"))
	h := e2b.Handler(e2b.Config{Sandboxes: sbx.mgr, Auth: tokens, AccessKey: key, Envd: ev, IsEnvd: envd.IsEnvdRequest, Removed: ev.Forget,
		Log: cfg.Log.With("component", "e2b")})
	return h, ev.Close, nil
}
