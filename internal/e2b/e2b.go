// Package e2b serves E2B's API over Zygo's sandboxes, so that E2B's own SDKs (npm `e2b`,
// `@e2b/code-interpreter`) drive Zygo unchanged: E2B_API_URL points them at this handler and
// E2B_SANDBOX_URL at the same address.
//
// One handler serves both of E2B's APIs on one listener (zygo serve --e2b ADDR):
//
//   - a request that names a sandbox (Config.IsEnvd: the header E2b-Sandbox-Id) is for that
//     sandbox's envd API (commands, files, the code interpreter) and goes to Config.Envd
//     (package internal/e2b/envd), which checks its X-Access-Token against the sandbox's envd
//     access token (AccessToken, through the adapter's EnvdAccessToken);
//   - any other request is for the control API (sandboxes: create, list, get, kill, timeout,
//     refresh, connect, pause, resume, fork with count, snapshots, templates; control.go),
//     authenticated by X-API-Key, which is a Zygo API token (Config.Auth).
//
// It is a translation layer over sandbox.Manager: an E2B sandbox is a Zygo sandbox, a snapshot
// a checkpoint, pause a checkpoint and stop, a fork a Zygo fork (every child resealed). Errors
// are E2B's shape, {"code": HTTP status, "message": "…"}, so the SDKs raise their own error
// classes (SandboxNotFoundError, AuthenticationError, InvalidArgumentError, …).
package e2b

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/zygo-run/zygo/internal/sandbox"
)

// Authenticator finds the Zygo API token a secret belongs to (api.Tokens).
type Authenticator interface {
	// Authenticate returns the token's name, ok false when secret is none of them.
	Authenticate(secret string) (name string, ok bool)
}

// DefaultEnvdVersion is the envd version the control API reports when Config.EnvdVersion is
// empty. The SDKs switch features on it (stdin of commands from 0.3.0, the default user from
// 0.4.0, octet-stream uploads from 0.5.7).
const DefaultEnvdVersion = "0.5.7"

// Config configures Handler.
type Config struct {
	// Sandboxes is the sandbox manager. Required.
	Sandboxes Sandboxes
	// Auth checks X-API-Key. Required.
	Auth Authenticator
	// AccessKey derives each sandbox's envd access token (AccessToken): at least 32 random
	// bytes the daemon keeps, so tokens survive its restarts. Required.
	AccessKey []byte
	// Envd serves the envd API of the sandbox a request names; it must check the request's
	// access token (envd.Server does, through EnvdSandboxes.EnvdAccessToken). nil: such
	// requests are answered 501.
	Envd http.Handler
	// Removed, when set, is told each sandbox the control API killed (envd.Server.Forget).
	Removed func(id string)
	// IsEnvd reports whether a request is for the envd API [it carries E2b-Sandbox-Id].
	IsEnvd func(*http.Request) bool
	// EnvdVersion is reported as each sandbox's envdVersion [DefaultEnvdVersion].
	EnvdVersion string
	Log         *slog.Logger
}

// SandboxIDHeader names the sandbox an envd request is for; AccessTokenHeader carries its
// envd access token; APIKeyHeader the control API's key.
const (
	SandboxIDHeader   = "E2b-Sandbox-Id"
	AccessTokenHeader = "X-Access-Token"
	APIKeyHeader      = "X-Api-Key"
)

// AccessToken returns the envd access token of the sandbox of rec: sandbox.AccessMAC under
// key (64 hex digits), the secret of the sandbox's Zygo access token too, so it dies with the
// sandbox and a fork's differs. The control API hands it out with the sandbox
// (envdAccessToken); envd requests must carry it.
func AccessToken(key []byte, rec sandbox.SandboxRecord) string { return sandbox.AccessMAC(key, rec) }

// Handler returns the handler of the --e2b listener (see the package doc). It panics on a
// Config without Sandboxes, Auth or AccessKey.
func Handler(cfg Config) http.Handler {
	if cfg.Sandboxes == nil || cfg.Auth == nil || len(cfg.AccessKey) < 32 {
		panic("e2b.Handler: Sandboxes, Auth and a 32-byte AccessKey are required")
	}
	if cfg.EnvdVersion == "" {
		cfg.EnvdVersion = DefaultEnvdVersion
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.IsEnvd == nil {
		cfg.IsEnvd = func(r *http.Request) bool { return r.Header.Get(SandboxIDHeader) != "" }
	}
	c := &control{cfg: cfg, log: cfg.Log}
	ctl := c.routes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cfg.IsEnvd(r) {
			if cfg.Envd == nil {
				writeError(w, http.StatusNotImplemented, "this daemon serves no envd API")
				return
			}
			cfg.Envd.ServeHTTP(w, r)
			return
		}
		if _, ok := c.authenticate(r); !ok && isSandboxAccessToken(r) {
			writeError(w, http.StatusForbidden, "a sandbox access token reaches its sandbox's envd API only, never the control API: "+
				"X-API-Key must be a Zygo API token")
			return
		} else if !ok {
			c.log.Warn("e2b: authentication failed", "remote_addr", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
			writeError(w, http.StatusUnauthorized, "invalid API key: X-API-Key must be a Zygo API token (`zygo token create`, or api.token "+
				"in the daemon's state dir), as it is or with its zygo_ prefix written e2b_")
			return
		}
		ctl.ServeHTTP(w, r)
	})
}

// authenticate checks the request's X-API-Key (or a bearer token): a Zygo token as it is, or
// with "e2b_" in place of its "zygo_" prefix (E2B's SDKs check that a key starts with e2b_
// unless E2B_VALIDATE_API_KEY=false), or "e2b_" followed by the default token's hex.
func (c *control) authenticate(r *http.Request) (string, bool) {
	key := r.Header.Get(APIKeyHeader)
	if key == "" {
		if scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			key = strings.TrimSpace(cred)
		}
	}
	if key == "" {
		return "", false
	}
	if name, ok := c.cfg.Auth.Authenticate(key); ok {
		return name, true
	}
	if rest, ok := strings.CutPrefix(key, "e2b_"); ok && rest != "" {
		if name, ok := c.cfg.Auth.Authenticate("zygo_" + rest); ok {
			return name, true
		}
		return c.cfg.Auth.Authenticate(rest)
	}
	return "", false
}

// isSandboxAccessToken reports whether the request's key is a Zygo sandbox access token (as
// it is, or with "e2b_" in place of "zygo_").
func isSandboxAccessToken(r *http.Request) bool {
	key := r.Header.Get(APIKeyHeader)
	if key == "" {
		if scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			key = strings.TrimSpace(cred)
		}
	}
	if rest, ok := strings.CutPrefix(key, "e2b_"); ok {
		key = "zygo_" + rest
	}
	return strings.HasPrefix(key, sandbox.AccessTokenPrefix)
}
