package api_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/content"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	spec "github.com/zygo-run/zygo/api"
	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/secret"
	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// answerValidator validates answers against the document with libopenapi-validator.
type answerValidator struct {
	v     validator.Validator
	model *v3.Document
}

var answerValidatorOnce = sync.OnceValues(func() (*answerValidator, error) {
	doc, err := libopenapi.NewDocument(spec.YAML)
	if err != nil {
		return nil, err
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		return nil, err
	}
	// An NDJSON answer is checked line by line (checkAnswer), each line a JSON value.
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions(),
		config.WithBodyDecoder(wire.ForkStreamType, content.JSONDecoder()))
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &answerValidator{v: v, model: &m.Model}, nil
})

func newAnswerValidator(t *testing.T) *answerValidator {
	t.Helper()
	a, err := answerValidatorOnce()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// checkAnswer validates resp (status, headers, body) as the document's answer to req; an
// NDJSON body is validated line by line.
func (a *answerValidator) checkAnswer(t *testing.T, req *http.Request, resp *http.Response) {
	t.Helper()
	body, _ := io.ReadAll(resp.Body)
	parts := [][]byte{body}
	if resp.Header.Get("Content-Type") == wire.ForkStreamType {
		parts = bytes.SplitAfter(bytes.TrimSuffix(body, []byte("\n")), []byte("\n"))
	}
	for _, p := range parts {
		r := *resp
		r.Body = io.NopCloser(bytes.NewReader(p))
		if ok, errs := a.v.ValidateHttpResponse(req, &r); !ok {
			for _, e := range errs {
				t.Errorf("%s %s → %d: %s (%s)\n%s", req.Method, req.URL, resp.StatusCode, e.Message, e.Reason, p)
			}
		}
	}
}

// checkComponent validates resp against the document's components/responses/name: its
// required headers and its JSON body.
func (a *answerValidator) checkComponent(t *testing.T, name string, resp *http.Response) {
	t.Helper()
	c := a.model.Components.Responses.GetOrZero(name)
	if c == nil {
		t.Fatalf("no components/responses/%s", name)
	}
	for h, hd := range c.Headers.FromOldest() {
		if hd.Required && resp.Header.Get(h) == "" {
			t.Errorf("%s: header %s missing: %v", name, h, resp.Header)
		}
	}
	body, _ := io.ReadAll(resp.Body)
	s := c.Content.GetOrZero("application/json").Schema.Schema()
	if ok, errs := schema_validation.NewSchemaValidator().ValidateSchemaBytes(s, body); !ok {
		for _, e := range errs {
			t.Errorf("%s: %s (%s)\n%s", name, e.Message, e.Reason, body)
		}
	}
}

// specSandboxes is an api.Sandboxes whose every call answers a full record, or err.
type specSandboxes struct {
	err       error // every call's, before any output
	streamErr error // exec's, after its output began
	forkRes   sandbox.ForkResult
	forkErr   error
}

var (
	t0     = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	sbOpts = sandbox.CreateOptions{Name: "agent", Env: []string{"A=1"}, Secrets: []string{"K"}, MemoryMiB: 256, PIDs: 64, CPUs: 0.5,
		Services: []guest.Service{{Name: "web", Argv: []string{"python3", "-m", "http.server"}, OnFork: "restart", Restart: "always"}},
		Network:  sandbox.NetworkOptions{Mode: "egress", Allow: []string{"10.0.0.0/8"}, Deny: []string{"10.1.0.0/16"}}}
	sbRec = sandbox.SandboxRecord{ID: "sb-0123456789abcdef", Name: "agent", Backend: "gvisor", EngineID: "e-1", State: sandbox.Running,
		ParentID: "sb-fedcba9876543210", CheckpointID: "cp-0123456789abcdef", Generation: strings.Repeat("ab", 16),
		Options: sbOpts, Services: sbOpts.Services, Error: "", CreatedAt: t0, UpdatedAt: t0,
		Net: &sandbox.NetIdentity{Address: "10.200.0.2", MAC: "02:00:00:00:00:01"}}
	cpRec = sandbox.CheckpointRecord{ID: "cp-0123456789abcdef", Tag: "base", SandboxID: sbRec.ID, ParentID: "cp-fedcba9876543210",
		Backend: "gvisor", SizeBytes: 4096, Generation: sbRec.Generation, Hostname: "agent", Options: sbOpts, CreatedAt: t0,
		Checksums: map[string]string{"checkpoint.img": "crc32c:01234567"}}
)

var _ api.Sandboxes = (*specSandboxes)(nil)

func (f *specSandboxes) Create(context.Context, sandbox.CreateOptions) (sandbox.SandboxRecord, error) {
	return sbRec, f.err
}
func (f *specSandboxes) Get(context.Context, string) (sandbox.SandboxRecord, error) {
	return sbRec, f.err
}
func (f *specSandboxes) List(context.Context) ([]sandbox.SandboxRecord, error) {
	return []sandbox.SandboxRecord{sbRec}, f.err
}
func (f *specSandboxes) Remove(context.Context, string) error { return f.err }
func (f *specSandboxes) Exec(_ context.Context, _ string, _ guest.ExecRequest, stdout, stderr io.Writer) (guest.ExitStatus, error) {
	if f.err != nil {
		return guest.ExitStatus{}, f.err
	}
	io.WriteString(stdout, "out")
	io.WriteString(stderr, "err")
	return guest.ExitStatus{Code: 137, Signal: 9, TimedOut: true}, f.streamErr
}
func (f *specSandboxes) RunCode(_ context.Context, _ string, _ guest.CodeRequest, stdout, _ io.Writer) (guest.CodeResult, error) {
	if f.err != nil {
		return guest.CodeResult{}, f.err
	}
	io.WriteString(stdout, "41\n")
	return guest.CodeResult{OK: false, Value: "42", Error: "Traceback", OutputTruncated: true, Restarted: true}, nil
}
func (f *specSandboxes) PutFile(_ context.Context, _, _ string, _ uint32, r io.Reader) error {
	io.Copy(io.Discard, r)
	return f.err
}
func (f *specSandboxes) GetFile(_ context.Context, _, _ string, w io.Writer) error {
	if f.err != nil {
		return f.err
	}
	_, err := w.Write([]byte("content"))
	return err
}
func (f *specSandboxes) ListFiles(context.Context, string, string) (guest.Listing, error) {
	return guest.Listing{Entries: []guest.FileInfo{{Name: "a", Size: 1, Mode: 0o644, ModTime: t0}, {Name: "d", Mode: 0o755 | 1<<31, IsDir: true, ModTime: t0}}, Total: 3}, f.err
}
func (f *specSandboxes) Checkpoint(context.Context, string, string) (sandbox.CheckpointRecord, error) {
	return cpRec, f.err
}
func (f *specSandboxes) Checkpoints(context.Context, string) ([]sandbox.CheckpointRecord, error) {
	return []sandbox.CheckpointRecord{cpRec}, f.err
}
func (f *specSandboxes) GetCheckpoint(context.Context, string) (sandbox.CheckpointRecord, error) {
	return cpRec, f.err
}
func (f *specSandboxes) RemoveCheckpoint(context.Context, string) error { return f.err }
func (f *specSandboxes) Fork(_ context.Context, _ string, opts sandbox.ForkOptions) (sandbox.ForkResult, error) {
	if f.err != nil {
		return sandbox.ForkResult{}, f.err
	}
	if opts.Progress != nil {
		opts.Progress(sandbox.ForkProgress{Checkpoint: cpRec.ID, N: 2, Ready: 1, Failed: 1})
	}
	return f.forkRes, f.forkErr
}
func (f *specSandboxes) Rollback(context.Context, string, string) (sandbox.SandboxRecord, error) {
	return sbRec, f.err
}
func (f *specSandboxes) Services(context.Context, string) ([]guest.ServiceStatus, error) {
	exit := guest.ExitStatus{Code: 1}
	return []guest.ServiceStatus{{Name: "web", Restart: "always", Running: true, PID: 7, Restarts: 2, LastExit: &exit,
		LastExitAt: t0, LastError: "x", NextRestartAt: t0, Log: "/var/log/web.log"}}, f.err
}
func (f *specSandboxes) Port(context.Context, string, int) (string, error) {
	return "127.0.0.1:40000", f.err
}

// driver is a server of fakes, each failing with err when it is set.
type driver struct {
	fns     *fakeFunctions
	logs    *fakeLogs
	secrets *fakeSecrets
	sb      *specSandboxes
	h       http.Handler
}

func newDriver(token string) *driver {
	ok := &function.Invocation{RequestID: "r-1", Version: "sha256:abc", Value: []byte(`{"x": 1}`), Elapsed: time.Millisecond,
		Child: "forked", Phases: []agentproc.Phase{{Name: "fork", Took: time.Millisecond}}}
	limits := function.Limits{TimeoutMs: 1000, MemoryMiB: 128, PIDs: 10, CPUMs: 100, MaxRequestKiB: 6, MaxResponseKiB: 6}
	prefork := 2
	m := &function.Manifest{Name: "hello", Runtime: function.RuntimePython, Handler: "main:handler", Mode: function.ModeFork,
		Interpreter: "/usr/bin/python3", Secrets: []string{"OTHER"}, Concurrency: 4, PreFork: &prefork, PoolSize: &prefork,
		Env: map[string]string{"A": "1"}, Limits: limits}
	d := &driver{
		fns: &fakeFunctions{inv: ok, statuses: []function.Status{{Name: "hello", Version: "sha256:abc", Runtime: function.RuntimePython,
			Mode: function.ModeFork, State: "ready", Fallback: "x", ZygotePID: 7, InFlight: 1, IdleWorkers: 1, Served: 9, Manifest: m}}},
		logs:    &fakeLogs{lines: []store.LogLine{{ID: 1, Function: "hello", Version: "sha256:abc", RequestID: "r-1", Stream: "stdout", At: t0, Line: "hi"}}},
		secrets: &fakeSecrets{metas: []secret.Meta{{Name: "K", UpdatedAt: t0}}},
		sb:      &specSandboxes{},
	}
	d.fns.deploy = func(r io.Reader) (*function.DeployResult, error) {
		io.Copy(io.Discard, r)
		if d.fns.err != nil {
			return nil, d.fns.err
		}
		return &function.DeployResult{Name: "hello", Version: "sha256:abc", Mode: function.ModeFork, Fallback: "x",
			Checks: []agentproc.Check{{Name: "threads", Level: "warn", Detail: "1"}}, ReadyMs: 3}, nil
	}
	srv := api.NewServer(d.fns, d.logs, d.secrets, slog.New(slog.NewTextHandler(io.Discard, nil)), "test").WithSandboxes(d.sb, nil)
	d.h = srv.Handler()
	if token != "" {
		d.h = api.RequireToken(token, slog.New(slog.DiscardHandler), d.h)
	}
	return d
}

// setErr makes every fake fail with err.
func (d *driver) setErr(err error) {
	d.fns.err, d.logs.err, d.secrets.err, d.sb.err = err, err, err, err
}

// call is one request of a route.
type call struct {
	route  string // the route's pattern, "GET /v1/functions/{name}"
	target string // the request's path and query
	body   string
	ctype  string
	accept string
	setup  func(d *driver) // before the call
}

// happyCalls has at least one call of every route, each meant to succeed.
var happyCalls = []call{
	{route: "GET /v1/status", target: "/v1/status"},
	{route: "GET /v1/openapi.json", target: "/v1/openapi.json"},
	{route: "POST /v1/functions", target: "/v1/functions", body: "tarball", ctype: "application/gzip"},
	{route: "GET /v1/functions", target: "/v1/functions?limit=1"},
	{route: "GET /v1/functions/{name}", target: "/v1/functions/hello"},
	{route: "DELETE /v1/functions/{name}", target: "/v1/functions/hello"},
	{route: "POST /v1/functions/{name}/invoke", target: "/v1/functions/hello/invoke", body: `{"a": 1}`, ctype: "application/json"},
	{route: "GET /v1/functions/{name}/logs", target: "/v1/functions/hello/logs?after=0&limit=5&request=r-1"},
	{route: "PUT /v1/secrets/{name}", target: "/v1/secrets/K", body: "value", ctype: "application/octet-stream"},
	{route: "GET /v1/secrets", target: "/v1/secrets"},
	{route: "DELETE /v1/secrets/{name}", target: "/v1/secrets/UNUSED"},
	{route: "POST /v1/sandboxes", target: "/v1/sandboxes", body: `{"name": "agent", "network": {"mode": "none"}}`, ctype: "application/json"},
	{route: "GET /v1/sandboxes", target: "/v1/sandboxes"},
	{route: "GET /v1/sandboxes/{id}", target: "/v1/sandboxes/agent"},
	{route: "DELETE /v1/sandboxes/{id}", target: "/v1/sandboxes/agent"},
	{route: "POST /v1/sandboxes/{id}/exec", target: "/v1/sandboxes/agent/exec", body: `{"argv": ["true"], "stdin": "aGk="}`, ctype: "application/json"},
	{route: "POST /v1/sandboxes/{id}/exec", target: "/v1/sandboxes/agent/exec", body: "{\"argv\": [\"cat\"], \"stdin_stream\": true}\nhi", ctype: "application/octet-stream"},
	{route: "POST /v1/sandboxes/{id}/run-code", target: "/v1/sandboxes/agent/run-code", body: `{"code": "41"}`, ctype: "application/json"},
	{route: "PUT /v1/sandboxes/{id}/files", target: "/v1/sandboxes/agent/files?path=/a&mode=0600", body: "content", ctype: "application/octet-stream"},
	{route: "GET /v1/sandboxes/{id}/files", target: "/v1/sandboxes/agent/files?path=/a"},
	{route: "GET /v1/sandboxes/{id}/files/list", target: "/v1/sandboxes/agent/files/list?path=/"},
	{route: "POST /v1/sandboxes/{id}/checkpoint", target: "/v1/sandboxes/agent/checkpoint", body: `{"tag": "base"}`, ctype: "application/json"},
	{route: "GET /v1/sandboxes/{id}/checkpoints", target: "/v1/sandboxes/agent/checkpoints"},
	{route: "POST /v1/sandboxes/{id}/fork", target: "/v1/sandboxes/agent/fork", body: `{"n": 2}`, ctype: "application/json"},
	{route: "POST /v1/sandboxes/{id}/fork", target: "/v1/sandboxes/agent/fork", body: `{"n": 2, "from": "base"}`, ctype: "application/json", accept: wire.ForkStreamType},
	{route: "POST /v1/sandboxes/{id}/rollback", target: "/v1/sandboxes/agent/rollback", body: `{"to": "base"}`, ctype: "application/json"},
	{route: "GET /v1/sandboxes/{id}/generation", target: "/v1/sandboxes/agent/generation"},
	{route: "GET /v1/sandboxes/{id}/services", target: "/v1/sandboxes/agent/services"},
	{route: "POST /v1/sandboxes/{id}/ports/{port}", target: "/v1/sandboxes/agent/ports/8080"},
	{route: "GET /v1/checkpoints", target: "/v1/checkpoints?sandbox=agent"},
	{route: "GET /v1/checkpoints/{id}", target: "/v1/checkpoints/base"},
	{route: "DELETE /v1/checkpoints/{id}", target: "/v1/checkpoints/base"},
}

func forkChildren(d *driver, failAll bool) {
	rec := sbRec
	d.sb.forkRes = sandbox.ForkResult{Checkpoint: cpRec, Children: []sandbox.ForkChild{
		{Sandbox: rec}, {Err: fmt.Errorf("restoring: %w", errdefs.ErrUnavailable)}}}
	if failAll {
		d.sb.forkRes.Children[0] = sandbox.ForkChild{Err: fmt.Errorf("resealing: %w", errdefs.ErrDeadlineExceeded)}
		d.sb.forkErr = fmt.Errorf("every child failed: %w", errdefs.ErrDeadlineExceeded)
	}
}

// otherCalls are calls of particular outcomes: bad input, and answers no injected error makes.
var otherCalls = []call{
	{route: "POST /v1/functions", target: "/v1/functions", body: "x", setup: func(d *driver) {
		d.fns.deploy = func(io.Reader) (*function.DeployResult, error) {
			return &function.DeployResult{Name: "hello", Version: "v", Unchanged: true}, nil
		}
	}},
	{route: "POST /v1/functions", target: "/v1/functions", body: "x", setup: func(d *driver) {
		d.fns.deploy = func(io.Reader) (*function.DeployResult, error) {
			return nil, &function.ImportFailed{ImportError: &agentproc.ImportError{Type: "ImportError", Message: "no", Traceback: "tb"}}
		}
	}},
	{route: "GET /v1/functions", target: "/v1/functions?limit=0"},
	{route: "GET /v1/functions", target: "/v1/functions?cursor=nope"},
	{route: "GET /v1/functions/{name}/logs", target: "/v1/functions/hello/logs?after=x"},
	{route: "PUT /v1/secrets/{name}", target: "/v1/secrets/BIG", body: strings.Repeat("x", secret.MaxValueBytes+1)},
	{route: "DELETE /v1/secrets/{name}", target: "/v1/secrets/OTHER"}, // the function uses it: 409
	{route: "POST /v1/sandboxes", target: "/v1/sandboxes", body: `{"nmae": "x"}`, ctype: "application/json"},
	{route: "POST /v1/sandboxes", target: "/v1/sandboxes", body: `{"name": "` + strings.Repeat("x", wire.MaxSandboxJSONBytes) + `"}`, ctype: "application/json"},
	{route: "POST /v1/sandboxes/{id}/exec", target: "/v1/sandboxes/agent/exec", body: `{"argv": []}`, ctype: "application/json"},
	{route: "POST /v1/sandboxes/{id}/exec", target: "/v1/sandboxes/agent/exec", body: `{"argv": ["true"]}`, ctype: "application/json",
		setup: func(d *driver) { d.sb.streamErr = fmt.Errorf("the guest went away: %w", errdefs.ErrUnavailable) }},
	{route: "POST /v1/sandboxes/{id}/run-code", target: "/v1/sandboxes/agent/run-code", body: `{"code": "1", "timeout_ms": -1}`, ctype: "application/json"},
	{route: "PUT /v1/sandboxes/{id}/files", target: "/v1/sandboxes/agent/files?path=relative", body: "x"},
	{route: "PUT /v1/sandboxes/{id}/files", target: "/v1/sandboxes/agent/files?path=/a&mode=999", body: "x"},
	{route: "POST /v1/sandboxes/{id}/fork", target: "/v1/sandboxes/agent/fork", body: `{"n": 2}`, ctype: "application/json",
		setup: func(d *driver) { forkChildren(d, true) }},
	{route: "POST /v1/sandboxes/{id}/fork", target: "/v1/sandboxes/agent/fork", body: `{"n": 2}`, ctype: "application/json", accept: wire.ForkStreamType,
		setup: func(d *driver) { forkChildren(d, true) }},
	{route: "POST /v1/sandboxes/{id}/rollback", target: "/v1/sandboxes/agent/rollback", body: `{}`, ctype: "application/json"},
	{route: "POST /v1/sandboxes/{id}/ports/{port}", target: "/v1/sandboxes/agent/ports/080"},
}

// invokeFailures are the invoke codes of a request that ran.
var invokeFailures = []agentproc.Failure{agentproc.FailHandler, agentproc.FailTimeout, agentproc.FailCrashed, agentproc.FailZygote,
	agentproc.FailResponseLarge, agentproc.FailInternal, agentproc.FailLimit, agentproc.FailBadEvent}

// categoryOf is the error category a status comes from.
var categoryOf = map[int]error{
	400: errdefs.ErrInvalidArgument, 403: errdefs.ErrPermissionDenied, 404: errdefs.ErrNotFound,
	409: errdefs.ErrFailedPrecondition, 413: errdefs.ErrTooLarge, 500: errors.New("a bug"),
	503: errdefs.ErrUnavailable, 504: errdefs.ErrDeadlineExceeded,
}

// notProduced are statuses the document lists that no call here makes, with the reason.
var notProduced = map[string]string{}

// run sends c to a fresh driver (with token, when not "") after setup and returns the answer,
// validated against the document.
func (c call) run(t *testing.T, v *answerValidator, token string, setup func(*driver)) *http.Response {
	t.Helper()
	d := newDriver(token)
	if c.setup != nil {
		c.setup(d)
	}
	if setup != nil {
		setup(d)
	}
	method, _, _ := strings.Cut(c.route, " ")
	req := httptest.NewRequest(method, c.target, strings.NewReader(c.body))
	if c.ctype != "" {
		req.Header.Set("Content-Type", c.ctype)
	}
	if c.accept != "" {
		req.Header.Set("Accept", c.accept)
	}
	rec := httptest.NewRecorder()
	d.h.ServeHTTP(rec, req)
	resp := rec.Result()
	if resp.Header.Get(wire.APIVersionHeader) != strconv.Itoa(wire.APIVersion) {
		t.Errorf("%s %s → %d without %s", method, c.target, resp.StatusCode, wire.APIVersionHeader)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	v.checkAnswer(t, httptest.NewRequest(method, c.target, nil), resp)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp
}

// statusOf is the status of the last line of an NDJSON fork answer, else resp's.
func statusOf(resp *http.Response) int {
	if resp.Header.Get("Content-Type") != wire.ForkStreamType {
		return resp.StatusCode
	}
	var last string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		last = sc.Text()
	}
	if i := strings.Index(last, `"status":`); i >= 0 {
		n, _ := strconv.Atoi(strings.Trim(last[i+len(`"status":`):], " }\n"))
		return n
	}
	return resp.StatusCode
}

// TestOpenAPIAnswers drives every route through the real handler: its successes, bad input,
// each error category its document lists, and a missing token on TCP. Every answer must
// validate against the document, and every status the document lists for a route must be
// produced by some call here (or be in notProduced, with the reason).
func TestOpenAPIAnswers(t *testing.T) {
	v := newAnswerValidator(t)
	produced := map[string]bool{} // "METHOD /path status"
	note := func(route string, status int) { produced[route+" "+strconv.Itoa(status)] = true }

	covered := map[string]bool{}
	for _, c := range append(slices.Clone(happyCalls), otherCalls...) {
		resp := c.run(t, v, "", nil)
		note(c.route, resp.StatusCode)
		if resp.StatusCode < 300 {
			covered[c.route] = true
		}
	}
	for _, r := range api.Routes() {
		if !covered[r.String()] {
			t.Errorf("route %s has no successful call in happyCalls", r)
		}
	}

	statuses := docStatuses()
	for _, c := range happyCalls {
		for _, st := range statuses[c.route] {
			cat, ok := categoryOf[st]
			if !ok {
				continue
			}
			resp := c.run(t, v, "", func(d *driver) { d.setErr(fmt.Errorf("doing it: %w", cat)) })
			if got := statusOf(resp); got == st {
				note(c.route, st)
			}
		}
		// Without the token the TCP listener demands.
		resp := c.run(t, v, "tok", nil)
		note(c.route, resp.StatusCode)
		if resp.StatusCode != 401 {
			t.Errorf("%s without a token: %d, want 401", c.route, resp.StatusCode)
		}
	}
	invoke := happyCalls[slices.IndexFunc(happyCalls, func(c call) bool { return strings.HasSuffix(c.route, "/invoke") })]
	for _, f := range invokeFailures {
		resp := invoke.run(t, v, "", func(d *driver) {
			inv := *d.fns.inv
			inv.Failure, inv.Error = f, &agentproc.HandlerError{Type: "ValueError", Message: "no", Traceback: "tb"}
			d.fns.inv = &inv
		})
		note(invoke.route, resp.StatusCode)
	}
	for route, sts := range statuses {
		for _, st := range sts {
			key := route + " " + strconv.Itoa(st)
			if !produced[key] && notProduced[key] == "" {
				t.Errorf("api/openapi.yaml lists %d for %s, which no call produced: make a call produce it, or list it in notProduced with the reason", st, route)
			}
		}
	}
}

// docStatuses returns each operation's statuses, by route.
func docStatuses() map[string][]int {
	out := map[string][]int{}
	for path, item := range child(rawDoc(), "paths") {
		for _, m := range httpMethods {
			op := child(item, m)
			if op == nil {
				continue
			}
			for code := range child(op, "responses") {
				n, _ := strconv.Atoi(code)
				out[strings.ToUpper(m)+" "+path] = append(out[strings.ToUpper(m)+" "+path], n)
			}
		}
	}
	return out
}
