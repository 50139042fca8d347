package api

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// The loopback TCP listener is reachable by every local user, so it demands
// a bearer token; the unix socket does not (its mode, 0600, lets only the
// daemon's user connect). The token lives in STATE/api.token (mode 0600),
// made by LoadToken on the daemon's first start with --listen.

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

// RequireToken returns h behind a check that every request carries
// "Authorization: Bearer TOKEN"; any other request is answered 401 with
// code "unauthenticated" (and the API version header) and never reaches h. The token is compared in
// constant time (through SHA-256 digests, so that its length does not show
// either). token must not be empty.
func RequireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		panic("api.RequireToken: empty token")
	}
	want := sha256.Sum256([]byte(token))
	return withAPIVersion(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := bearer(r)
		if !ok {
			unauthenticated(w, "this API listener requires a bearer token: send `Authorization: Bearer TOKEN`, "+
				"TOKEN being the contents of api.token in the daemon's state directory")
			return
		}
		sum := sha256.Sum256([]byte(got))
		if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			unauthenticated(w, "wrong bearer token: it must be the contents of api.token in the daemon's state directory")
			return
		}
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

func unauthenticated(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="zygo"`)
	writeError(w, wire.ErrorBody{Code: wire.CodeUnauthenticated, Message: msg})
}
