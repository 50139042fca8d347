package api_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/secret"
	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// fakeFunctions is a hand-written api.Functions. err, when set, is what
// every method returns; the other fields are the successful answers.
type fakeFunctions struct {
	mu     sync.Mutex
	err    error
	deploy func(io.Reader) (*function.DeployResult, error) // overrides err and res
	// deployCtx overrides deploy, with the call's context (its progress function).
	deployCtx func(context.Context, io.Reader) (*function.DeployResult, error)
	invoke    func(io.Reader, int64) (*function.Invocation, error) // overrides Invoke
	inv       *function.Invocation
	statuses  []function.Status
	versions  []function.VersionInfo                                               // Versions' answer (err aside)
	rollback  func(ctx context.Context, to string) (*function.DeployResult, error) // Rollback's answer

	// recorded calls
	caller     string   // the caller id of the last Invoke's context
	invoked    []string // names
	events     [][]byte
	removed    []string
	deployBody []byte
}

var _ api.Functions = (*fakeFunctions)(nil)

func (f *fakeFunctions) Deploy(ctx context.Context, bundle io.Reader) (*function.DeployResult, error) {
	if f.deployCtx != nil {
		return f.deployCtx(ctx, bundle)
	}
	if f.deploy != nil {
		return f.deploy(bundle)
	}
	b, err := io.ReadAll(bundle)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.deployBody = b
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return &function.DeployResult{Name: "hello", Version: "sha256:abc", Mode: function.ModeFork, ReadyMs: 12}, nil
}

func (f *fakeFunctions) Invoke(ctx context.Context, name string, body io.Reader, size int64) (*function.Invocation, error) {
	f.mu.Lock()
	f.caller = function.CallerID(ctx)
	f.mu.Unlock()
	if f.invoke != nil {
		return f.invoke(body, size)
	}
	event, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.invoked = append(f.invoked, name)
	f.events = append(f.events, event)
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return f.inv, nil
}

func (f *fakeFunctions) List() []function.Status { return f.statuses }

func (f *fakeFunctions) Get(name string) (function.Status, error) {
	if f.err != nil {
		return function.Status{}, f.err
	}
	for _, s := range f.statuses {
		if s.Name == name {
			return s, nil
		}
	}
	return function.Status{}, fmt.Errorf("function %q: %w", name, errdefs.ErrNotFound)
}

func (f *fakeFunctions) Versions(ctx context.Context, name string) ([]function.VersionInfo, error) {
	return f.versions, f.err
}

func (f *fakeFunctions) Rollback(ctx context.Context, name, to string) (*function.DeployResult, error) {
	if f.rollback != nil {
		return f.rollback(ctx, to)
	}
	return nil, f.err
}

func (f *fakeFunctions) Remove(ctx context.Context, name string) error {
	f.removed = append(f.removed, name)
	return f.err
}

// fakeLogs is a hand-written api.Logs that records its query.
type fakeLogs struct {
	err   error
	lines []store.LogLine
	q     *store.LogQuery
	tail  int   // TailLogs' n; -1 until it is called
	end   int64 // what TailLogs answers as the end
}

func (l *fakeLogs) TailLogs(ctx context.Context, q store.LogQuery, n int) ([]store.LogLine, int64, error) {
	l.q, l.tail = &q, n
	return l.lines, l.end, l.err
}

func (l *fakeLogs) Logs(ctx context.Context, q store.LogQuery) ([]store.LogLine, error) {
	l.q = &q
	return l.lines, l.err
}

// fakeSecrets is a hand-written api.Secrets.
type fakeSecrets struct {
	err    error
	set    map[string][]byte
	metas  []secret.Meta
	remove []string
}

func (s *fakeSecrets) Set(ctx context.Context, name string, value []byte) error {
	if s.err != nil {
		return s.err
	}
	if s.set == nil {
		s.set = map[string][]byte{}
	}
	s.set[name] = value
	return nil
}

func (s *fakeSecrets) List(ctx context.Context) ([]secret.Meta, error) { return s.metas, s.err }

func (s *fakeSecrets) Remove(ctx context.Context, name string) error {
	s.remove = append(s.remove, name)
	return s.err
}

type fixture struct {
	fns     *fakeFunctions
	logs    *fakeLogs
	secrets *fakeSecrets
	h       http.Handler
	logBuf  *bytes.Buffer
}

func newFixture() *fixture {
	var buf bytes.Buffer
	f := &fixture{
		fns: &fakeFunctions{statuses: []function.Status{
			{Name: "hello", Version: "sha256:abc", Runtime: function.RuntimePython, State: "ready"},
			{Name: "other", Version: "sha256:def", Runtime: function.RuntimeNode, State: "starting"},
		}},
		logs:    &fakeLogs{tail: -1},
		secrets: &fakeSecrets{},
		logBuf:  &buf,
	}
	log := slog.New(slog.NewTextHandler(&buf, nil))
	f.h = api.NewServer(f.fns, f.logs, f.secrets, log, "test-version").Handler()
	return f
}

// do serves one request and returns the recorded response.
func (f *fixture) do(method, target string, body io.Reader) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, body)
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

// errorOf decodes an {"error": ...} body, failing the test if the response
// is not one.
func errorOf(t *testing.T, rec *httptest.ResponseRecorder) wire.ErrorBody {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var eb struct {
		Error *wire.ErrorBody `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error == nil {
		t.Fatalf("body is not an error object (%v): %s", err, rec.Body)
	}
	return *eb.Error
}

func TestErrorCategories(t *testing.T) {
	categories := []struct {
		err    error
		status int
		code   wire.Code
	}{
		{errdefs.ErrNotFound, 404, "not_found"},
		{errdefs.ErrInvalidArgument, 400, "bad_request"},
		{errdefs.ErrTooLarge, 413, "too_large"},
		{errdefs.ErrExists, 409, "exists"},
		{errdefs.ErrFailedPrecondition, 409, "failed_precondition"},
		{errdefs.ErrUnavailable, 503, "unavailable"},
		{errdefs.ErrDeadlineExceeded, 504, "deadline_exceeded"},
		{context.DeadlineExceeded, 504, "deadline_exceeded"},
		{context.Canceled, 499, "cancelled"},
		{errors.New("disk on fire"), 500, "internal"},
	}
	routes := []struct{ method, target, body string }{
		{"POST", "/v1/functions", "bundle"},
		{"GET", "/v1/functions/hello", ""},
		{"DELETE", "/v1/functions/hello", ""},
		{"POST", "/v1/functions/hello/invoke", `{}`},
		{"GET", "/v1/functions/hello/logs", ""},
		{"PUT", "/v1/secrets/API_KEY", "v"},
		{"GET", "/v1/secrets", ""},
		{"DELETE", "/v1/secrets/API_KEY", ""},
	}
	for _, c := range categories {
		for _, r := range routes {
			t.Run(string(c.code)+" "+r.method+" "+r.target, func(t *testing.T) {
				f := newFixture()
				// Wrapped with context, as the managers do.
				err := fmt.Errorf("doing the thing for %q: %w: %w", "hello", errors.New("it broke"), c.err)
				f.fns.err, f.secrets.err = err, err
				if r.target == "/v1/functions/hello/logs" {
					f.fns.err, f.logs.err = nil, err // the function exists; reading its logs fails
				}
				rec := f.do(r.method, r.target, strings.NewReader(r.body))
				if rec.Code != c.status {
					t.Errorf("status %d, want %d; body %s", rec.Code, c.status, rec.Body)
				}
				// The message is the error's without its category tagged on: the code says it
				// (errdefs.Message). The standard library's context errors are causes' text.
				want := `doing the thing for "hello": it broke`
				if c.code == wire.CodeInternal || errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded) {
					want = err.Error()
				}
				eb := errorOf(t, rec)
				if eb.Code != c.code || eb.Message != want {
					t.Errorf("error body %+v, want code %q and message %q", eb, c.code, want)
				}
			})
		}
	}
	// Only unclassified errors are logged as server errors.
	f := newFixture()
	f.fns.err = fmt.Errorf("wrapped: %w", errdefs.ErrNotFound)
	f.do("GET", "/v1/functions/x", nil)
	if f.logBuf.Len() != 0 {
		t.Errorf("a not-found was logged: %s", f.logBuf)
	}
	f.fns.err = errors.New("disk on fire")
	f.do("GET", "/v1/functions/x", nil)
	if !strings.Contains(f.logBuf.String(), "disk on fire") {
		t.Errorf("an internal error was not logged: %q", f.logBuf)
	}
}

func TestInvokeSuccess(t *testing.T) {
	f := newFixture()
	f.fns.inv = &function.Invocation{RequestID: "r-123", Version: "sha256:abc", Value: json.RawMessage(`{"answer":42}`),
		Elapsed: 12345 * time.Microsecond, Phases: []agentproc.Phase{{Name: "dir", Took: 41 * time.Microsecond}, {Name: "run", Took: 1200 * time.Microsecond}}}
	rec := f.do("POST", "/v1/functions/hello/invoke", strings.NewReader(`{"q":"life"}`))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if got := rec.Body.String(); got != "{\"answer\":42}\n" {
		t.Errorf("body %q, want the handler's value and a newline", got)
	}
	for h, want := range map[string]string{
		"Content-Type": "application/json", "X-Zygo-Request-Id": "r-123",
		"X-Zygo-Version": "sha256:abc", "X-Zygo-Duration-Ms": "12.35",
		"Server-Timing": "dir;dur=0.041, run;dur=1.200",
	} {
		if got := rec.Header().Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	if !slices.Equal(f.fns.invoked, []string{"hello"}) || string(f.fns.events[0]) != `{"q":"life"}` {
		t.Errorf("Invoke called with %q %q", f.fns.invoked, f.fns.events)
	}
}

func TestInvokeFailures(t *testing.T) {
	for _, c := range []struct {
		failure agentproc.Failure
		status  int
	}{
		{agentproc.FailHandler, 500},
		{agentproc.FailTimeout, 504},
		{agentproc.FailCrashed, 502},
		{agentproc.FailZygote, 503},
		{agentproc.FailResponseLarge, 502},
		{agentproc.FailInternal, 500},
		{agentproc.FailLimit, 502},
	} {
		t.Run(string(c.failure), func(t *testing.T) {
			f := newFixture()
			f.fns.inv = &function.Invocation{RequestID: "r-9", Version: "sha256:abc", Failure: c.failure,
				Error: &agentproc.HandlerError{Type: "ValueError", Message: "bad input", Traceback: "Traceback (most recent call last):\n..."}}
			rec := f.do("POST", "/v1/functions/hello/invoke", strings.NewReader(`1`))
			if rec.Code != c.status {
				t.Errorf("status %d, want %d", rec.Code, c.status)
			}
			if got := rec.Header().Get("X-Zygo-Request-Id"); got != "r-9" {
				t.Errorf("X-Zygo-Request-Id %q, want r-9 on a failed request too", got)
			}
			eb := errorOf(t, rec)
			want := wire.ErrorBody{Code: wire.Code(c.failure), RequestID: "r-9", Type: "ValueError", Message: "bad input",
				Traceback: "Traceback (most recent call last):\n..."}
			if eb != want {
				t.Errorf("error body %+v, want %+v", eb, want)
			}
		})
	}
	t.Run("without details", func(t *testing.T) {
		f := newFixture()
		f.fns.inv = &function.Invocation{RequestID: "r-10", Failure: agentproc.FailCrashed}
		rec := f.do("POST", "/v1/functions/hello/invoke", strings.NewReader(`1`))
		if eb := errorOf(t, rec); rec.Code != 502 || eb.Code != "crashed" || eb.RequestID != "r-10" {
			t.Errorf("status %d, body %+v", rec.Code, eb)
		}
	})
}

// zeroReader reads as an endless run of zero bytes, so a large body costs
// the test no memory.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// The server leaves the event to the manager, which limits it at the
// function's own max_request_kib: nothing of the body is read before
// Invoke, and Invoke learns the declared length.
func TestInvokeLeavesBodyUnread(t *testing.T) {
	const size = function.MaxBodyKiB << 10
	f := newFixture()
	body := &countingReader{r: io.LimitReader(zeroReader{}, size)}
	var readBefore, gotSize int64 = -1, -2
	f.fns.invoke = func(r io.Reader, n int64) (*function.Invocation, error) {
		readBefore, gotSize = body.n.Load(), n
		return nil, errdefs.ErrTooLarge
	}
	req := httptest.NewRequest("POST", "/v1/functions/hello/invoke", body)
	req.ContentLength = size
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge || errorOf(t, rec).Code != "too_large" {
		t.Errorf("status %d %s, want 413 too_large", rec.Code, rec.Body)
	}
	if readBefore != 0 || gotSize != size {
		t.Errorf("before Invoke the server read %d bytes of the event (want 0); Invoke got size %d, want %d", readBefore, gotSize, size)
	}
}

func TestLogs(t *testing.T) {
	f := newFixture()
	f.logs.lines = []store.LogLine{{ID: 7, Function: "hello", Line: "a"}, {ID: 9, Function: "hello", Line: "b"}}
	rec := f.do("GET", "/v1/functions/hello/logs?request=r-1&after=5&limit=2", nil)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if want := (store.LogQuery{Function: "hello", RequestID: "r-1", AfterID: 5, Limit: 2}); f.logs.q == nil || *f.logs.q != want {
		t.Errorf("query %+v, want %+v", f.logs.q, want)
	}
	var body wire.LogsBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Lines) != 2 || body.Next != 9 {
		t.Errorf("body %+v, want 2 lines and next 9", body)
	}

	// No new lines: next stays at after, and lines is [] rather than null.
	f.logs.lines = nil
	rec = f.do("GET", "/v1/functions/hello/logs?after=42", nil)
	if !strings.Contains(rec.Body.String(), `"lines": []`) {
		t.Errorf("empty answer %s, want \"lines\": []", rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Next != 42 {
		t.Errorf("empty answer next = %d (%v), want 42", body.Next, err)
	}
	if f.logs.q.Limit != 0 || f.logs.q.RequestID != "" {
		t.Errorf("defaults: query %+v", f.logs.q)
	}

	for _, q := range []string{"after=abc", "after=1.5", "after=99999999999999999999", "limit=0", "limit=-1",
		"limit=10001", "limit=ten", "after=1&limit=1e3"} {
		t.Run(q, func(t *testing.T) {
			f := newFixture()
			rec := f.do("GET", "/v1/functions/hello/logs?"+q, nil)
			if rec.Code != 400 {
				t.Errorf("status %d, want 400", rec.Code)
			}
			if eb := errorOf(t, rec); eb.Code != "bad_request" {
				t.Errorf("error body %+v", eb)
			}
			if f.logs.q != nil {
				t.Errorf("the store was queried with %+v", f.logs.q)
			}
		})
	}
	for _, q := range []string{"limit=1", "limit=10000", "limit=", "after="} { // empty means not given
		if rec := f.do("GET", "/v1/functions/hello/logs?"+q, nil); rec.Code != 200 {
			t.Errorf("%s: status %d", q, rec.Code)
		}
	}
	// An unknown function is a 404, not an empty list.
	rec = f.do("GET", "/v1/functions/nope/logs", nil)
	if rec.Code != 404 || errorOf(t, rec).Code != "not_found" {
		t.Errorf("logs of an unknown function: status %d %s", rec.Code, rec.Body)
	}
}

func TestDeploy(t *testing.T) {
	t.Run("created", func(t *testing.T) {
		f := newFixture()
		rec := f.do("POST", "/v1/functions", strings.NewReader("the bundle bytes"))
		if rec.Code != 201 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		var res function.DeployResult
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || res.Name != "hello" || res.Version != "sha256:abc" {
			t.Errorf("body %s (%v)", rec.Body, err)
		}
		if string(f.fns.deployBody) != "the bundle bytes" {
			t.Errorf("Deploy read %q", f.fns.deployBody)
		}
	})
	t.Run("unchanged", func(t *testing.T) {
		f := newFixture()
		f.fns.deploy = func(io.Reader) (*function.DeployResult, error) {
			return &function.DeployResult{Name: "hello", Unchanged: true}, nil
		}
		if rec := f.do("POST", "/v1/functions", strings.NewReader("b")); rec.Code != 200 {
			t.Errorf("status %d, want 200 for an unchanged version", rec.Code)
		}
	})
	t.Run("import failed", func(t *testing.T) {
		for _, had := range []bool{true, false} {
			f := newFixture()
			f.fns.deploy = func(io.Reader) (*function.DeployResult, error) {
				ie := &agentproc.ImportError{Type: "ModuleNotFoundError", Message: "No module named 'numpyy'",
					Traceback: "Traceback (most recent call last):\n  File \"/code/main.py\", line 1\nModuleNotFoundError: No module named 'numpyy'\n"}
				return nil, fmt.Errorf("deploying hello: %w", &function.ImportFailed{ImportError: ie, HadPrevious: had})
			}
			rec := f.do("POST", "/v1/functions", strings.NewReader("b"))
			if rec.Code != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422: %s", rec.Code, rec.Body)
			}
			eb := errorOf(t, rec)
			if eb.Code != "import_failed" || eb.Type != "ModuleNotFoundError" ||
				!strings.Contains(eb.Traceback, `File "/code/main.py", line 1`) ||
				!strings.Contains(eb.Message, "No module named 'numpyy'") {
				t.Errorf("error body %+v", eb)
			}
			// Only a deploy over a serving version may say that one keeps serving.
			if keeps := strings.Contains(eb.Message, "previous version keeps serving"); keeps != had ||
				(!had && !strings.Contains(eb.Message, "no version of it was deployed")) {
				t.Errorf("with a previous version %v: message %q", had, eb.Message)
			}
		}
	})
	t.Run("bundle over the compressed limit", func(t *testing.T) {
		// What the manager does first with the body.
		f := newFixture()
		f.fns.deploy = func(r io.Reader) (*function.DeployResult, error) {
			_, err := function.ReadBundle(r)
			return nil, err
		}
		body, stop := incompressibleBundle(function.MaxBundleBytes + 1<<20)
		defer stop()
		rec := f.do("POST", "/v1/functions", body)
		if rec.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("status %d, want 413: %s", rec.Code, rec.Body)
		}
	})
}

// incompressibleBundle streams a gzip'd tar holding one file of size random
// bytes, so its compressed size is about size too. stop ends the writer.
func incompressibleBundle(size int64) (io.Reader, func()) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		gz, _ := gzip.NewWriterLevel(pw, gzip.NoCompression)
		tw := tar.NewWriter(gz)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "noise.bin", Mode: 0o644, Size: size})
		if _, err := io.CopyN(tw, rand.NewChaCha8([32]byte{2}), size); err != nil {
			pw.CloseWithError(err)
			return
		}
		tw.Close()
		pw.CloseWithError(gz.Close())
	}()
	return pr, func() { pr.Close(); <-done }
}

func TestUnknownRoute(t *testing.T) {
	for _, c := range []struct{ method, target string }{
		{"GET", "/"},
		{"GET", "/v2/functions"},
		{"GET", "/v1/functions/hello/nope"},
		{"GET", "/v1/status/"},
	} {
		f := newFixture()
		rec := f.do(c.method, c.target, nil)
		if rec.Code != 404 {
			t.Errorf("%s %s: status %d, want 404", c.method, c.target, rec.Code)
			continue
		}
		eb := errorOf(t, rec)
		if eb.Code != "not_found" || !strings.Contains(eb.Message, c.method+" "+c.target) {
			t.Errorf("%s %s: error body %+v", c.method, c.target, eb)
		}
		if v := rec.Header().Get(wire.APIVersionHeader); v != "1" {
			t.Errorf("%s %s: %s %q, want 1", c.method, c.target, wire.APIVersionHeader, v)
		}
	}
}

// A route's path with a method it does not take is a 405 listing those it does (Allow), with
// the one error body; a path of no route stays a 404.
func TestWrongMethod(t *testing.T) {
	for _, c := range []struct{ method, target, allow string }{
		{"POST", "/v1/status", "GET, HEAD"},
		{"PATCH", "/v1/functions/hello", "DELETE, GET, HEAD"},
		{"GET", "/v1/functions/hello/invoke", "POST"},
		{"DELETE", "/v1/secrets", "GET, HEAD"},
		{"PUT", "/v1/sandboxes/sb-1/ports/80", "DELETE, POST"},
	} {
		f := newFixture()
		rec := f.do(c.method, c.target, nil)
		if rec.Code != 405 || rec.Header().Get("Allow") != c.allow || rec.Header().Get(wire.APIVersionHeader) != "1" {
			t.Errorf("%s %s: status %d, Allow %q, version %q; want 405, %q, 1", c.method, c.target, rec.Code,
				rec.Header().Get("Allow"), rec.Header().Get(wire.APIVersionHeader), c.allow)
			continue
		}
		eb := errorOf(t, rec)
		if eb.Code != wire.CodeMethodNotAllowed || !strings.Contains(eb.Message, c.method) || !strings.Contains(eb.Message, c.allow) {
			t.Errorf("%s %s: error body %+v", c.method, c.target, eb)
		}
	}
}

func TestStatusListGetRemove(t *testing.T) {
	f := newFixture()
	rec := f.do("GET", "/v1/status", nil)
	var st wire.StatusBody
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != 200 || st.Version != "test-version" || st.Functions != 2 ||
		st.APIVersion != wire.APIVersion || rec.Header().Get(wire.APIVersionHeader) != "1" {
		t.Errorf("status: %d %s (%v)", rec.Code, rec.Body, err)
	}

	rec = f.do("GET", "/v1/functions", nil)
	var list wire.Page[wire.Function]
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Items) != 2 || list.Items[1].Name != "other" || list.NextCursor != "" {
		t.Errorf("list: %s (%v)", rec.Body, err)
	}

	rec = f.do("GET", "/v1/functions/other", nil)
	var one function.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &one); err != nil || one.Name != "other" || one.Runtime != function.RuntimeNode {
		t.Errorf("get: %s (%v)", rec.Body, err)
	}

	rec = f.do("DELETE", "/v1/functions/other", nil)
	if rec.Code != 204 || rec.Body.Len() != 0 || !slices.Equal(f.fns.removed, []string{"other"}) || rec.Header().Get(wire.APIVersionHeader) != "1" {
		t.Errorf("remove: %d %q, removed %q, headers %v", rec.Code, rec.Body, f.fns.removed, rec.Header())
	}
}

func TestSecretRoutes(t *testing.T) {
	f := newFixture()
	value := []byte("s3cr3t\x00\xff\n")
	rec := f.do("PUT", "/v1/secrets/API_KEY", bytes.NewReader(value))
	if rec.Code != 204 || !bytes.Equal(f.secrets.set["API_KEY"], value) {
		t.Errorf("set: %d, stored %q", rec.Code, f.secrets.set["API_KEY"])
	}

	rec = f.do("PUT", "/v1/secrets/BIG", io.LimitReader(zeroReader{}, secret.MaxValueBytes+1))
	if rec.Code != 413 || errorOf(t, rec).Code != "too_large" {
		t.Errorf("oversize value: status %d %s", rec.Code, rec.Body)
	}
	if _, ok := f.secrets.set["BIG"]; ok {
		t.Error("an oversize value reached the store")
	}

	at := time.UnixMilli(1_700_000_000_000).UTC()
	f.secrets.metas = []secret.Meta{{Name: "API_KEY", UpdatedAt: at}}
	rec = f.do("GET", "/v1/secrets", nil)
	var metas wire.Page[wire.SecretMeta]
	if err := json.Unmarshal(rec.Body.Bytes(), &metas); err != nil || len(metas.Items) != 1 || !metas.Items[0].UpdatedAt.Equal(at) {
		t.Errorf("list: %s (%v)", rec.Body, err)
	}
	if bytes.Contains(rec.Body.Bytes(), []byte("s3cr3t")) {
		t.Errorf("list shows a value: %s", rec.Body)
	}

	rec = f.do("DELETE", "/v1/secrets/API_KEY", nil)
	if rec.Code != 204 || !slices.Equal(f.secrets.remove, []string{"API_KEY"}) {
		t.Errorf("remove: %d, removed %q", rec.Code, f.secrets.remove)
	}
}

// A pool tenant's secret is set with ?tenant= and stored in the tenants' namespace; a bare name
// in that namespace is refused, so no caller sets (or, through a manifest, reads) another
// tenant's secret by spelling its stored name.
func TestTenantSecretNamespace(t *testing.T) {
	f := newFixture()
	if rec := f.do("PUT", "/v1/secrets/DB?tenant=acme", strings.NewReader("pw")); rec.Code != http.StatusNoContent {
		t.Fatalf("PUT ?tenant=acme: %d %s", rec.Code, rec.Body)
	}
	if _, ok := f.secrets.set["tenant_acme__DB"]; !ok {
		t.Errorf("stored names %v, want tenant_acme__DB", f.secrets.set)
	}
	for _, c := range []struct{ path, field string }{
		{"/v1/secrets/tenant_other__DB", "name"},
		{"/v1/secrets/DB?tenant=Bad", "tenant"},
		{"/v1/secrets/bad-name?tenant=acme", "secret name"},
	} {
		rec := f.do("PUT", c.path, strings.NewReader("x"))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), c.field) {
			t.Errorf("PUT %s: %d %s, want 400 naming %s", c.path, rec.Code, rec.Body, c.field)
		}
	}
	if rec := f.do("DELETE", "/v1/secrets/DB?tenant=acme", nil); rec.Code != http.StatusNoContent ||
		len(f.secrets.remove) != 1 || f.secrets.remove[0] != "tenant_acme__DB" {
		t.Errorf("DELETE ?tenant=acme: %d %s, removed %v", rec.Code, rec.Body, f.secrets.remove)
	}
}
