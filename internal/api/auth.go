package api

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// The TCP listener is reachable by every local user (and, with TLS, by other machines), so
// it demands a bearer token; the unix socket does not (its mode, 0600, lets only the daemon's
// user connect). The tokens are named (tokens.go): "default" lives in STATE/api.token (mode
// 0600), made by LoadToken on the daemon's first start with --listen; others are made by
// `zygo token create` and kept in the store as SHA-256 digests.

// tokenBytes is the token's entropy; the file holds it hex-encoded.
const tokenBytes = 32

// LoadToken returns the bearer token kept in path, creating the file (mode
// 0600, 32 random bytes hex-encoded) when it does not exist. A file readable
// or writable by group or others is refused, and so is one that does not hold
// 64 hex digits (surrounding white space is ignored). The caller owns the
// file; LoadToken keeps no descriptor open.
func LoadToken(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return createToken(path)
	}
	if err != nil {
		return "", fmt.Errorf("opening API token file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("opening API token file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("API token file %s has mode %o: it must be 0600 (chmod 600 it, or delete it to get a new token)", path, st.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4*tokenBytes))
	if err != nil {
		return "", fmt.Errorf("reading API token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if raw, err := hex.DecodeString(tok); err != nil || len(raw) != tokenBytes {
		return "", fmt.Errorf("API token file %s must hold %d hex digits (delete it to get a new token)", path, 2*tokenBytes)
	}
	return tok, nil
}

// createToken writes a new token to path, which must not exist. On failure
// it leaves no file behind, so that the next start makes a fresh one.
func createToken(path string) (string, error) {
	raw := make([]byte, tokenBytes)
	if _, err := io.ReadFull(rand.Reader, raw); err != nil {
		return "", fmt.Errorf("generating API token: %w", err)
	}
	tok := hex.EncodeToString(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("creating API token file: %w", err)
	}
	_, err = f.WriteString(tok)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", fmt.Errorf("writing API token file: %w", err)
	}
	return tok, nil
}

// Authenticator finds the token a bearer secret belongs to. Tokens is the daemon's; safe for
// concurrent use.
type Authenticator interface {
	// Authenticate returns the name of the token whose secret is secret, ok false when
	// there is none. It compares in constant time (matchDigest).
	Authenticate(secret string) (name string, ok bool)
}

// tokenDigest is a token's name and the SHA-256 of its secret.
type tokenDigest struct {
	name string
	sum  [sha256.Size]byte
}

// matchDigest returns the name of the digest of ds that is SHA-256(secret). Every digest is
// compared, each with subtle.ConstantTimeCompare, so that the time taken shows neither which
// token matched nor how much of one did (the digests also hide the secrets' lengths).
func matchDigest(ds []tokenDigest, secret string) (string, bool) {
	sum := sha256.Sum256([]byte(secret))
	found := -1
	for i := range ds {
		hit := subtle.ConstantTimeCompare(sum[:], ds[i].sum[:])
		found = subtle.ConstantTimeSelect(hit, i, found)
	}
	if found < 0 {
		return "", false
	}
	return ds[found].name, true
}

// oneToken is an Authenticator of a single token.
type oneToken []tokenDigest

func (o oneToken) Authenticate(secret string) (string, bool) { return matchDigest(o, secret) }

// DefaultTokenName is the name of the token kept in STATE/api.token.
const DefaultTokenName = "default"

// RequireToken is RequireTokens with the single token token, named DefaultTokenName. token
// must not be empty.
func RequireToken(token string, log *slog.Logger, h http.Handler) http.Handler {
	if token == "" {
		panic("api.RequireToken: empty token")
	}
	return RequireTokens(oneToken{{DefaultTokenName, sha256.Sum256([]byte(token))}}, log, h)
}

// RequireTokens returns h behind a check that every request carries "Authorization: Bearer
// SECRET" with the secret of one of auth's tokens; any other request is answered 401 with
// code "unauthenticated" (with the API version header), logged at warn level on log (remote address, method, path; never
// what was sent as a token) and never reaches h. The call's caller (see callerOf) records that
// it came over TCP and the token's name, for the access log and the token routes. A secret of
// wire.SandboxAccessTokenPrefix is checked by auth's SandboxAuthenticator (none: refused); the
// caller then records its sandbox, which every route checks (access.go).
func RequireTokens(auth Authenticator, log *slog.Logger, h http.Handler) http.Handler {
	return withAPIVersion(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, r := withCaller(r)
		c.tcp = true
		got, ok := bearer(r)
		if !ok {
			authFailed(log, r, "no bearer token")
			unauthenticated(w, "this API listener requires a bearer token: send `Authorization: Bearer TOKEN`, "+
				"TOKEN being one of `zygo token create` or the contents of api.token in the daemon's state directory")
			return
		}
		if strings.HasPrefix(got, wire.SandboxAccessTokenPrefix) {
			if _, ok := wire.SandboxOfAccessToken(got); !ok {
				authFailed(log, r, "malformed sandbox access token")
				unauthenticated(w, "malformed sandbox access token: one is "+wire.SandboxAccessTokenPrefix+
					"ID_ and 64 hex digits, ID the sandbox's id (`zygo sandbox token ID` prints it)")
				return
			}
			sa, isSA := auth.(SandboxAuthenticator)
			id, ok := "", false
			if isSA {
				id, ok = sa.AuthenticateSandbox(r.Context(), got)
			}
			if !ok {
				authFailed(log, r, "wrong sandbox access token")
				unauthenticated(w, "not a valid sandbox access token of this daemon: its sandbox was removed (a sandbox's "+
					"access token dies with it), or the token is another daemon's")
				return
			}
			c.token, c.sandbox = "sandbox/"+id, id
			h.ServeHTTP(w, r)
			return
		}
		name, ok := auth.Authenticate(got)
		if !ok {
			authFailed(log, r, "wrong bearer token")
			unauthenticated(w, "wrong bearer token: it is none of this daemon's tokens (`zygo token ls` on its host lists them; "+
				"api.token in its state directory holds the one named default)")
			return
		}
		c.token = name
		h.ServeHTTP(w, r)
	}))
}

// bearer returns the credentials of r's "Authorization: Bearer ..." header;
// the scheme is case-insensitive (RFC 7235).
func bearer(r *http.Request) (string, bool) {
	scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	cred = strings.TrimSpace(cred)
	return cred, cred != ""
}

// authFailed logs a call refused for its credentials.
func authFailed(log *slog.Logger, r *http.Request, reason string) {
	log.LogAttrs(r.Context(), slog.LevelWarn, "authentication failed", slog.String("reason", reason),
		slog.String("remote_addr", r.RemoteAddr), slog.String("method", r.Method), slog.String("path", r.URL.Path))
}

func unauthenticated(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="zygo"`)
	writeError(w, wire.ErrorBody{Code: wire.CodeUnauthenticated, Message: msg})
}
