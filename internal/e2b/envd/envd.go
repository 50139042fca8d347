// Package envd serves E2B's in-sandbox API, "envd", for Zygo sandboxes, so that the official
// E2B SDKs (npm `e2b`, `@e2b/code-interpreter`) drive them unchanged. E2B runs envd inside
// each sandbox; Zygo serves it from the daemon and translates every call onto the sandbox
// manager (Sandboxes), naming the sandbox by the request's E2b-Sandbox-Id header (what the
// SDK sends to E2B_SANDBOX_URL) or by a Host of the form <port>-<sandboxID>.<domain>.
//
// The surface, one http.Handler:
//
//   - Connect RPC services process.Process and filesystem.Filesystem (spec/*.proto, written
//     by Zygo to E2B's wire format; the SDK speaks Connect's JSON codec);
//   - GET /files (download) and POST /files (upload, multipart or a raw body);
//   - GET /health;
//   - the code interpreter's POST /execute (NDJSON results) and /contexts, which
//     @e2b/code-interpreter sends to port 49999 of the sandbox.
//
// Errors keep the SDK's error classes: Connect codes for the RPCs, {"code":N,"message":...}
// with the HTTP status for the REST routes, and a missing sandbox answered as E2B's proxy
// does (502, Connect's unavailable), which the SDK raises as its TimeoutError.
package envd

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/zygo-run/zygo/internal/e2b/envd/spec/filesystem/filesystemconnect"
	"github.com/zygo-run/zygo/internal/e2b/envd/spec/process/processconnect"
)

const (
	// HeaderSandboxID names the sandbox of an envd request.
	HeaderSandboxID = "E2b-Sandbox-Id"
	// headerSandboxPort names the port of the sandbox a request is for.
	headerSandboxPort = "E2b-Sandbox-Port"
	// headerKeepalive asks a server stream for keepalive events every N seconds.
	headerKeepalive = "Keepalive-Ping-Interval"

	// DefaultUser is the user a call runs as when the SDK names none: E2B's base template
	// user (the SDK itself sends it with envd versions before 0.4.0).
	DefaultUser = "user"

	// EnvdPort is the port envd listens on inside an E2B sandbox, and CodeInterpreterPort
	// the code interpreter's; they appear in Hosts of the form <port>-<id>.<domain>.
	EnvdPort            = 49983
	CodeInterpreterPort = 49999

	// maxSendBytes bounds one Connect message the server sends (a ListDir answer of many
	// entries is the largest).
	maxSendBytes = 32 << 20
	// maxProcessReadBytes bounds one message a client sends to process.Process: a Start
	// (command line and environment; Linux caps one argument at 128 KiB and all at 2 MiB)
	// or a chunk of stdin (SendInput, StreamInput).
	maxProcessReadBytes = 4 << 20
	// maxFilesystemReadBytes bounds one message a client sends to filesystem.Filesystem:
	// a path or two (PATH_MAX is 4 KiB) and a few flags.
	maxFilesystemReadBytes = 64 << 10
)

// Server is the envd API over a Sandboxes. It is safe for concurrent use. It owns the
// polling watchers (CreateWatcher) and their goroutines: Close ends them.
type Server struct {
	sb  Sandboxes
	log *slog.Logger
	mux *http.ServeMux

	// ctx is cancelled by Close; watchers run under it.
	ctx    context.Context
	cancel context.CancelFunc

	watchers *watchers
	streams  *streams

	// rpcErrors writes the errors of the Connect routes found before connect reads the
	// request (authenticated), in the request's protocol.
	rpcErrors *connect.ErrorWriter

	// code holds each sandbox's code interpreter state (*codeState), made on its first run
	// and dropped by Forget.
	code sync.Map // sandbox id -> *codeState
}

var _ http.Handler = (*Server)(nil)

// New returns the envd API over sb, logging to log. The caller routes to it the requests
// IsEnvdRequest accepts, and calls Close on shutdown.
func New(sb Sandboxes, log *slog.Logger) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{sb: sb, log: log, mux: http.NewServeMux(), ctx: ctx, cancel: cancel}
	s.watchers = newWatchers(ctx, log)
	s.streams = newStreams()
	opts := []connect.HandlerOption{
		connect.WithSendMaxBytes(maxSendBytes),
		connect.WithCodec(strictJSON{name: "json"}),
		connect.WithCodec(strictJSON{name: "json; charset=utf-8"}),
	}
	s.rpcErrors = connect.NewErrorWriter(opts...)
	procPath, procHandler := processconnect.NewProcessHandler(&processService{s: s},
		append(opts, connect.WithReadMaxBytes(maxProcessReadBytes))...)
	fsPath, fsHandler := filesystemconnect.NewFilesystemHandler(&filesystemService{s: s},
		append(opts, connect.WithReadMaxBytes(maxFilesystemReadBytes))...)
	s.mux.Handle(procPath, s.authenticated(procHandler, maxProcessReadBytes))
	s.mux.Handle(fsPath, s.authenticated(fsHandler, maxFilesystemReadBytes))
	s.mux.HandleFunc("GET /health", s.health)
	s.mux.HandleFunc("GET /files", s.download)
	s.mux.HandleFunc("POST /files", s.upload)
	s.mux.HandleFunc("POST /execute", s.execute)
	s.mux.HandleFunc("POST /contexts", s.createContext)
	s.mux.HandleFunc("GET /contexts", s.listContexts)
	s.mux.HandleFunc("DELETE /contexts/{context}", s.deleteContext)
	s.mux.HandleFunc("POST /contexts/{context}/restart", s.restartContext)
	s.mux.HandleFunc("/", s.notFound)
	return s
}

// Close ends the polling watchers. The Server still answers afterwards, without them.
func (s *Server) Close() {
	s.cancel()
	s.watchers.closeAll()
}

// Forget drops what the Server keeps of sandbox id (its polling watchers, its execution
// count); the caller calls it when the sandbox is removed. Idempotent.
func (s *Server) Forget(id string) {
	s.code.Delete(id)
	s.watchers.forget(id)
}

// ServeHTTP serves one envd request; the sandbox it names is read by each route
// (sandboxIDFrom), so that a missing one is answered in the route's own error shape.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if port := r.Header.Get(headerSandboxPort); port != "" && port != strconv.Itoa(EnvdPort) && port != strconv.Itoa(CodeInterpreterPort) {
		s.writeError(w, r, "", unsupportedf("header %s %q: Zygo serves a sandbox's envd (%d) and code interpreter (%d) ports only", headerSandboxPort, port, EnvdPort, CodeInterpreterPort))
		return
	}
	sent, ok := SandboxID(r)
	id := sent
	if res, can := s.sb.(IDResolver); ok && can {
		// What the Server keeps per sandbox (the code interpreter's state, watchers, stream
		// counts) is keyed by the sandbox's id, never by the name a caller sent: a later
		// sandbox of that name is another sandbox. A ref that names none stays as sent (the
		// route answers that it does not run). The token is checked against the resolved
		// sandbox; what is said to a caller not yet authenticated names the ref as sent, never
		// the id a name resolved to.
		if rid, err := res.ResolveID(r.Context(), sent); err == nil {
			id = rid
		}
	}
	ctx := context.WithValue(r.Context(), sandboxKey{}, sandboxRef{id: id, sent: sent, ok: ok})
	s.mux.ServeHTTP(w, r.WithContext(ctx))
}

type sandboxKey struct{}

type sandboxRef struct {
	id   string // the sandbox's id (IDResolver), else as sent
	sent string // as the request named it
	ok   bool
}

// sentRef is how the request named sandbox id (its id or a name), for what is said before the
// caller is authenticated.
func sentRef(ctx context.Context, id string) string {
	if ref, _ := ctx.Value(sandboxKey{}).(sandboxRef); ref.id == id && ref.sent != "" {
		return ref.sent
	}
	return id
}

// IsEnvdRequest reports whether r is addressed to the envd API rather than E2B's control
// API: it names a sandbox by header or by Host (SandboxID).
func IsEnvdRequest(r *http.Request) bool {
	_, ok := SandboxID(r)
	return ok || r.Header.Get(HeaderSandboxID) != ""
}

// SandboxID returns the sandbox r names: its E2b-Sandbox-Id header, or else the <id> of a
// Host "<port>-<id>.<domain>" whose port is EnvdPort or CodeInterpreterPort. ok is false
// when neither names a well-formed id.
func SandboxID(r *http.Request) (id string, ok bool) {
	if h := r.Header.Get(HeaderSandboxID); h != "" {
		return h, validSandboxID(h)
	}
	host := r.Host
	label, _, found := strings.Cut(host, ".")
	if !found {
		return "", false
	}
	port, id, found := strings.Cut(label, "-")
	if !found || (port != "49983" && port != "49999") || !validSandboxID(id) {
		return "", false
	}
	return id, true
}

// validSandboxID accepts what Zygo's sandbox ids and names are made of.
func validSandboxID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return false
		}
	}
	return true
}

// sandboxIDFrom returns the sandbox id ServeHTTP found, or an invalid-argument error
// saying how to name one.
func sandboxIDFrom(ctx context.Context) (string, error) {
	ref, _ := ctx.Value(sandboxKey{}).(sandboxRef)
	if !ref.ok {
		return "", invalidf("header %s: want the id of a sandbox (letters, digits, '-', '_', '.'; at most 128)", HeaderSandboxID)
	}
	return ref.id, nil
}

// healthPing bounds how long GET /health waits for the guest to answer a Stat of "/".
const healthPing = 2 * time.Second

// health answers 204 when the sandbox runs and its guest answers a Stat of "/" within
// healthPing, and 502 (E2B's proxy's answer for a sandbox that is gone) otherwise: the SDK's
// isRunning reads the status, so a frozen guest reads as not running. A request without the
// sandbox's access token (the SDK sends it) is answered 502 with the same message whether a
// sandbox of that id or name exists or not: health tells nothing to who holds no token.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	id, err := sandboxIDFrom(r.Context())
	if err != nil {
		s.writeError(w, r, "", err)
		return
	}
	if err := s.checkToken(r.Context(), id, r.Header); err != nil {
		s.writeError(w, r, "", &tagged{msg: fmt.Sprintf("sandbox %s is not running, or this request does not carry its access token (%s)",
			sentRef(r.Context(), id), headerAccessToken), tag: errNotRunning})
		return
	}
	if err := s.sb.CheckRunning(r.Context(), id); err != nil {
		s.writeError(w, r, id, notRunning(id, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), healthPing)
	defer cancel()
	pinged := make(chan error, 1) // buffered: a Stat that outlives ctx does not block
	go func() {
		_, err := s.sb.Stat(ctx, id, "/")
		pinged <- err
	}()
	select {
	case err = <-pinged:
	case <-ctx.Done():
		err = fmt.Errorf("the guest did not answer within %s", healthPing)
	}
	if err != nil {
		s.writeError(w, r, id, notRunning(id, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	s.writeError(w, r, "", notFoundf("%s %s: no such route of the envd API", r.Method, r.URL.Path))
}
