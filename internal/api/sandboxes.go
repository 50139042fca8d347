package api

// The sandbox routes (routes.go has the table).

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
	"strings"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/sdk/go/wire"
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
	Port(ctx context.Context, id string, port int) (string, error)
	Unpublish(ctx context.Context, id string, port int) error
	Pause(ctx context.Context, id string) (sandbox.SandboxRecord, error)
	Resume(ctx context.Context, id string, timeout time.Duration) (sandbox.SandboxRecord, error)
	SetTimeout(ctx context.Context, id string, timeout time.Duration, onTimeout string) (sandbox.SandboxRecord, error)
	Restore(ctx context.Context, checkpoint string, opts sandbox.RestoreOptions) (sandbox.SandboxRecord, error)
	Templates() []sandbox.Template
	// ExportCheckpoint and ImportCheckpoint move an image between daemons (checkpoint_images.go).
	ExportCheckpoint(ctx context.Context, checkpoint string) (*sandbox.ImageExport, error)
	ImportCheckpoint(ctx context.Context, r io.Reader, opts sandbox.ImportOptions) (sandbox.CheckpointRecord, error)
}

var _ Sandboxes = (*sandbox.Manager)(nil)

// Limits of the sandbox routes (the contract's).
const (
	MaxSandboxJSONBytes = wire.MaxSandboxJSONBytes
	MaxFileBytes        = wire.MaxFileBytes
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

// needSandboxes answers 503 when sandboxes are unavailable, else calls h.
func (s *Server) needSandboxes(h sandboxHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sb := s.sandboxes.mgr
		if sb == nil {
			msg := "sandboxes are not enabled on this daemon"
			if s.sandboxes.unavailable != nil {
				msg = userMessage(s.sandboxes.unavailable)
			}
			writeError(w, wire.ErrorBody{Code: wire.CodeUnavailable, Message: msg})
			return
		}
		h(w, r, sb)
	}
}

// decodeBody reads a JSON body into v; an empty body leaves v as it is. Unknown fields are
// refused, so a misspelt option is an error rather than ignored. On failure it has answered.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxSandboxJSONBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, wire.ErrorBody{Code: wire.CodeTooLarge,
				Message: fmt.Sprintf("request body exceeds %d MiB", MaxSandboxJSONBytes>>20)})
			return false
		}
		badRequest(w, "decoding request body: "+err.Error())
		return false
	}
	if dec.More() {
		badRequest(w, "decoding request body: data after the JSON object (send exactly one)")
		return false
	}
	return true
}

// noBody refuses a body on a route that takes none: an empty body or an empty JSON object
// passes; any field is a 400 naming it (a caller who sends {"ttl":5} learns it was not
// honoured) and anything else a 400 about the request body. On failure it has answered.
func noBody(w http.ResponseWriter, r *http.Request) bool {
	return decodeBody(w, r, &struct{}{})
}

// onlyQuery refuses a query parameter outside allowed with a 400 naming it, so a misspelt
// option is an error rather than ignored. On failure it has answered.
func onlyQuery(w http.ResponseWriter, r *http.Request, allowed ...string) bool {
	keys := make([]string, 0, len(r.URL.Query()))
	for k := range r.URL.Query() {
		if !slices.Contains(allowed, k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return true
	}
	slices.Sort(keys)
	badRequest(w, fmt.Sprintf("%s: unknown query parameter (this route takes %s)", keys[0], strings.Join(allowed, ", ")))
	return false
}

func badRequest(w http.ResponseWriter, msg string) {
	writeError(w, wire.ErrorBody{Code: wire.CodeBadRequest, Message: msg})
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	var body wire.CreateSandboxBody
	if !decodeBody(w, r, &body) {
		return
	}
	rec, err := sb.Create(r.Context(), createOptionsFrom(body))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, sandboxOf(rec))
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

// listSandboxes answers a page of the sandboxes, oldest first (key: creation time, then id).
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	q, ok := pageQueryOf(w, r)
	if !ok {
		return
	}
	recs, err := sb.List(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	writePage(w, q, sandboxesOf(recs), func(s wire.Sandbox) string { return timeKey(s.CreatedAt, s.ID) })
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	rec, err := sb.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sandboxOf(rec))
}

func (s *Server) removeSandbox(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	if err := sb.Remove(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
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

func (st *eventStream) send(ev wire.StreamEvent) {
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
		st.send(wire.StreamEvent{Stream: name, Data: append([]byte(nil), p...)})
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// finish ends the stream with err: as an error event once the stream has begun, else as an
// ordinary error answer.
func (s *Server) finishStream(w http.ResponseWriter, st *eventStream, err error) {
	if st.isStarted() {
		st.send(wire.StreamEvent{Error: s.errorBody(err)})
		return
	}
	s.fail(w, err)
}

func (s *Server) runCode(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	var body wire.CodeBody
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
	st.send(wire.StreamEvent{Result: codeResultOf(res)})
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
// no NUL, within PATH_MAX and NAME_MAX); on failure it has answered 400 naming the field
// "path" (no query syntax: the CLI shows the message as it is).
func filePath(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := r.URL.Query().Get("path")
	if err := sandbox.ValidatePath("path", p); err != nil {
		badRequest(w, userMessage(err))
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
			writeError(w, wire.ErrorBody{Code: wire.CodeTooLarge,
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
	w.Header().Set(wire.EntriesTotalHeader, strconv.Itoa(max(ls.Total, len(ls.Entries))))
	writeJSON(w, http.StatusOK, fileInfosOf(ls.Entries))
}

func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	var body wire.CheckpointBody
	if !decodeBody(w, r, &body) {
		return
	}
	cp, err := sb.Checkpoint(r.Context(), r.PathValue("id"), body.Tag)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, checkpointOf(cp))
}

// writeCheckpoints answers a page of the checkpoints of sandboxID (all when ""), oldest first
// (key: creation time, then id).
func (s *Server) writeCheckpoints(w http.ResponseWriter, r *http.Request, sb Sandboxes, sandboxID string) {
	q, ok := pageQueryOf(w, r)
	if !ok {
		return
	}
	cps, err := sb.Checkpoints(r.Context(), sandboxID)
	if err != nil {
		s.fail(w, err)
		return
	}
	writePage(w, q, checkpointsOf(cps), func(c wire.Checkpoint) string { return timeKey(c.CreatedAt, c.ID) })
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
	writeJSON(w, http.StatusOK, checkpointOf(cp))
}

func (s *Server) removeCheckpoint(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	if err := sb.RemoveCheckpoint(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	var body wire.ForkBody
	if !decodeBody(w, r, &body) {
		return
	}
	if body.N == 0 && len(body.Names) > 0 { // n absent: one child per name (a given n must equal len(names))
		body.N = len(body.Names)
	}
	opts := sandbox.ForkOptions{N: body.N, From: body.From, Names: body.Names}
	var stream *json.Encoder // set once the 200 is sent: after the first progress event
	if r.Header.Get("Accept") == wire.ForkStreamType {
		rc := http.NewResponseController(w)
		opts.Progress = func(p sandbox.ForkProgress) { // serialized by Fork
			if stream == nil {
				w.Header().Set("Content-Type", wire.ForkStreamType)
				w.WriteHeader(http.StatusOK)
				stream = json.NewEncoder(w)
			}
			_ = stream.Encode(wire.ForkEvent{Progress: forkProgressOf(p)})
			_ = rc.Flush()
		}
	}
	res, err := sb.Fork(r.Context(), r.PathValue("id"), opts)
	if err != nil && len(res.Children) == 0 && stream == nil { // nothing was attempted: bad n, unknown id, the checkpoint failed
		s.fail(w, err)
		return
	}
	ans := wire.ForkAnswer{Checkpoint: checkpointOf(res.Checkpoint), Children: make([]wire.ForkChild, 0, len(res.Children))}
	for i, c := range res.Children {
		cb := wire.ForkChild{Index: i}
		if c.Err != nil {
			cb.Error = s.errorBody(c.Err)
			ans.Failed++
		} else {
			rec := sandboxOf(c.Sandbox)
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
		_ = stream.Encode(wire.ForkEvent{Answer: &ans, Status: status})
		return
	}
	writeJSON(w, status, ans)
}

func (s *Server) rollback(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	var body wire.RollbackBody
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
	writeJSON(w, http.StatusOK, sandboxOf(rec))
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
	writeJSON(w, http.StatusOK, wire.GenerationBody{SandboxID: rec.ID, Generation: rec.Generation})
}

// portOf is the request's {port}, canonical ("+80", "080" are not) and 1..65535.
func portOf(r *http.Request) (int, error) {
	raw := r.PathValue("port")
	port, err := strconv.Atoi(raw)
	if err != nil || raw != strconv.Itoa(port) || port < 1 || port > 65535 {
		return 0, fmt.Errorf("port %.20q: want a number from 1 to 65535: %w", raw, errdefs.ErrInvalidArgument)
	}
	return port, nil
}

// unpublish closes a published port: 204.
func (s *Server) unpublish(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	port, err := portOf(r)
	if err == nil {
		err = sb.Unpublish(r.Context(), r.PathValue("id"), port)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) port(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	if !noBody(w, r) {
		return
	}
	port, err := portOf(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	addr, err := sb.Port(r.Context(), r.PathValue("id"), port)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.PortBody{Port: port, Address: addr, URL: "http://" + addr + "/"})
}

func (s *Server) services(w http.ResponseWriter, r *http.Request, sb Sandboxes) {
	st, err := sb.Services(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, serviceStatusesOf(st))
}
