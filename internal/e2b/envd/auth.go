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
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
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
		return "", fmt.Errorf("reading the access token of sandbox %s: %w", id, err)
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
		return unauthenticatedf("header %s is missing: sandbox %s is secure; use the envdAccessToken its create or connect returned", headerAccessToken, id)
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
		return unauthenticatedf("header %s: not the access token of sandbox %s", headerAccessToken, id)
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
		return unauthenticatedf("signature: not valid for %s of %q as %q in sandbox %s", operation, q.Get("path"), q.Get("username"), id)
	}
	return nil
}

// authInterceptor checks the access token of every RPC.
type authInterceptor struct{ s *Server }

var _ connect.Interceptor = authInterceptor{}

func (a authInterceptor) check(ctx context.Context, h http.Header) error {
	id, err := sandboxIDFrom(ctx)
	if err != nil {
		return a.s.rpcError(ctx, "", err)
	}
	if err := a.s.checkToken(ctx, id, h); err != nil {
		return a.s.rpcError(ctx, id, err)
	}
	return nil
}

func (a authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := a.check(ctx, req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (a authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := a.check(ctx, conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
