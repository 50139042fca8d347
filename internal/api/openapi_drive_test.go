package api_test

import (
	"archive/tar"
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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	spec "github.com/zygo-run/zygo/api"
	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/pool"
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
func (f *specSandboxes) Unpublish(context.Context, string, int) error { return f.err }
func (f *specSandboxes) Pause(context.Context, string) (sandbox.SandboxRecord, error) {
	rec := sbRec
	rec.State = sandbox.Paused
	return rec, f.err
}
func (f *specSandboxes) Resume(context.Context, string, time.Duration) (sandbox.SandboxRecord, error) {
	return sbRec, f.err
}
func (f *specSandboxes) SetTimeout(context.Context, string, time.Duration, string) (sandbox.SandboxRecord, error) {
	return sbRec, f.err
}
func (f *specSandboxes) Restore(context.Context, string, sandbox.RestoreOptions) (sandbox.SandboxRecord, error) {
	return sbRec, f.err
}
func (f *specSandboxes) ExportCheckpoint(context.Context, string) (*sandbox.ImageExport, error) {
	if f.err != nil {
		return nil, f.err
	}
	return sandbox.NewImageExport(cpRec, 4, strings.Repeat("ab", 32), func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, "tar!")
		return err
	}, nil), nil
}
func (f *specSandboxes) ImportCheckpoint(_ context.Context, r io.Reader, _ sandbox.ImportOptions) (sandbox.CheckpointRecord, error) {
	io.Copy(io.Discard, r)
	return cpRec, f.err
}
func (f *specSandboxes) Templates() []sandbox.Template {
	return []sandbox.Template{{Name: "base", Description: "the default root"}, {Name: "py", RootfsDir: "/srv/py", Description: "rootfs /srv/py"}}
}

// driver is a server of fakes, each failing with err when it is set. Its handler is made
// by handler, after a call's setup.
type driver struct {
	fns     *fakeFunctions
	logs    *fakeLogs
	secrets *fakeSecrets
	sb      *specSandboxes
	pools   *specPools
	tokens  *specTokenStore
	metrics *prometheus.Registry // nil: the server serves no metrics

	noPools, noTokens bool // the server has none
	noAccessKey       bool // the server issues no sandbox access tokens
}

func newDriver() *driver {
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
		pools:   newSpecPools(),
		tokens:  &specTokenStore{toks: []store.Token{{Name: "ci", Hash: make([]byte, 32), CreatedAt: t0, LastUsedAt: t0}}},
		metrics: prometheus.NewRegistry(),
	}
	d.metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "zygo_functions", Help: "deployed functions"},
		func() float64 { return 1 }))
	d.fns.versions = []function.VersionInfo{{Hash: "sha256:abc", CreatedAt: t0, DeployedAt: t0, Active: true},
		{Hash: "sha256:def", CreatedAt: t0, DeployedAt: t0.Add(-time.Hour)}}
	d.fns.rollback = func(ctx context.Context, to string) (*function.DeployResult, error) {
		function.ReportProgress(ctx, function.Progress{Step: function.StepImporting, Version: "sha256:def"})
		if d.fns.err != nil {
			return nil, d.fns.err
		}
		function.ReportProgress(ctx, function.Progress{Step: function.StepReady, Version: "sha256:def"})
		return &function.DeployResult{Name: "hello", Version: "sha256:def", Mode: function.ModeFork, ReadyMs: 3}, nil
	}
	d.fns.deploy = func(r io.Reader) (*function.DeployResult, error) {
		io.Copy(io.Discard, r)
		if d.fns.err != nil {
			return nil, d.fns.err
		}
		return &function.DeployResult{Name: "hello", Version: "sha256:abc", Mode: function.ModeFork, Fallback: "x",
			Checks: []agentproc.Check{{Name: "threads", Level: "warn", Detail: "1"}}, ReadyMs: 3}, nil
	}
	return d
}

// handler returns the server of d's fakes, behind token when it is not "".
func (d *driver) handler(t *testing.T, token string) http.Handler {
	t.Helper()
	srv := api.NewServer(d.fns, d.logs, d.secrets, slog.New(slog.NewTextHandler(io.Discard, nil)), "test").WithSandboxes(d.sb, nil)
	if !d.noPools {
		srv.WithPools(d.pools)
	}
	if !d.noTokens {
		storeErr := d.tokens.err // the calls', not NewTokens'
		d.tokens.err = nil
		toks, err := api.NewTokens(context.Background(), d.tokens, "", "", slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		d.tokens.err = storeErr
		srv.WithTokens(toks)
	}
	if !d.noAccessKey {
		srv.WithAccessKey(bytes.Repeat([]byte{7}, 32))
	}
	if d.metrics != nil {
		srv.WithMetrics(promhttp.HandlerFor(d.metrics, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	}
	h := srv.Handler()
	if token != "" {
		h = api.RequireToken(token, slog.New(slog.DiscardHandler), h)
	}
	return h
}

// setErr makes every fake fail with err.
func (d *driver) setErr(err error) {
	d.fns.err, d.logs.err, d.secrets.err, d.sb.err, d.pools.err = err, err, err, err, err
	d.tokens.err = err
}

// call is one request of a route.
type call struct {
	route  string // the route's pattern, "GET /v1/functions/{name}"
	target string // the request's path and query
	body   string
	ctype  string
	accept string
	header http.Header     // more request headers
	tcp    bool            // over the TCP listener, with its token
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
	{route: "POST /v1/sandboxes/{id}/fork", target: "/v1/sandboxes/agent/fork", body: `{"n": 2, "names": ["kid-a", "kid-b"]}`, ctype: "application/json"},
	{route: "POST /v1/sandboxes/{id}/rollback", target: "/v1/sandboxes/agent/rollback", body: `{"to": "base"}`, ctype: "application/json"},
	{route: "GET /v1/sandboxes/{id}/generation", target: "/v1/sandboxes/agent/generation"},
	{route: "GET /v1/sandboxes/{id}/services", target: "/v1/sandboxes/agent/services"},
	{route: "POST /v1/sandboxes/{id}/ports/{port}", target: "/v1/sandboxes/agent/ports/8080"},
	{route: "DELETE /v1/sandboxes/{id}/ports/{port}", target: "/v1/sandboxes/agent/ports/8080"},
	{route: "GET /v1/checkpoints", target: "/v1/checkpoints?sandbox=agent"},
	{route: "GET /v1/checkpoints/{id}", target: "/v1/checkpoints/base"},
	{route: "DELETE /v1/checkpoints/{id}", target: "/v1/checkpoints/base"},
	{route: "POST /v1/sandboxes/{id}/pause", target: "/v1/sandboxes/agent/pause"},
	{route: "POST /v1/sandboxes/{id}/resume", target: "/v1/sandboxes/agent/resume", body: `{"timeout_ms": 60000}`, ctype: "application/json"},
	{route: "POST /v1/sandboxes/{id}/timeout", target: "/v1/sandboxes/agent/timeout", body: `{"timeout_ms": 60000, "on_timeout": "pause"}`, ctype: "application/json"},
	{route: "POST /v1/sandboxes/{id}/access-token", target: "/v1/sandboxes/agent/access-token"},
	{route: "POST /v1/checkpoints/{id}/restore", target: "/v1/checkpoints/base/restore", body: `{"timeout_ms": 60000, "metadata": {"a": "b"}, "name": "restored-a"}`, ctype: "application/json"},
	{route: "GET /v1/templates", target: "/v1/templates"},
	{route: "GET /v1/checkpoints/{id}/image", target: "/v1/checkpoints/base/image"},
	{route: "POST /v1/checkpoints/import", target: "/v1/checkpoints/import?sha256=" + strings.Repeat("ab", 32) + "&tag=moved",
		body: "tar!", ctype: wire.TarContentType},

	{route: "POST /v1/functions", target: "/v1/functions", body: "tarball", ctype: "application/gzip", accept: wire.DeployStreamType,
		setup: func(d *driver) { streamDeploy(d, nil) }},
	{route: "GET /v1/functions/{name}/versions", target: "/v1/functions/hello/versions?limit=1"},
	{route: "POST /v1/functions/{name}/rollback", target: "/v1/functions/hello/rollback", body: `{"to": "def"}`, ctype: "application/json"},
	{route: "POST /v1/functions/{name}/rollback", target: "/v1/functions/hello/rollback", accept: wire.DeployStreamType},
	{route: "GET /v1/functions/{name}/logs", target: "/v1/functions/hello/logs?since=10m&tail=5"},
	{route: "POST /v1/tokens", target: "/v1/tokens", body: `{"name": "deploy-bot"}`, ctype: "application/json"},
	{route: "GET /v1/tokens", target: "/v1/tokens"},
	{route: "DELETE /v1/tokens/{name}", target: "/v1/tokens/ci"},
	{route: "POST /v1/pools", target: "/v1/pools", body: "kind = \"pool\"\nname = \"batch\"\n", ctype: "application/toml"},
	{route: "GET /v1/pools", target: "/v1/pools?limit=1"},
	{route: "GET /v1/pools/{name}", target: "/v1/pools/batch"},
	{route: "DELETE /v1/pools/{name}", target: "/v1/pools/batch"},
	{route: "PUT /v1/pools/{name}/scripts", target: "/v1/pools/batch/scripts?tenant=acme", body: "def handler(e):\n    return e\n",
		ctype: "application/octet-stream"},
	{route: "PUT /v1/pools/{name}/scripts", target: "/v1/pools/batch/scripts?tenant=acme", body: scriptTar("main.py", "lib/util.py"),
		ctype: wire.TarContentType},
	{route: "POST /v1/pools/{name}/run", target: "/v1/pools/batch/run", ctype: "application/json",
		body: `{"tenant": "acme", "source": "def handler(e):\n    return e\n", "event": {"a": 1}, "secrets": ["K"]}`},
	{route: "GET /v1/pools/{name}/logs", target: "/v1/pools/batch/logs?after=0&limit=5&request=r-2"},
	{route: "GET /metrics", target: "/metrics"},
}

// streamDeploy makes d's deploys report every step, then answer err (nil: a new version).
func streamDeploy(d *driver, err error) {
	d.fns.deployCtx = func(ctx context.Context, r io.Reader) (*function.DeployResult, error) {
		io.Copy(io.Discard, r)
		function.ReportProgress(ctx, function.Progress{Step: function.StepUploading})
		if d.fns.err != nil {
			return nil, d.fns.err
		}
		function.ReportProgress(ctx, function.Progress{Step: function.StepUnpacking, Version: "sha256:abc"})
		function.ReportProgress(ctx, function.Progress{Step: function.StepImporting, Version: "sha256:abc"})
		if err != nil {
			return nil, err
		}
		function.ReportProgress(ctx, function.Progress{Step: function.StepWarmup, Version: "sha256:abc",
			Checks: []agentproc.Check{{Name: "threads", Level: "info", Detail: "0"}}})
		function.ReportProgress(ctx, function.Progress{Step: function.StepReady, Version: "sha256:abc"})
		return &function.DeployResult{Name: "hello", Version: "sha256:abc", Mode: function.ModeFork, ReadyMs: 3,
			Warnings: []string{"limits.pids is not enforced: the daemon is not root"}}, nil
	}
}

// scriptTar returns a tar of files, each a small Python module.
func scriptTar(files ...string) string {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		body := "def handler(e):\n    return e\n"
		tw.WriteHeader(&tar.Header{Name: f, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	return b.String()
}

// importFailed is a deploy's failure to import.
var importFailed = &function.ImportFailed{ImportError: &agentproc.ImportError{Type: "ImportError", Message: "no", Traceback: "tb"}}

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
		d.fns.deploy = func(io.Reader) (*function.DeployResult, error) { return nil, importFailed }
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
	{route: "DELETE /v1/sandboxes/{id}/ports/{port}", target: "/v1/sandboxes/agent/ports/0"},

	// Streamed deploys and rollbacks: a failure after the stream began ends it with the
	// error and its status; one before (a bad bundle) is a plain answer.
	{route: "POST /v1/functions", target: "/v1/functions", body: "x", accept: wire.DeployStreamType,
		setup: func(d *driver) { streamDeploy(d, importFailed) }},
	{route: "POST /v1/functions", target: "/v1/functions", body: "x", accept: wire.DeployStreamType,
		setup: func(d *driver) {
			streamDeploy(d, nil)
			d.fns.err = fmt.Errorf("%w: not a gzip'd tar", errdefs.ErrInvalidArgument)
		}},
	{route: "POST /v1/functions/{name}/invoke", target: "/v1/functions/hello/invoke", body: `{}`, setup: func(d *driver) {
		d.fns.err = &function.QueueFullError{Function: "hello", Concurrency: 4, Queue: 8, After: 2 * time.Second}
	}},
	{route: "GET /v1/functions/{name}/versions", target: "/v1/functions/hello/versions?limit=0"},
	{route: "POST /v1/functions/{name}/rollback", target: "/v1/functions/hello/rollback", body: `{"to": 1}`},
	{route: "POST /v1/functions/{name}/rollback", target: "/v1/functions/hello/rollback",
		body: `{"to": "` + strings.Repeat("a", api.MaxSandboxJSONBytes) + `"}`},
	{route: "POST /v1/functions/{name}/rollback", target: "/v1/functions/hello/rollback", setup: func(d *driver) {
		d.fns.rollback = func(context.Context, string) (*function.DeployResult, error) {
			return &function.DeployResult{Name: "hello", Version: "sha256:abc", Unchanged: true}, nil
		}
	}},
	{route: "POST /v1/functions/{name}/rollback", target: "/v1/functions/hello/rollback", setup: func(d *driver) {
		d.fns.rollback = func(context.Context, string) (*function.DeployResult, error) { return nil, importFailed }
	}},
	{route: "POST /v1/functions/{name}/rollback", target: "/v1/functions/hello/rollback", accept: wire.DeployStreamType,
		setup: func(d *driver) { d.fns.err = fmt.Errorf("version %q: %w", "x", errdefs.ErrNotFound) }},
	{route: "GET /v1/functions/{name}/logs", target: "/v1/functions/hello/logs?since=yesterday"},
	{route: "GET /v1/functions/{name}/logs", target: "/v1/functions/hello/logs?tail=5&after=3"},

	{route: "POST /v1/sandboxes/{id}/access-token", target: "/v1/sandboxes/agent/access-token", setup: func(d *driver) { d.noAccessKey = true }},

	{route: "POST /v1/tokens", target: "/v1/tokens", body: `{"name": "Bad Name"}`},
	{route: "POST /v1/tokens", target: "/v1/tokens", body: `{"name": "ci"}`}, // taken: 409
	{route: "POST /v1/tokens", target: "/v1/tokens", body: `{"name": "x"}`, tcp: true},
	{route: "POST /v1/tokens", target: "/v1/tokens", body: `{"name": "x"}`, setup: func(d *driver) { d.noTokens = true }},
	{route: "GET /v1/tokens", target: "/v1/tokens?cursor=nope"},
	{route: "GET /v1/tokens", target: "/v1/tokens", setup: func(d *driver) { d.noTokens = true }},
	{route: "DELETE /v1/tokens/{name}", target: "/v1/tokens/ci", tcp: true},
	{route: "DELETE /v1/tokens/{name}", target: "/v1/tokens/nope"},
	{route: "DELETE /v1/tokens/{name}", target: "/v1/tokens/ci", setup: func(d *driver) { d.noTokens = true }},

	{route: "POST /v1/pools", target: "/v1/pools", body: "x", setup: func(d *driver) { d.pools.unchanged = true }},
	{route: "POST /v1/pools", target: "/v1/pools", body: "x", setup: func(d *driver) {
		d.pools.upErr = &agentproc.ImportError{Type: "ModuleNotFoundError", Message: "no module named numpy", Traceback: "tb"}
	}},
	{route: "POST /v1/pools", target: "/v1/pools", body: strings.Repeat("#", 64<<10+1)},
	{route: "GET /v1/pools", target: "/v1/pools?limit=0"},
	{route: "GET /v1/pools", target: "/v1/pools", setup: func(d *driver) { d.noPools = true }},
	{route: "PUT /v1/pools/{name}/scripts", target: "/v1/pools/batch/scripts?tenant=Acme", body: "x"},
	{route: "PUT /v1/pools/{name}/scripts", target: "/v1/pools/batch/scripts?tenant=acme", body: "not a tar", ctype: wire.TarContentType},
	{route: "PUT /v1/pools/{name}/scripts", target: "/v1/pools/batch/scripts?tenant=acme", body: strings.Repeat("#", pool.MaxScriptBytes+1)},
	{route: "PUT /v1/pools/{name}/scripts", target: "/v1/pools/batch/scripts?tenant=acme", body: "x", setup: func(d *driver) {
		d.pools.putErr = fmt.Errorf("%w: tenant %q has 64 scripts in this pool, all used within 1m0s: retry later", errdefs.ErrTooManyRequests, "acme")
	}},
	{route: "POST /v1/pools/{name}/run", target: "/v1/pools/batch/run", body: `{"tenant": "acme", "scirpt": "ab"}`},
	{route: "POST /v1/pools/{name}/run", target: "/v1/pools/batch/run",
		body: `{"tenant": "acme", "source": "` + strings.Repeat("#", pool.MaxScriptBytes+1) + `"}`},
	{route: "POST /v1/pools/{name}/run", target: "/v1/pools/batch/run", body: `{"tenant": "acme", "script": "ab"}`, setup: func(d *driver) {
		d.pools.runErr = &pool.TooManyRequestsError{Tenant: "acme", Running: 2, Cap: 2, Queue: 4, After: 1500 * time.Millisecond}
	}},
	{route: "GET /v1/pools/{name}/logs", target: "/v1/pools/batch/logs?after=x"},
	{route: "GET /v1/pools/{name}/logs", target: "/v1/pools/nope/logs"},
	{route: "GET /metrics", target: "/metrics", setup: func(d *driver) { d.metrics = nil }},
	{route: "GET /metrics", target: "/metrics", setup: func(d *driver) { d.metrics.MustRegister(newFailingCollector()) }},
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
	d := newDriver()
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
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	if c.tcp {
		token = "tok"
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	d.handler(t, token).ServeHTTP(rec, req)
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
	run := happyCalls[slices.IndexFunc(happyCalls, func(c call) bool { return strings.HasSuffix(c.route, "/run") })]
	for _, f := range invokeFailures {
		resp := run.run(t, v, "", func(d *driver) {
			d.pools.run.Result = &agentproc.Result{Failure: f, Error: &agentproc.HandlerError{Type: "ValueError", Message: "no", Traceback: "tb"},
				Child: agentproc.ChildForked}
		})
		note(run.route, resp.StatusCode)
	}
	// Every route: a malformed X-Request-Id is refused; a valid one and a traceparent are echoed.
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range happyCalls {
		bad, good := c, c
		bad.header = http.Header{"X-Request-Id": {"two words"}}
		resp := bad.run(t, v, "", nil)
		note(c.route, resp.StatusCode)
		if resp.StatusCode != 400 {
			t.Errorf("%s with a malformed X-Request-Id: %d, want 400", c.route, resp.StatusCode)
		}
		good.header = http.Header{"X-Request-Id": {"call-7"}, "Traceparent": {tp}}
		resp = good.run(t, v, "", nil)
		if resp.Header.Get("X-Request-Id") != "call-7" || resp.Header.Get("Traceparent") != tp {
			t.Errorf("%s: X-Request-Id and traceparent not echoed: %v", c.route, resp.Header)
		}
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
