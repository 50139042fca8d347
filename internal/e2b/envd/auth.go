package envd

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
)

// headerAccessToken carries a sandbox's envd access token.
const headerAccessToken = "X-Access-Token"

// AccessTokens is an optional capability of a Sandboxes: the envd access token of a
// sandbox (E2B's envdAccessToken, which create and connect return for a secure sandbox).
// When the backend has it and a sandbox's token is not empty, every envd request on that
// sandbox but GET /health must carry the token in X-Access-Token, or, on /files, a valid
// signature made with it (the SDK's download and upload URLs). Errors are those of
// CheckRunning.
type AccessTokens interface {
	EnvdAccessToken(ctx context.Context, id string) (string, error)
}

// errUnauthenticated marks a request without the sandbox's access token.
var errUnauthenticated = errors.New("unauthenticated")

func unauthenticatedf(format string, args ...any) error {
	return &tagged{msg: fmt.Sprintf(format, args...), tag: errUnauthenticated}
}

// tokenOf returns sandbox id's access token, "" when the backend has none.
func (s *Server) tokenOf(ctx context.Context, id string) (string, error) {
	at, ok := s.sb.(AccessTokens)
	if !ok {
		return "", nil
	}
	tok, err := at.EnvdAccessToken(ctx, id)
	if err != nil {
		return "", fmt.Errorf("reading the access token of sandbox %s: %w", sentRef(ctx, id), err)
	}
	return tok, nil
}

// checkToken checks the X-Access-Token header of a request on sandbox id.
func (s *Server) checkToken(ctx context.Context, id string, h http.Header) error {
	tok, err := s.tokenOf(ctx, id)
	if err != nil || tok == "" {
		return err
	}
	got := h.Get(headerAccessToken)
	if got == "" {
		return unauthenticatedf("header %s is missing: sandbox %s is secure; use the envdAccessToken its create or connect returned", headerAccessToken, sentRef(ctx, id))
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
		return unauthenticatedf("header %s: not the access token of sandbox %s", headerAccessToken, sentRef(ctx, id))
	}
	return nil
}

// checkFiles authorises a /files request for operation ("read" or "write"): the header
// token, or the signature of E2B's signed URLs: "v1_" and the unpadded base64 of
// sha256("path:operation:username:token[:expiration]"), with expiration (Unix seconds) not
// past.
func (s *Server) checkFiles(ctx context.Context, id string, h http.Header, q url.Values, operation string) error {
	tok, err := s.tokenOf(ctx, id)
	if err != nil || tok == "" {
		return err
	}
	sig := q.Get("signature")
	if h.Get(headerAccessToken) != "" || sig == "" {
		return s.checkToken(ctx, id, h)
	}
	raw := q.Get("path") + ":" + operation + ":" + q.Get("username") + ":" + tok
	if exp := q.Get("signature_expiration"); exp != "" {
		sec, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return invalidf("query parameter signature_expiration %q: want Unix seconds", exp)
		}
		if time.Now().Unix() > sec {
			return unauthenticatedf("signature expired at %s", time.Unix(sec, 0).UTC().Format(time.RFC3339))
		}
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	want := "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return unauthenticatedf("signature: not valid for %s of %q as %q in sandbox %s", operation, q.Get("path"), q.Get("username"), sentRef(ctx, id))
	}
	return nil
}

// authenticated wraps a Connect service: the sandbox id and its access token are checked
// from the headers before any of the body is read, so that a caller without the token
// costs the daemon nothing but its headers (net/http discards at most 256 KiB of an unread
// body before closing the connection). A request that passes has its body bounded to
// maxMessage bytes per message by connect's read limit; a unary body whose Content-Length
// is over it is refused here as bad input (invalid_argument, HTTP 400) naming both sizes,
// where connect would answer resource_exhausted, which the SDK raises as a rate limit.
func (s *Server) authenticated(next http.Handler, maxMessage int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		id, err := sandboxIDFrom(ctx)
		if err == nil {
			err = s.checkToken(ctx, id, r.Header)
		}
		if err != nil {
			_ = s.rpcErrors.Write(w, r, s.rpcError(ctx, id, err)) // the client went away: nothing to tell it
			return
		}
		if r.ContentLength > maxMessage && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/connect+") {
			err := invalidf("request body: %d bytes, over the %d bytes of the largest message %s takes", r.ContentLength, maxMessage, strings.Trim(path.Dir(r.URL.Path), "/"))
			_ = s.rpcErrors.Write(w, r, s.rpcError(ctx, id, err))
			return
		}
		next.ServeHTTP(w, r)
	})
}
