package api

// Sandbox access tokens: a bearer token that reaches one sandbox and only what a user of that
// sandbox needs (wire.SandboxAccessToken has the shape). A daemon token (tokens.go) or the
// unix socket mints one (POST /v1/sandboxes/{id}/access-token); the TCP listener accepts it
// (RequireTokens, through SandboxAuthenticator) and every route checks it (scoped): the
// routes of sandboxScopedRoutes, on that sandbox only, pass; all others answer 403.

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// sandboxScopedRoutes are the routes a sandbox access token reaches, each on its own sandbox
// only (the path's {id}): reading the sandbox, running commands and code in it, its files, its
// generation, services and ports. Every other route refuses such a token (403), a route added
// later included until it is listed here.
var sandboxScopedRoutes = map[string]bool{
	"GET /v1/sandboxes/{id}":                 true,
	"POST /v1/sandboxes/{id}/exec":           true,
	"POST /v1/sandboxes/{id}/run-code":       true,
	"PUT /v1/sandboxes/{id}/files":           true,
	"GET /v1/sandboxes/{id}/files":           true,
	"GET /v1/sandboxes/{id}/files/list":      true,
	"GET /v1/sandboxes/{id}/generation":      true,
	"GET /v1/sandboxes/{id}/services":        true,
	"POST /v1/sandboxes/{id}/ports/{port}":   true,
	"DELETE /v1/sandboxes/{id}/ports/{port}": true,
}

// SandboxAuthenticator is an optional capability of an Authenticator: the sandbox access
// tokens. RequireTokens asks it about a secret of wire.SandboxAccessTokenPrefix.
type SandboxAuthenticator interface {
	// AuthenticateSandbox returns the id of the sandbox whose access token secret is; ok false
	// when it is none: malformed, made under another key, or of a sandbox that does not exist
	// (any more). It compares in constant time.
	AuthenticateSandbox(ctx context.Context, secret string) (sandboxID string, ok bool)
}

// WithAccessKey gives the server the key of the sandbox access tokens (at least
// sandbox.AccessKeyBytes; the caller keeps it, STATE/sandbox-access.key) and returns the
// server. Without one, minting answers 503 and no access token is accepted.
func (s *Server) WithAccessKey(key []byte) *Server {
	if len(key) < sandbox.AccessKeyBytes {
		panic("api.WithAccessKey: the key is shorter than sandbox.AccessKeyBytes")
	}
	s.accessKey = key
	return s
}

// tcpAuth is the TCP listener's Authenticator: the daemon's tokens and the sandbox access
// tokens.
type tcpAuth struct {
	*Tokens
	s *Server
}

var _ SandboxAuthenticator = tcpAuth{}

// AuthenticateSandbox implements SandboxAuthenticator with the server's key and sandboxes.
func (a tcpAuth) AuthenticateSandbox(ctx context.Context, secret string) (string, bool) {
	return a.s.authenticateSandbox(ctx, secret)
}

func (s *Server) authenticateSandbox(ctx context.Context, secret string) (string, bool) {
	id, ok := wire.SandboxOfAccessToken(secret)
	if !ok || s.accessKey == nil || s.sandboxes.mgr == nil || !strings.HasPrefix(id, "sb-") {
		return "", false
	}
	rec, err := s.sandboxes.mgr.Get(ctx, id)
	if err != nil || rec.ID != id { // never a name: a token names its sandbox by id
		return "", false
	}
	want := s.accessToken(rec)
	if subtle.ConstantTimeCompare([]byte(secret), []byte(want)) != 1 {
		return "", false
	}
	return rec.ID, true
}

// accessToken returns the access token of the sandbox of rec.
func (s *Server) accessToken(rec sandbox.SandboxRecord) string {
	return wire.SandboxAccessTokenPrefix + rec.ID + "_" + sandbox.AccessMAC(s.accessKey, rec)
}

// scoped returns h behind the check of a sandbox access token's reach: a call made with one
// passes only on a route of sandboxScopedRoutes whose {id} is its sandbox (by id, or by a name
// that is its sandbox's, which is then replaced by the id so that the handler acts on that
// very sandbox); any other is answered 403 (CodePermissionDenied) saying why. Calls made
// otherwise pass untouched.
func (s *Server) scoped(rt Route, h http.HandlerFunc) http.HandlerFunc {
	allowed := sandboxScopedRoutes[rt.String()]
	return func(w http.ResponseWriter, r *http.Request) {
		c := callerOf(r.Context())
		if c == nil || c.sandbox == "" {
			h(w, r)
			return
		}
		if !allowed {
			writeError(w, wire.ErrorBody{Code: wire.CodePermissionDenied, Message: "this is the access token of sandbox " + c.sandbox +
				": it reaches only that sandbox's record, exec, run-code, files, generation, services and ports; " +
				rt.String() + " needs one of the daemon's tokens"})
			return
		}
		if id := r.PathValue("id"); id != c.sandbox {
			rec, err := s.sandboxes.mgr.Get(r.Context(), id)
			if err != nil || rec.ID != c.sandbox {
				writeError(w, wire.ErrorBody{Code: wire.CodePermissionDenied, Message: "this is the access token of sandbox " +
					c.sandbox + ": it does not reach sandbox " + id})
				return
			}
			r.SetPathValue("id", rec.ID)
		}
		h(w, r)
	}
}

// mintAccessToken answers the access token of the sandbox (POST /v1/sandboxes/{id}/access-token).
// The same sandbox always gets the same token: minting again is harmless, and revokes nothing.
func (s *Server) mintAccessToken(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	if !noBody(w, r) { // it takes no options: a {"ttl":5} must not look honoured (the token never expires)
		return
	}
	if s.accessKey == nil {
		writeError(w, wire.ErrorBody{Code: wire.CodeUnavailable, Message: "this daemon issues no sandbox access tokens"})
		return
	}
	rec, err := sb.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.SandboxAccessToken{SandboxID: rec.ID, Token: s.accessToken(rec)})
}
