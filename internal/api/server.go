// Package api is the server of Zygo's HTTP API (JSON over a unix socket and,
// optionally, TCP: loopback in plain HTTP, any address in TLS, every call
// carrying one of the daemon's named tokens: auth.go, tokens.go). Its bodies are those of the contract package
// sdk/go/wire, made from the daemon's types at the edge (convert.go); the Go
// client is sdk/go/zygo. It is the only place where error categories
// (internal/errdefs) become HTTP status codes and error codes.
//
// Routes: the table in routes.go (Routes), documented by api/openapi.yaml, which the
// daemon serves at GET /v1/openapi.json.
package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/secret"
	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// Functions is what the server needs from the function manager.
type Functions interface {
	Deploy(ctx context.Context, bundle io.Reader) (*function.DeployResult, error)
	// Invoke reads the event from body (size bytes, -1 when unknown) under
	// the function's own max_request_kib; see function.Manager.Invoke.
	Invoke(ctx context.Context, name string, body io.Reader, size int64) (*function.Invocation, error)
	List() []function.Status
	Get(name string) (function.Status, error)
	Remove(ctx context.Context, name string) error
	// Versions and Rollback: see function.Manager's.
	Versions(ctx context.Context, name string) ([]function.VersionInfo, error)
	Rollback(ctx context.Context, name, to string) (*function.DeployResult, error)
}

// Logs is what the server needs from the store for `zygo logs`.
type Logs interface {
	Logs(ctx context.Context, q store.LogQuery) ([]store.LogLine, error)
	// TailLogs returns the newest n lines matching q and the id of the function's newest
	// line (see store.Store.TailLogs).
	TailLogs(ctx context.Context, q store.LogQuery, n int) ([]store.LogLine, int64, error)
}

// Secrets is what the server needs from the secret store.
type Secrets interface {
	Set(ctx context.Context, name string, value []byte) error
	List(ctx context.Context) ([]secret.Meta, error)
	Remove(ctx context.Context, name string) error
}

// Server serves the API.
type Server struct {
	fns     Functions
	logs    Logs
	secrets Secrets
	log     *slog.Logger
	started time.Time
	version string
	// sandboxes serves /v1/sandboxes and /v1/checkpoints (sandboxes.go, set by WithSandboxes).
	sandboxes sandboxAPI
	// pools serves /v1/pools (pools.go, set by WithPools); nil: 503.
	pools Pools
	// tokens are the API tokens (tokens.go, set by WithTokens); nil: the token routes answer 503.
	tokens *Tokens
	// accessKey derives the sandbox access tokens (access.go, set by WithAccessKey); nil: none
	// is minted or accepted.
	accessKey []byte
	// metrics serves GET /metrics (set by WithMetrics; serveMetrics); nil: the route answers 404.
	metrics http.Handler
	// stall ends an image export or import when no byte moves for this long
	// (0: sandbox.ExportStallTimeout; checkpoint_images.go).
	stall time.Duration
}

// serveMetrics answers GET /metrics with the handler WithMetrics gave, or 404 without one.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if s.metrics == nil {
		writeError(w, wire.ErrorBody{Code: wire.CodeNotFound, Message: "this daemon serves no metrics"})
		return
	}
	s.metrics.ServeHTTP(w, r)
}

// WithMetrics gives the server the handler of GET /metrics (the Prometheus exposition of
// internal/metrics) and returns the server.
func (s *Server) WithMetrics(h http.Handler) *Server {
	s.metrics = h
	return s
}

// NewServer returns a Server; version is the daemon's build version.
func NewServer(fns Functions, logs Logs, secrets Secrets, log *slog.Logger, version string) *Server {
	return &Server{fns: fns, logs: logs, secrets: secrets, log: log, started: time.Now(), version: version}
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, wire.StatusBody{APIVersion: wire.APIVersion, Version: s.version, UptimeMs: time.Since(s.started).Milliseconds(), Functions: len(s.fns.List())})
}

func (s *Server) deploy(w http.ResponseWriter, r *http.Request) {
	// One byte over the bundle limit, so that ReadBundle's own limit trips
	// first and the error is errdefs.ErrTooLarge (413), not a read error.
	body := http.MaxBytesReader(w, r.Body, function.MaxBundleBytes+1)
	s.answerDeploy(w, r, func(ctx context.Context) (*function.DeployResult, error) {
		return s.fns.Deploy(ctx, body)
	})
}

// list answers a page of the functions, by name.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q, ok := pageQueryOf(w, r)
	if !ok {
		return
	}
	writePage(w, q, functionsOf(s.fns.List()), func(f wire.Function) string { return f.Name })
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	st, err := s.fns.Get(r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, functionOf(st))
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.fns.Remove(r.Context(), name); err != nil {
		s.fail(w, err)
		return
	}
	s.log.Info("function removed", "function", name)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) invoke(w http.ResponseWriter, r *http.Request) {
	// The manager reads the body under the function's own max_request_kib
	// (and the daemon's budget for bodies in memory); this outer bound only
	// caps what any function may be sent.
	body := http.MaxBytesReader(w, r.Body, function.MaxBodyKiB<<10+1)
	inv, err := s.fns.Invoke(r.Context(), r.PathValue("name"), body, r.ContentLength)
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set(wire.VersionHeader, inv.Version)
	answerRequest(w, ranRequest{id: inv.RequestID, child: inv.Child, elapsed: inv.Elapsed, phases: inv.Phases,
		failure: inv.Failure, err: inv.Error, value: inv.Value})
}

// ranRequest is what a request that ran (a function's invoke, a pool's run) answers with.
type ranRequest struct {
	id      string
	child   agentproc.ChildKind
	elapsed time.Duration
	phases  []agentproc.Phase
	failure agentproc.Failure
	err     *agentproc.HandlerError
	value   []byte
}

// answerRequest writes the answer of a request that ran: its id, child kind, duration and
// timed steps (Server-Timing) as headers, then its JSON value, or the error body of its
// failure (the failure is the code).
func answerRequest(w http.ResponseWriter, r ranRequest) {
	// The headers' values share one array, and Server-Timing is built in
	// one buffer (the keys are canonical: Header.Set would only check them).
	h, vals := w.Header(), make([]string, 4)
	vals[0], vals[1] = r.id, string(r.child)
	vals[2] = strconv.FormatFloat(float64(r.elapsed.Microseconds())/1000, 'f', 2, 64)
	h[wire.RequestIDHeader], h[wire.ChildHeader], h[wire.DurationHeader] = vals[0:1:1], vals[1:2:2], vals[2:3:3]
	if len(r.phases) > 0 {
		var buf [1024]byte
		b := buf[:0]
		for _, p := range r.phases {
			b = wire.AppendServerTiming(b, p.Name, p.Took)
		}
		vals[3] = string(b)
		h[wire.ServerTimingHeader] = vals[3:4:4]
	}
	if r.failure != agentproc.FailNone {
		e := wire.ErrorBody{Code: wire.Code(r.failure), RequestID: r.id}
		if r.err != nil {
			e.Type, e.Message, e.Traceback = r.err.Type, r.err.Message, r.err.Traceback
		}
		writeError(w, e)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(r.value)
	w.Write([]byte("\n"))
}

// getLogs answers a page of a function's log lines (?request, ?after, ?limit, ?since), or
// with ?tail=N the newest N of them and a next at the function's newest line.
func (s *Server) getLogs(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, err := s.fns.Get(name); err != nil {
		s.fail(w, err)
		return
	}
	q, tail, msg := logQueryOf(name, r.URL.Query(), time.Now())
	if msg != "" {
		badRequest(w, msg)
		return
	}
	// Lines are stored off the request path; wait for those already produced
	// so that a caller sees its own request's output.
	if f, ok := s.fns.(interface{ FlushLogs(context.Context) }); ok {
		f.FlushLogs(r.Context())
	}
	var lines []store.LogLine
	var err error
	next := q.AfterID
	if tail >= 0 {
		lines, next, err = s.logs.TailLogs(r.Context(), q, tail)
	} else {
		lines, err = s.logs.Logs(r.Context(), q)
		if len(lines) > 0 {
			next = lines[len(lines)-1].ID
		}
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.LogsBody{Lines: logLinesOf(lines), Next: next})
}

// logQueryOf reads the query parameters of the logs route: the store query, tail (-1 when
// not asked) and, for a bad parameter, a message naming it.
func logQueryOf(name string, v url.Values, now time.Time) (q store.LogQuery, tail int, msg string) {
	q = store.LogQuery{Function: name, RequestID: v.Get("request")}
	tail = -1
	var err error
	if s := v.Get("after"); s != "" {
		if q.AfterID, err = strconv.ParseInt(s, 10, 64); err != nil {
			return q, tail, "after: not an integer"
		}
	}
	if s := v.Get("limit"); s != "" {
		if q.Limit, err = strconv.Atoi(s); err != nil || q.Limit < 1 || q.Limit > wire.MaxLogsLimit {
			return q, tail, fmt.Sprintf("limit: must be 1..%d", wire.MaxLogsLimit)
		}
	}
	if s := v.Get("since"); s != "" {
		if q.Since, err = wire.ParseSince(s, now); err != nil {
			return q, tail, "since: " + err.Error()
		}
	}
	if s := v.Get("tail"); s != "" {
		if tail, err = strconv.Atoi(s); err != nil || tail < 0 || tail > wire.MaxLogsLimit {
			return q, -1, fmt.Sprintf("tail: must be 0..%d", wire.MaxLogsLimit)
		}
		if q.AfterID != 0 {
			return q, -1, "tail: cannot be combined with after (tail starts from the newest line)"
		}
	}
	return q, tail, ""
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (s *Server) setSecret(w http.ResponseWriter, r *http.Request) {
	v, err := io.ReadAll(http.MaxBytesReader(w, r.Body, secret.MaxValueBytes))
	if err != nil {
		writeError(w, wire.ErrorBody{Code: wire.CodeTooLarge,
			Message: fmt.Sprintf("secret value exceeds %d KiB", secret.MaxValueBytes>>10)})
		return
	}
	name, err := secretName(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	if err := s.secrets.Set(r.Context(), name, v); err != nil {
		s.fail(w, err)
		return
	}
	s.log.Info("secret set", "secret", name) // the name only, never the value
	w.WriteHeader(http.StatusNoContent)
}

// secretName returns the stored name of the secret r's path names: with ?tenant=T, pool
// tenant T's secret of that name (secret.TenantName); without, a shared name, which may not be
// in the tenants' namespace (secret.ValidSharedName). Errors name the field.
func secretName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	tenant := r.URL.Query().Get("tenant")
	if tenant == "" {
		if strings.HasPrefix(name, secret.TenantPrefix) {
			return "", fmt.Errorf("%w: name: %q begins with %s, the pool tenants' namespace: give ?tenant=T and the secret's own name",
				errdefs.ErrInvalidArgument, name, secret.TenantPrefix)
		}
		return name, nil
	}
	if err := secret.ValidTenant("tenant", tenant); err != nil {
		return "", err
	}
	if err := secret.ValidName(name); err != nil {
		return "", err
	}
	return secret.TenantName(tenant, name), nil
}

// listSecrets answers a page of the secrets' names and update times, by name.
func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	q, ok := pageQueryOf(w, r)
	if !ok {
		return
	}
	ms, err := s.secrets.List(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	writePage(w, q, secretsOf(ms), func(m wire.SecretMeta) string { return m.Name })
}

// removeSecret refuses while a function, a sandbox or a checkpoint names the secret: a
// function would fail its next request, a sandbox or checkpoint its next copy's reseal, and a
// checkpoint image still holds the value in the sandbox's memory.
func (s *Server) removeSecret(w http.ResponseWriter, r *http.Request) {
	name, err := secretName(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	var users []string
	for _, f := range s.fns.List() {
		if f.Manifest != nil && slices.Contains(f.Manifest.Secrets, name) {
			users = append(users, f.Name)
		}
	}
	if len(users) > 0 {
		writeError(w, wire.ErrorBody{Code: wire.CodeFailedPrecondition, Message: fmt.Sprintf(
			"secret %q is used by %s: deploy them without it (or zygo rm them) first", name, strings.Join(users, ", "))})
		return
	}
	sbUsers, err := s.sandboxSecretUsers(r.Context(), name)
	if err != nil {
		s.fail(w, err)
		return
	}
	if len(sbUsers) > 0 {
		writeError(w, wire.ErrorBody{Code: wire.CodeFailedPrecondition, Message: fmt.Sprintf(
			"secret %q is used by %s: remove them first (zygo sandbox rm, zygo sandbox checkpoints rm)", name, strings.Join(sbUsers, ", "))})
		return
	}
	if err := s.secrets.Remove(r.Context(), name); err != nil {
		s.fail(w, err)
		return
	}
	s.log.Info("secret removed", "secret", name)
	w.WriteHeader(http.StatusNoContent)
}
