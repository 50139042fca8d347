package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// TokenStore is what Tokens needs from the store (internal/store, tokens.go).
type TokenStore interface {
	PutToken(ctx context.Context, t store.Token) error
	SetToken(ctx context.Context, t store.Token) error
	Tokens(ctx context.Context) ([]store.Token, error)
	DeleteToken(ctx context.Context, name string) error
	TouchToken(ctx context.Context, name string, at time.Time) error
}

// Tokens is the daemon's set of named API tokens: the Authenticator of its TCP listener and
// what the token routes manage. The store keeps each token's SHA-256 digest; Tokens keeps
// them in memory too, so that a call costs no query. Safe for concurrent use.
type Tokens struct {
	st          TokenStore
	defaultFile string // STATE/api.token: removed when the token "default" is revoked
	log         *slog.Logger
	now         func() time.Time

	mu      sync.Mutex    // guards digests and touched
	digests []tokenDigest // every token's
	touched map[string]time.Time
}

// touchEvery is how often a token's last use is written to the store (at most).
const touchEvery = time.Minute

// NewTokens returns the tokens of st. With defaultSecret (the contents of defaultFile,
// STATE/api.token) it first records that token as DefaultTokenName, replacing an older
// "default" of another secret. Errors: the store's.
func NewTokens(ctx context.Context, st TokenStore, defaultFile, defaultSecret string, log *slog.Logger) (*Tokens, error) {
	t := &Tokens{st: st, defaultFile: defaultFile, log: log, now: time.Now, touched: map[string]time.Time{}}
	if defaultSecret != "" {
		sum := sha256.Sum256([]byte(defaultSecret))
		if err := st.SetToken(ctx, store.Token{Name: DefaultTokenName, Hash: sum[:], CreatedAt: t.now()}); err != nil {
			return nil, fmt.Errorf("recording the default token: %w", err)
		}
	}
	if err := t.reload(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// reload reads the digests from the store.
func (t *Tokens) reload(ctx context.Context) error {
	recs, err := t.st.Tokens(ctx)
	if err != nil {
		return fmt.Errorf("reading the API tokens: %w", err)
	}
	ds := make([]tokenDigest, 0, len(recs))
	for _, r := range recs {
		var d tokenDigest
		d.name = r.Name
		copy(d.sum[:], r.Hash)
		ds = append(ds, d)
	}
	t.mu.Lock()
	t.digests = ds
	t.mu.Unlock()
	return nil
}

// Authenticate returns the name of the token whose secret is secret (matchDigest: constant
// time), and records its use in the store at most once per touchEvery.
func (t *Tokens) Authenticate(secret string) (string, bool) {
	t.mu.Lock()
	name, ok := matchDigest(t.digests, secret)
	now := t.now()
	touch := ok && now.Sub(t.touched[name]) >= touchEvery
	if touch {
		t.touched[name] = now
	}
	t.mu.Unlock()
	if touch {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := t.st.TouchToken(ctx, name, now); err != nil {
			t.log.Warn("recording a token's use", "token", name, "err", err)
		}
	}
	return name, ok
}

// tokenName is what a token's name may be.
var tokenName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// secretPrefix starts every secret Create makes, so that secret scanners can spot one.
const secretPrefix = "zygo_"

// Create makes a token called name and returns it with its secret ("zygo_" and 64 hex
// digits: 32 random bytes). Errors: errdefs.ErrInvalidArgument for a bad name,
// errdefs.ErrExists when it is taken.
func (t *Tokens) Create(ctx context.Context, name string) (wire.TokenCreated, error) {
	if !tokenName.MatchString(name) {
		return wire.TokenCreated{}, fmt.Errorf("%w: name %q: want 1-63 lowercase letters, digits, '.', '_' or '-', "+
			"starting with a letter or digit", errdefs.ErrInvalidArgument, name)
	}
	if name == DefaultTokenName {
		// The daemon owns that one: STATE/api.token, made again at a start with --listen.
		return wire.TokenCreated{}, fmt.Errorf("%w: name %q is the token the daemon keeps in its state dir's api.token: choose another name",
			errdefs.ErrInvalidArgument, name)
	}
	raw := make([]byte, tokenBytes)
	if _, err := io.ReadFull(rand.Reader, raw); err != nil {
		return wire.TokenCreated{}, fmt.Errorf("generating a token: %w", err)
	}
	secret := secretPrefix + hex.EncodeToString(raw)
	sum := sha256.Sum256([]byte(secret))
	now := t.now().UTC().Truncate(time.Millisecond)
	if err := t.st.PutToken(ctx, store.Token{Name: name, Hash: sum[:], CreatedAt: now}); err != nil {
		if errdefs.IsExists(err) {
			return wire.TokenCreated{}, err // `token "x" already exists` says it all
		}
		return wire.TokenCreated{}, fmt.Errorf("creating token %q: %w", name, err)
	}
	if err := t.reload(ctx); err != nil {
		return wire.TokenCreated{}, err
	}
	return wire.TokenCreated{Token: wire.Token{Name: name, CreatedAt: now}, Secret: secret}, nil
}

// List returns every token's record, by name.
func (t *Tokens) List(ctx context.Context) ([]wire.Token, error) {
	recs, err := t.st.Tokens(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing tokens: %w", err)
	}
	out := make([]wire.Token, 0, len(recs))
	for _, r := range recs {
		wt := wire.Token{Name: r.Name, CreatedAt: r.CreatedAt.UTC()}
		if !r.LastUsedAt.IsZero() {
			u := r.LastUsedAt.UTC()
			wt.LastUsedAt = &u
		}
		out = append(out, wt)
	}
	return out, nil
}

// Revoke deletes the token name: calls with it are refused from then on. Revoking
// DefaultTokenName also removes STATE/api.token (a new one is made at the next start with
// --listen). Errors: errdefs.ErrNotFound when there is no such token.
func (t *Tokens) Revoke(ctx context.Context, name string) error {
	if err := t.st.DeleteToken(ctx, name); err != nil {
		return fmt.Errorf("revoking token %q: %w", name, err)
	}
	if err := t.reload(ctx); err != nil {
		return err
	}
	if name == DefaultTokenName && t.defaultFile != "" {
		if err := os.Remove(t.defaultFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", t.defaultFile, err)
		}
	}
	return nil
}

// WithTokens returns s serving the token routes from t, and its TCP handler (TCPHandler)
// accepting t's tokens.
func (s *Server) WithTokens(t *Tokens) *Server {
	s.tokens = t
	return s
}

// TCPHandler returns the handler of the TCP listener: every route, behind RequireTokens with
// the server's tokens (WithTokens must have been called), and the access log outside it, so
// that refused calls are logged too. It also accepts the sandbox access tokens (access.go).
func (s *Server) TCPHandler() http.Handler {
	if s.tokens == nil {
		panic("api: TCPHandler without WithTokens")
	}
	return withAPIVersion(s.accessLog(RequireTokens(tcpAuth{Tokens: s.tokens, s: s}, s.log, noRoute(s.mux()))))
}

// needTokens answers 503 when the server has no tokens.
func (s *Server) needTokens(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.tokens == nil {
			writeError(w, wire.ErrorBody{Code: wire.CodeUnavailable, Message: "this server manages no API tokens"})
			return
		}
		h(w, r)
	}
}

// unixOnly refuses (403) a call that came over TCP: creating and revoking tokens is for the
// daemon's own user, on its unix socket, so that a token that leaks cannot mint others or
// lock the owner out (docs/security.md).
func (s *Server) unixOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c := callerOf(r.Context()); c != nil && c.tcp {
			writeError(w, wire.ErrorBody{Code: wire.CodePermissionDenied, Message: "tokens are created and revoked " +
				"on the daemon's unix socket only: run `zygo token` on the daemon's host, as its user"})
			return
		}
		h(w, r)
	}
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	var body wire.CreateTokenBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		badRequest(w, "body: want {\"name\": NAME}: "+err.Error())
		return
	}
	tok, err := s.tokens.Create(r.Context(), body.Name)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, tok)
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	q, ok := pageQueryOf(w, r)
	if !ok {
		return
	}
	all, err := s.tokens.List(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	writePage(w, q, all, func(t wire.Token) string { return t.Name })
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	if err := s.tokens.Revoke(r.Context(), r.PathValue("name")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
