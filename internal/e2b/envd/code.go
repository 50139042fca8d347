package envd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
)

const (
	// maxCodeBodyBytes bounds the JSON body of /execute and /contexts.
	maxCodeBodyBytes = 8 << 20
	// defaultContext is the one code context Zygo has: the sandbox's persistent interpreter.
	defaultContext = "default"
	// defaultCwd is the directory the SDK is told a context starts in, as E2B's.
	defaultCwd = "/home/" + DefaultUser
)

// codeState is the code interpreter's state of one sandbox, beside the interpreter itself.
type codeState struct {
	// turn is held by the run in progress (a semaphore that a waiting request can give up
	// on): a run with env_vars sets and restores them around its code.
	turn chan struct{}

	mu    sync.Mutex
	count int // guarded by mu; runs so far, the SDK's executionCount
}

func (s *Server) codeStateOf(id string) *codeState {
	v, _ := s.code.LoadOrStore(id, &codeState{turn: make(chan struct{}, 1)})
	return v.(*codeState)
}

// executeRequest is the body of POST /execute (@e2b/code-interpreter's runCode).
type executeRequest struct {
	Code      string            `json:"code"`
	ContextID *string           `json:"context_id"`
	Language  *string           `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// contextRequest is the body of POST /contexts.
type contextRequest struct {
	Language *string `json:"language"`
	Cwd      *string `json:"cwd"`
}

// codeContext is a code context as the SDK reads it.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// decodeBody decodes a JSON body into v: unknown fields and wrong types are bad input
// naming the field.
func decodeBody(r *http.Request, w http.ResponseWriter, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCodeBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &te):
			return invalidf("body: field %q is a JSON %s: want %s", te.Field, te.Value, te.Type)
		case errors.As(err, &mbe):
			return fmt.Errorf("body is over %d bytes: %w", mbe.Limit, errdefs.ErrTooLarge)
		}
		return invalidf("body: %v", err)
	}
	if dec.More() {
		return invalidf("body: more than one JSON value")
	}
	return nil
}

// checkLanguage accepts Python, the one language of Zygo's interpreter.
func checkLanguage(lang *string) error {
	if lang == nil {
		return nil
	}
	switch strings.ToLower(*lang) {
	case "", "python", "python3":
		return nil
	}
	return invalidf("language %q: Zygo's code interpreter runs Python only", *lang)
}

// createContext answers POST /contexts: Zygo has one context per sandbox, its persistent
// interpreter, and returns it.
func (s *Server) createContext(w http.ResponseWriter, r *http.Request) {
	id, err := s.codeCall(r)
	if err != nil {
		s.writeError(w, r, id, err)
		return
	}
	var req contextRequest
	if err := decodeBody(r, w, &req); err != nil {
		s.writeError(w, r, "", err)
		return
	}
	if err := checkLanguage(req.Language); err != nil {
		s.writeError(w, r, "", err)
		return
	}
	cwd := defaultCwd
	if req.Cwd != nil && *req.Cwd != "" && *req.Cwd != cwd {
		s.writeError(w, r, "", unsupportedf("cwd %q: Zygo's one code context starts in %s; chdir in the code instead", *req.Cwd, cwd))
		return
	}
	writeJSON(w, http.StatusOK, codeContext{ID: defaultContext, Language: "python", Cwd: cwd})
}

// listContexts answers GET /contexts: the one context.
func (s *Server) listContexts(w http.ResponseWriter, r *http.Request) {
	id, err := s.codeCall(r)
	if err != nil {
		s.writeError(w, r, id, err)
		return
	}
	writeJSON(w, http.StatusOK, []codeContext{{ID: defaultContext, Language: "python", Cwd: defaultCwd}})
}

// codeCall is what each code interpreter route starts with: the sandbox id, and its token
// checked. @e2b/code-interpreter sends the envd token (X-Access-Token) with runCode only,
// and E2B-Traffic-Access-Token (the create answer's trafficAccessToken) with every call:
// either is accepted.
func (s *Server) codeCall(r *http.Request) (string, error) {
	id, err := sandboxIDFrom(r.Context())
	if err != nil {
		return "", err
	}
	h := r.Header
	if t := h.Get(headerTrafficToken); t != "" && h.Get(headerAccessToken) == "" {
		h = http.Header{}
		h.Set(headerAccessToken, t)
	}
	return id, s.checkToken(r.Context(), id, h)
}

// headerTrafficToken carries E2B's traffic access token to a sandbox's ports.
const headerTrafficToken = "E2b-Traffic-Access-Token"

// deleteContext answers DELETE /contexts/{id}: the one context cannot be removed.
func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request) {
	id, err := s.codeCall(r)
	if err != nil {
		s.writeError(w, r, id, err)
		return
	}
	if c := r.PathValue("context"); c != defaultContext {
		s.writeError(w, r, "", notFoundf("code context %q (Zygo has one: %q)", c, defaultContext))
		return
	}
	s.writeError(w, r, "", unsupportedf("code context %q is the sandbox's persistent interpreter: restart it instead of removing it", defaultContext))
}

// restartContext answers POST /contexts/{id}/restart: the interpreter exits, and the next
// run starts a fresh one (its variables are gone).
func (s *Server) restartContext(w http.ResponseWriter, r *http.Request) {
	id, err := s.codeCall(r)
	if err != nil {
		s.writeError(w, r, id, err)
		return
	}
	if c := r.PathValue("context"); c != defaultContext {
		s.writeError(w, r, "", notFoundf("code context %q (Zygo has one: %q)", c, defaultContext))
		return
	}
	st := s.codeStateOf(id)
	select {
	case st.turn <- struct{}{}:
		defer func() { <-st.turn }()
	case <-r.Context().Done():
		s.writeError(w, r, id, r.Context().Err())
		return
	}
	// The interpreter dies under the call: the result says so (Restarted), not an error.
	if _, err := s.sb.RunCode(r.Context(), id, guest.CodeRequest{Code: "import os\nos._exit(0)\n"}, io.Discard, io.Discard); err != nil {
		s.writeError(w, r, id, fmt.Errorf("restarting the interpreter: %w", err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// execute answers POST /execute: it runs the code in the sandbox's persistent Python
// interpreter and streams NDJSON lines as @e2b/code-interpreter parses them: "stdout" and
// "stderr" as output comes, then a "result" (the last expression's repr, as the main
// result) or an "error" (name, value and traceback of the exception), then
// "number_of_executions" and "end_of_execution". Figures matplotlib holds open after the
// code are sent as PNG results (not main), as a notebook shows them. State is kept between
// calls; env_vars are set for the call only. A failure before any line is an HTTP error
// (502 for a sandbox that does not run); one after is an "error" line named SandboxError.
func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	id, err := s.codeCall(r)
	if err != nil {
		s.writeError(w, r, id, err)
		return
	}
	var req executeRequest
	if err := decodeBody(r, w, &req); err != nil {
		s.writeError(w, r, "", err)
		return
	}
	if err := checkExecute(req); err != nil {
		s.writeError(w, r, "", err)
		return
	}
	st := s.codeStateOf(id)
	select {
	case st.turn <- struct{}{}:
		defer func() { <-st.turn }()
	case <-r.Context().Done():
		s.writeError(w, r, id, r.Context().Err())
		return
	}
	out := &ndjson{w: w}
	res, err := s.runWithEnv(r.Context(), id, req, out)
	if err != nil {
		if !out.started() {
			s.writeError(w, r, id, fmt.Errorf("running code: %w", err))
			return
		}
		err = s.explain(r.Context(), id, err)
		out.line(map[string]any{"type": "error", "name": "SandboxError", "value": errdefs.Message(err), "traceback": ""})
		return
	}
	out.flushText()
	if res.OK {
		for _, png := range s.figures(r.Context(), id) {
			out.line(map[string]any{"type": "result", "png": png, "text": "<Figure>", "is_main_result": false})
		}
	}
	switch {
	case !res.OK:
		name, value := exceptionOf(res.Error)
		out.line(map[string]any{"type": "error", "name": name, "value": value, "traceback": res.Error})
	case res.Value != "":
		out.line(map[string]any{"type": "result", "text": res.Value, "is_main_result": true})
	}
	st.mu.Lock()
	st.count++
	n := st.count
	st.mu.Unlock()
	out.line(map[string]any{"type": "number_of_executions", "execution_count": n})
	out.line(map[string]any{"type": "end_of_execution"})
}

// checkExecute validates an /execute body.
func checkExecute(req executeRequest) error {
	if req.ContextID != nil && req.Language != nil {
		return invalidf("body: context_id and language both set: want one of them")
	}
	if req.ContextID != nil && *req.ContextID != defaultContext {
		return notFoundf("code context %q (Zygo has one: %q)", *req.ContextID, defaultContext)
	}
	if err := checkLanguage(req.Language); err != nil {
		return err
	}
	if strings.IndexByte(req.Code, 0) >= 0 {
		return invalidf("body: code contains a NUL byte")
	}
	if len(req.EnvVars) > maxEnvs {
		return invalidf("body: env_vars has %d entries: at most %d", len(req.EnvVars), maxEnvs)
	}
	for k, v := range req.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return invalidf("body: env_vars: %q: want a name without '=' or NUL and a value without NUL", k)
		}
	}
	return nil
}

// runWithEnv runs req's code, with req's env_vars set in the interpreter's os.environ for
// the call and restored after it (the caller holds the sandbox's turn).
func (s *Server) runWithEnv(ctx context.Context, id string, req executeRequest, out *ndjson) (guest.CodeResult, error) {
	if len(req.EnvVars) > 0 {
		vars, _ := json.Marshal(req.EnvVars) // a map of strings always marshals
		set := "import os as _zygo_os, json as _zygo_json\n" +
			"_zygo_env = _zygo_json.loads(" + strconv.Quote(string(vars)) + ")\n" +
			"_zygo_saved = {k: _zygo_os.environ.get(k) for k in _zygo_env}\n" +
			"_zygo_os.environ.update(_zygo_env)\n"
		if err := s.runQuiet(ctx, id, set); err != nil {
			return guest.CodeResult{}, fmt.Errorf("setting env_vars: %w", err)
		}
		defer func() {
			restore := "for _k, _v in _zygo_saved.items():\n" +
				"    _zygo_os.environ.pop(_k, None) if _v is None else _zygo_os.environ.__setitem__(_k, _v)\n"
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := s.runQuiet(rctx, id, restore); err != nil {
				s.log.Warn("envd: restoring the interpreter's environment after env_vars", "sandbox_id", id, "err", err)
			}
		}()
	}
	return s.sb.RunCode(ctx, id, guest.CodeRequest{Code: req.Code}, out.stream("stdout"), out.stream("stderr"))
}

// figuresCode saves and closes the figures matplotlib holds open, if the code imported it,
// and evaluates to their PNGs, base64, joined by ','.
const figuresCode = `import sys as _zygo_sys
_zygo_pngs = []
if 'matplotlib.pyplot' in _zygo_sys.modules:
    import io as _zygo_io, base64 as _zygo_b64
    _zygo_plt = _zygo_sys.modules['matplotlib.pyplot']
    for _zygo_n in _zygo_plt.get_fignums():
        _zygo_buf = _zygo_io.BytesIO()
        _zygo_plt.figure(_zygo_n).savefig(_zygo_buf, format='png')
        _zygo_plt.close(_zygo_n)
        _zygo_pngs.append(_zygo_b64.b64encode(_zygo_buf.getvalue()).decode())
','.join(_zygo_pngs)
`

// maxFigureWait bounds the run that collects figures.
const maxFigureWait = 30 * time.Second

// figures returns the PNGs (base64) of the matplotlib figures the last run left open, as
// a notebook shows them, and closes them; none when matplotlib was not imported. A failure
// is logged: the run's own results still go out.
func (s *Server) figures(ctx context.Context, id string) []string {
	ctx, cancel := context.WithTimeout(ctx, maxFigureWait)
	defer cancel()
	res, err := s.sb.RunCode(ctx, id, guest.CodeRequest{Code: figuresCode}, io.Discard, io.Discard)
	if err != nil || !res.OK {
		s.log.Warn("envd: collecting matplotlib figures", "sandbox_id", id, "err", err, "python_error", res.Error)
		return nil
	}
	// The value is the repr of a str of base64 and ',': quoted, nothing escaped.
	v := strings.Trim(res.Value, "'")
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// runQuiet runs Zygo's own code in the interpreter; its output is dropped and an exception
// is an error.
func (s *Server) runQuiet(ctx context.Context, id, code string) error {
	res, err := s.sb.RunCode(ctx, id, guest.CodeRequest{Code: code}, io.Discard, io.Discard)
	if err != nil {
		return err
	}
	if !res.OK {
		return fmt.Errorf("python: %s", strings.TrimSpace(res.Error))
	}
	return nil
}

// exceptionOf returns the exception's name and value from a Python traceback: its last
// line, "NameError: name 'x' is not defined".
func exceptionOf(tb string) (name, value string) {
	lines := strings.Split(strings.TrimRight(tb, "\n"), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return "Error", ""
	}
	name, value, _ = strings.Cut(last, ": ")
	if strings.ContainsAny(name, " \t") { // not "Name: value": a message of its own
		return "Error", last
	}
	return name, value
}

// ndjson writes the /execute response: one JSON object a line, flushed at once, with
// output split only on whole UTF-8 characters. Safe for concurrent use (the interpreter's
// stdout and stderr may be copied concurrently).
type ndjson struct {
	w http.ResponseWriter

	mu      sync.Mutex
	begun   bool              // guarded by mu: the status and a line are sent
	pending map[string][]byte // guarded by mu: the start of a character cut by a write, per stream
}

func (n *ndjson) started() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.begun
}

// line sends one object.
func (n *ndjson) line(v any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lineLocked(v)
}

func (n *ndjson) lineLocked(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return // every value sent is a map of strings and numbers
	}
	if !n.begun {
		n.begun = true
		n.w.Header().Set("Content-Type", "application/x-ndjson")
		n.w.WriteHeader(http.StatusOK)
	}
	_, _ = n.w.Write(append(b, '\n')) // a client gone: RunCode ends with the request
	if f, ok := n.w.(http.Flusher); ok {
		f.Flush()
	}
}

// stream is a writer of stdout or stderr lines.
func (n *ndjson) stream(name string) io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.pending == nil {
			n.pending = map[string][]byte{}
		}
		data := append(n.pending[name], b...)
		cut := completeUTF8(data)
		n.pending[name] = bytes.Clone(data[cut:])
		if cut > 0 {
			n.lineLocked(map[string]any{"type": name, "text": string(data[:cut]), "timestamp": time.Now().UnixNano()})
		}
		return len(b), nil
	})
}

// flushText sends what is left of a cut character (invalid UTF-8 then).
func (n *ndjson) flushText() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, name := range []string{"stdout", "stderr"} {
		if rest := n.pending[name]; len(rest) > 0 {
			n.lineLocked(map[string]any{"type": name, "text": string(rest), "timestamp": time.Now().UnixNano()})
		}
	}
	n.pending = nil
}

// completeUTF8 returns the length of b's prefix that does not end inside a character: at
// most the last 3 bytes are held back, and only when they start a valid but cut one.
func completeUTF8(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		if !utf8.RuneStart(b[i]) {
			continue
		}
		if !utf8.FullRune(b[i:]) {
			return i
		}
		break
	}
	return len(b)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
