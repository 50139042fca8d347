package api

// The sandbox routes (docs/ARCHITECTURE.md has the table):
//
//	POST   /v1/sandboxes                       body: CreateSandboxBody → 201 the record
//	GET    /v1/sandboxes                       every record, oldest first
//	GET    /v1/sandboxes/{id}                  {id} is a sandbox id or name, everywhere
//	DELETE /v1/sandboxes/{id}                  204
//	POST   /v1/sandboxes/{id}/exec             body: ExecBody [+ streamed stdin] → NDJSON StreamEvents, last: exit
//	POST   /v1/sandboxes/{id}/run-code         body: CodeBody → NDJSON StreamEvents, last: result
//	PUT    /v1/sandboxes/{id}/files?path=&mode=    body: the content → 204
//	GET    /v1/sandboxes/{id}/files?path=      the content
//	GET    /v1/sandboxes/{id}/files/list?path= []guest.FileInfo, at most guest.MaxListEntries in name
//	                                           order; header Zygo-Entries-Total: the directory's count
//	POST   /v1/sandboxes/{id}/checkpoint       body: CheckpointBody → 201 the checkpoint
//	GET    /v1/sandboxes/{id}/checkpoints      the sandbox's checkpoints
//	POST   /v1/sandboxes/{id}/fork             body: ForkBody → ForkAnswer; with Accept:
//	                                           application/x-ndjson, ForkEvents (progress, then the answer)
//	POST   /v1/sandboxes/{id}/rollback         body: RollbackBody → the record
//	GET    /v1/sandboxes/{id}/generation       GenerationBody
//	GET    /v1/sandboxes/{id}/services         []guest.ServiceStatus, live from the guest
//	GET    /v1/checkpoints[?sandbox=ID]        every checkpoint, oldest first
//	GET    /v1/checkpoints/{id}                {id} is a checkpoint id or tag
//	DELETE /v1/checkpoints/{id}                204; 409 while a sandbox or checkpoint refers to it

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// Sandboxes is what the server needs from the sandbox manager (*sandbox.Manager). Every id
// argument is a sandbox id or name; checkpoint arguments are a checkpoint id or tag.
type Sandboxes interface {
	Create(ctx context.Context, opts sandbox.CreateOptions) (sandbox.SandboxRecord, error)
	Get(ctx context.Context, id string) (sandbox.SandboxRecord, error)
	List(ctx context.Context) ([]sandbox.SandboxRecord, error)
	Remove(ctx context.Context, id string) error
	Exec(ctx context.Context, id string, req guest.ExecRequest, stdout, stderr io.Writer) (guest.ExitStatus, error)
	RunCode(ctx context.Context, id string, req guest.CodeRequest, stdout, stderr io.Writer) (guest.CodeResult, error)
	PutFile(ctx context.Context, id, path string, perm uint32, r io.Reader) error
	GetFile(ctx context.Context, id, path string, w io.Writer) error
	ListFiles(ctx context.Context, id, path string) (guest.Listing, error)
	Checkpoint(ctx context.Context, id, tag string) (sandbox.CheckpointRecord, error)
	Checkpoints(ctx context.Context, sandboxID string) ([]sandbox.CheckpointRecord, error)
	GetCheckpoint(ctx context.Context, checkpoint string) (sandbox.CheckpointRecord, error)
	RemoveCheckpoint(ctx context.Context, checkpoint string) error
	Fork(ctx context.Context, id string, opts sandbox.ForkOptions) (sandbox.ForkResult, error)
	Rollback(ctx context.Context, id, checkpoint string) (sandbox.SandboxRecord, error)
	Services(ctx context.Context, id string) ([]guest.ServiceStatus, error)
}

var _ Sandboxes = (*sandbox.Manager)(nil)

// Limits of the sandbox routes.
const (
	// MaxSandboxJSONBytes bounds a JSON request body (an exec's stdin travels in it, unless
	// it is streamed after it: see ExecBody).
	MaxSandboxJSONBytes = 16 << 20
	// MaxFileBytes bounds one file upload. A sandbox's writes live in memory.
	MaxFileBytes = 256 << 20
)

// sandboxAPI is the sandbox side of the server.
type sandboxAPI struct {
	mgr Sandboxes
	// unavailable says why mgr is nil: every sandbox route answers 503 with it.
	unavailable error
}

// WithSandboxes gives the server its sandbox manager and returns the server. sb nil means
// sandboxes are unavailable on this daemon; every sandbox route then answers 503 with
// unavailable's message (which should say how to fix it).
func (s *Server) WithSandboxes(sb Sandboxes, unavailable error) *Server {
	s.sandboxes = sandboxAPI{mgr: sb, unavailable: unavailable}
	return s
}

type sandboxHandler func(w http.ResponseWriter, r *http.Request, sb Sandboxes)

// sandboxRoutes registers the sandbox routes on mux; Handler calls it.
func (s *Server) sandboxRoutes(mux *http.ServeMux) {
	for pattern, h := range map[string]sandboxHandler{
		"POST /v1/sandboxes":                 s.createSandbox,
		"GET /v1/sandboxes":                  s.listSandboxes,
		"GET /v1/sandboxes/{id}":             s.getSandbox,
		"DELETE /v1/sandboxes/{id}":          s.removeSandbox,
		"POST /v1/sandboxes/{id}/exec":       s.execSandbox,
		"POST /v1/sandboxes/{id}/run-code":   s.runCode,
		"PUT /v1/sandboxes/{id}/files":       s.putFile,
		"GET /v1/sandboxes/{id}/files":       s.getFile,
		"GET /v1/sandboxes/{id}/files/list":  s.listFiles,
		"POST /v1/sandboxes/{id}/checkpoint": s.checkpoint,
		"GET /v1/sandboxes/{id}/checkpoints": s.sandboxCheckpoints,
		"POST /v1/sandboxes/{id}/fork":       s.fork,
		"POST /v1/sandboxes/{id}/rollback":   s.rollback,
		"GET /v1/sandboxes/{id}/generation":  s.generation,
		"GET /v1/sandboxes/{id}/services":    s.services,
		"GET /v1/checkpoints":                s.listCheckpoints,
		"GET /v1/checkpoints/{id}":           s.getCheckpoint,
		"DELETE /v1/checkpoints/{id}":        s.removeCheckpoint,
	} {
		mux.HandleFunc(pattern, s.needSandboxes(h))
	}
}

// needSandboxes answers 503 when sandboxes are unavailable, else calls h.
func (s *Server) needSandboxes(h sandboxHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sb := s.sandboxes.mgr
		if sb == nil {
			msg := "sandboxes are not enabled on this daemon"
			if s.sandboxes.unavailable != nil {
				msg = s.sandboxes.unavailable.Error()
			}
			writeError(w, http.StatusServiceUnavailable, ErrorBody{Code: "unavailable", Message: msg})
			return
		}
		h(w, r, sb)
	}
}

// codeStatus is the HTTP status of each error code, as Server.fail answers them.
var codeStatus = map[string]int{
	"not_found": http.StatusNotFound, "bad_request": http.StatusBadRequest,
	"too_large": http.StatusRequestEntityTooLarge, "exists": http.StatusConflict,
	"failed_precondition": http.StatusConflict, "unavailable": http.StatusServiceUnavailable,
	"deadline_exceeded": http.StatusGatewayTimeout, "permission_denied": http.StatusForbidden, "cancelled": 499, "internal": http.StatusInternalServerError,
}

// statusOfCode returns the HTTP status of an error code (500 for an unknown one).
func statusOfCode(code string) int {
	if st, ok := codeStatus[code]; ok {
		return st
	}
	return http.StatusInternalServerError
}

// errorCode maps err's errdefs category to an error code and an HTTP status: Server.fail
// uses it, and so do errors reported inside a stream or a body of their own.
func (s *Server) errorCode(err error) (string, int) {
	code := "internal"
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		code = "not_found"
	case errors.Is(err, errdefs.ErrInvalidArgument):
		code = "bad_request"
	case errors.Is(err, errdefs.ErrTooLarge):
		code = "too_large"
	case errors.Is(err, errdefs.ErrPermissionDenied):
		code = "permission_denied"
	case errors.Is(err, errdefs.ErrExists):
		code = "exists"
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		code = "failed_precondition"
	case errors.Is(err, errdefs.ErrUnavailable):
		code = "unavailable"
	case errors.Is(err, errdefs.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		code = "deadline_exceeded"
	case errors.Is(err, context.Canceled):
		code = "cancelled"
	default:
		s.log.Error("api", "err", err)
	}
	return code, statusOfCode(code)
}

func (s *Server) errorBody(err error) *ErrorBody {
	code, _ := s.errorCode(err)
	return &ErrorBody{Code: code, Message: err.Error()}
}

// decodeBody reads a JSON body into v; an empty body leaves v as it is. Unknown fields are
// refused, so a misspelt option is an error rather than ignored. On failure it has answered.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxSandboxJSONBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, ErrorBody{Code: "too_large",
				Message: fmt.Sprintf("request body exceeds %d MiB", MaxSandboxJSONBytes>>20)})
			return false
		}
		writeError(w, http.StatusBadRequest, ErrorBody{Code: "bad_request", Message: "decoding request body: " + err.Error()})
		return false
	}
	if dec.More() {
		badRequest(w, "decoding request body: data after the JSON object (send exactly one)")
		return false
	}
	return true
}

func badRequest(w http.ResponseWriter, msg string) {
	writeError(w, http.StatusBadRequest, ErrorBody{Code: "bad_request", Message: msg})
}

// CreateSandboxBody is the body of POST /v1/sandboxes: name, rootfs_dir, services, env,
// secrets, memory_mib, pids, cpus (all optional). Secrets are names of the daemon's secret
// store; an unknown one is a 400 naming it. The limits (sandbox.Limits): memory_mib in MiB
// (default 2048, at least 64, at most the host's memory), pids (default 4096, 32 to 2^22),
// cpus in cores, fractions allowed (default 0: no quota; 0.01 to the host's CPU count); a
// value out of bounds is a 400 naming the field and the bounds. The record answered carries
// the limits in force in its options.
type CreateSandboxBody = sandbox.CreateOptions

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	var body CreateSandboxBody
	if !decodeBody(w, r, &body) {
		return
	}
	rec, err := sb.Create(r.Context(), body)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, rec)
}

// sandboxSecretUsers returns the sandboxes ("sandbox NAME") and checkpoints ("checkpoint ID")
// that name the secret; none when sandboxes are unavailable.
func (s *Server) sandboxSecretUsers(ctx context.Context, name string) ([]string, error) {
	sb := s.sandboxes.mgr
	if sb == nil {
		return nil, nil
	}
	var users []string
	recs, err := sb.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if slices.Contains(r.Options.Secrets, name) {
			users = append(users, "sandbox "+r.Name)
		}
	}
	cps, err := sb.Checkpoints(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, c := range cps {
		if slices.Contains(c.Options.Secrets, name) {
			u := "checkpoint " + c.ID
			if c.Tag != "" {
				u += " (" + c.Tag + ")"
			}
			users = append(users, u)
		}
	}
	return users, nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	recs, err := sb.List(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	if recs == nil {
		recs = []sandbox.SandboxRecord{}
	}
	writeJSON(w, http.StatusOK, recs)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	rec, err := sb.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

func (s *Server) removeSandbox(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	if err := sb.Remove(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// CodeBody is the body of POST /v1/sandboxes/{id}/run-code.
type CodeBody struct {
	Code      string `json:"code"`
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
}

// StreamEvent is one line of the NDJSON answer of exec and run-code: output chunks as they
// come, then exactly one of Exit (exec), Result (run-code) or Error (the call failed after the
// stream began; before that, the answer is an ordinary error with its status).
type StreamEvent struct {
	Stream string            `json:"stream,omitempty"` // "stdout" or "stderr"
	Data   []byte            `json:"data,omitempty"`   // base64 in JSON
	Exit   *guest.ExitStatus `json:"exit,omitempty"`
	Result *guest.CodeResult `json:"result,omitempty"`
	Error  *ErrorBody        `json:"error,omitempty"`
}

// eventStream writes StreamEvents. The status line goes out with the first event, so an error
// that comes before any output still gets its own status.
type eventStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	mu      sync.Mutex // guards started and the writes
	started bool
}

func newEventStream(w http.ResponseWriter) *eventStream {
	return &eventStream{w: w, rc: http.NewResponseController(w)}
}

func (st *eventStream) send(ev StreamEvent) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.started {
		st.w.Header().Set("Content-Type", "application/x-ndjson")
		st.w.WriteHeader(http.StatusOK)
		st.started = true
	}
	_ = json.NewEncoder(st.w).Encode(ev)
	_ = st.rc.Flush()
}

func (st *eventStream) isStarted() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.started
}

// writer returns an io.Writer that sends what it is given as events of stream name.
func (st *eventStream) writer(name string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		st.send(StreamEvent{Stream: name, Data: append([]byte(nil), p...)})
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// finish ends the stream with err: as an error event once the stream has begun, else as an
// ordinary error answer.
func (s *Server) finishStream(w http.ResponseWriter, st *eventStream, err error) {
	if st.isStarted() {
		st.send(StreamEvent{Error: s.errorBody(err)})
		return
	}
	s.fail(w, err)
}

func (s *Server) runCode(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	var body CodeBody
	if !decodeBody(w, r, &body) {
		return
	}
	timeout, ok := timeoutOf(w, body.TimeoutMs)
	if !ok {
		return
	}
	st := newEventStream(w)
	req := guest.CodeRequest{Code: body.Code, Timeout: timeout}
	res, err := sb.RunCode(r.Context(), r.PathValue("id"), req, st.writer("stdout"), st.writer("stderr"))
	if err != nil {
		s.finishStream(w, st, err)
		return
	}
	st.send(StreamEvent{Result: &res})
}

// maxTimeoutMs is the longest timeout_ms a time.Duration holds.
const maxTimeoutMs = math.MaxInt64 / int64(time.Millisecond)

// timeoutOf returns a timeout_ms as a Duration (0: none); a negative one or one past
// maxTimeoutMs is a 400 naming the field, and on failure it has answered.
func timeoutOf(w http.ResponseWriter, ms int64) (time.Duration, bool) {
	if ms < 0 || ms > maxTimeoutMs {
		badRequest(w, fmt.Sprintf("timeout_ms: %d: must be from 0 (none) to %d", ms, maxTimeoutMs))
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// filePath returns the ?path= of a files route, checked by sandbox.ValidatePath (absolute,
// no NUL, within PATH_MAX and NAME_MAX); on failure it has answered 400.
func filePath(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := r.URL.Query().Get("path")
	if err := sandbox.ValidatePath("path", p); err != nil {
		badRequest(w, err.Error()+" (?path=/...)")
		return "", false
	}
	return p, true
}

// limitedBody is a request body that remembers whether it hit its limit.
type limitedBody struct {
	r       io.Reader
	tooLong bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		b.tooLong = true
	}
	return n, err
}

func (s *Server) putFile(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	p, ok := filePath(w, r)
	if !ok {
		return
	}
	mode := uint64(0o644)
	if m := r.URL.Query().Get("mode"); m != "" {
		var err error
		if mode, err = strconv.ParseUint(m, 8, 32); err != nil || mode > 0o7777 {
			badRequest(w, "mode: must be octal permission bits, e.g. 644 or 0755")
			return
		}
	}
	body := &limitedBody{r: http.MaxBytesReader(w, r.Body, MaxFileBytes)}
	if err := sb.PutFile(r.Context(), r.PathValue("id"), p, uint32(mode), body); err != nil {
		if body.tooLong {
			writeError(w, http.StatusRequestEntityTooLarge, ErrorBody{Code: "too_large",
				Message: fmt.Sprintf("file exceeds %d MiB", MaxFileBytes>>20)})
			return
		}
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// lazyBody writes a 200 octet-stream answer on the first byte, so an error before any byte
// still gets its own status.
type lazyBody struct {
	w       http.ResponseWriter
	started bool
}

func (b *lazyBody) Write(p []byte) (int, error) {
	if !b.started {
		b.w.Header().Set("Content-Type", "application/octet-stream")
		b.w.WriteHeader(http.StatusOK)
		b.started = true
	}
	return b.w.Write(p)
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	p, ok := filePath(w, r)
	if !ok {
		return
	}
	body := &lazyBody{w: w}
	err := sb.GetFile(r.Context(), r.PathValue("id"), p, body)
	switch {
	case err != nil && !body.started:
		s.fail(w, err)
	case err != nil: // half sent: all we can do is cut the answer short
		s.log.Warn("sending file", "path", p, "err", err)
		panic(http.ErrAbortHandler)
	case !body.started: // an empty file
		body.Write(nil)
	}
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	p, ok := filePath(w, r)
	if !ok {
		return
	}
	ls, err := sb.ListFiles(r.Context(), r.PathValue("id"), p)
	if err != nil {
		s.fail(w, err)
		return
	}
	if ls.Entries == nil {
		ls.Entries = []guest.FileInfo{}
	}
	w.Header().Set(EntriesTotalHeader, strconv.Itoa(max(ls.Total, len(ls.Entries))))
	writeJSON(w, http.StatusOK, ls.Entries)
}

// CheckpointBody is the body of POST /v1/sandboxes/{id}/checkpoint.
type CheckpointBody struct {
	Tag string `json:"tag,omitempty"`
}

func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	var body CheckpointBody
	if !decodeBody(w, r, &body) {
		return
	}
	cp, err := sb.Checkpoint(r.Context(), r.PathValue("id"), body.Tag)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, cp)
}

func (s *Server) writeCheckpoints(w http.ResponseWriter, r *http.Request, sb Sandboxes, sandboxID string) {
	cps, err := sb.Checkpoints(r.Context(), sandboxID)
	if err != nil {
		s.fail(w, err)
		return
	}
	if cps == nil {
		cps = []sandbox.CheckpointRecord{}
	}
	writeJSON(w, http.StatusOK, cps)
}

func (s *Server) sandboxCheckpoints(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	s.writeCheckpoints(w, r, sb, r.PathValue("id"))
}

func (s *Server) listCheckpoints(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	s.writeCheckpoints(w, r, sb, r.URL.Query().Get("sandbox"))
}

func (s *Server) getCheckpoint(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	cp, err := sb.GetCheckpoint(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, cp)
}

func (s *Server) removeCheckpoint(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	if err := sb.RemoveCheckpoint(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ForkBody is the body of POST /v1/sandboxes/{id}/fork.
type ForkBody struct {
	N int `json:"n"` // children, 1..the daemon's bound (sandbox.MaxForkN)
	// From is the checkpoint (id or tag) to restore; empty: checkpoint the sandbox now.
	From string `json:"from,omitempty"`
}

// ForkChildBody is one child's outcome: its record, or why it failed (it was destroyed).
type ForkChildBody struct {
	Index   int                    `json:"index"`
	Sandbox *sandbox.SandboxRecord `json:"sandbox,omitempty"`
	Error   *ErrorBody             `json:"error,omitempty"`
}

// ForkAnswer is the answer of a fork: 200 when at least one child runs (partial success is
// normal, and every failure is listed); when every child failed, the status of their errors'
// category with Error set, and the children still listed.
type ForkAnswer struct {
	Error      *ErrorBody               `json:"error,omitempty"`
	Checkpoint sandbox.CheckpointRecord `json:"checkpoint"`
	Children   []ForkChildBody          `json:"children"`
	Succeeded  int                      `json:"succeeded"`
	Failed     int                      `json:"failed"`
}

// ForkEvent is one line of a fork streamed as NDJSON (the request's Accept header is
// application/x-ndjson): Progress lines while the children are made, then one line with the
// Answer and the HTTP status the plain call would have had. A fork refused before any child
// is attempted (bad n, unknown sandbox, a failed checkpoint) is a plain error answer instead.
type ForkEvent struct {
	Progress *sandbox.ForkProgress `json:"progress,omitempty"`
	Answer   *ForkAnswer           `json:"answer,omitempty"`
	Status   int                   `json:"status,omitempty"` // with Answer
}

// EntriesTotalHeader carries a listing's total number of entries; the body holds at most
// guest.MaxListEntries of them.
const EntriesTotalHeader = "Zygo-Entries-Total"

// ForkStreamType is the media type of a streamed fork.
const ForkStreamType = "application/x-ndjson"

func (s *Server) fork(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	var body ForkBody
	if !decodeBody(w, r, &body) {
		return
	}
	opts := sandbox.ForkOptions{N: body.N, From: body.From}
	var stream *json.Encoder // set once the 200 is sent: after the first progress event
	if r.Header.Get("Accept") == ForkStreamType {
		rc := http.NewResponseController(w)
		opts.Progress = func(p sandbox.ForkProgress) { // serialized by Fork
			if stream == nil {
				w.Header().Set("Content-Type", ForkStreamType)
				w.WriteHeader(http.StatusOK)
				stream = json.NewEncoder(w)
			}
			_ = stream.Encode(ForkEvent{Progress: &p})
			_ = rc.Flush()
		}
	}
	res, err := sb.Fork(r.Context(), r.PathValue("id"), opts)
	if err != nil && len(res.Children) == 0 && stream == nil { // nothing was attempted: bad n, unknown id, the checkpoint failed
		s.fail(w, err)
		return
	}
	ans := ForkAnswer{Checkpoint: res.Checkpoint, Children: make([]ForkChildBody, 0, len(res.Children))}
	for i, c := range res.Children {
		cb := ForkChildBody{Index: i}
		if c.Err != nil {
			cb.Error = s.errorBody(c.Err)
			ans.Failed++
		} else {
			rec := c.Sandbox
			cb.Sandbox = &rec
			ans.Succeeded++
		}
		ans.Children = append(ans.Children, cb)
	}
	status := http.StatusOK
	if err != nil {
		ans.Error = s.errorBody(err)
		_, status = s.errorCode(err)
	}
	if stream != nil {
		_ = stream.Encode(ForkEvent{Answer: &ans, Status: status})
		return
	}
	writeJSON(w, status, ans)
}

// RollbackBody is the body of POST /v1/sandboxes/{id}/rollback.
type RollbackBody struct {
	To string `json:"to"` // checkpoint id or tag
}

func (s *Server) rollback(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	var body RollbackBody
	if !decodeBody(w, r, &body) {
		return
	}
	if body.To == "" {
		badRequest(w, "to: rollback needs the checkpoint to go back to: {\"to\": \"cp-...\"}")
		return
	}
	rec, err := sb.Rollback(r.Context(), r.PathValue("id"), body.To)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// GenerationBody is the answer of GET /v1/sandboxes/{id}/generation.
type GenerationBody struct {
	SandboxID  string `json:"sandbox_id"`
	Generation string `json:"generation"` // 128 bits, 32 hex digits; new on every fork and rollback
}

func (s *Server) generation(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	rec, err := sb.Get(r.Context(), r.PathValue("id"))
	if err == nil && rec.State != sandbox.Running {
		// Before its reseal is acknowledged a copy has no generation of its own to show.
		err = fmt.Errorf("sandbox %s is %s: its generation is issued when it runs: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, GenerationBody{SandboxID: rec.ID, Generation: rec.Generation})
}

func (s *Server) services(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	st, err := sb.Services(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	if st == nil {
		st = []guest.ServiceStatus{}
	}
	writeJSON(w, http.StatusOK, st)
}
