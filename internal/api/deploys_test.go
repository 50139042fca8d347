package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// doAccept is fixture.do with an Accept header.
func (f *fixture) doAccept(method, target, accept string, body io.Reader) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, body)
	req.Header.Set("Accept", accept)
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

func deployEvents(t *testing.T, rec *httptest.ResponseRecorder) []wire.DeployEvent {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != wire.DeployStreamType {
		t.Fatalf("Content-Type %q, want %s: %s", ct, wire.DeployStreamType, rec.Body)
	}
	var out []wire.DeployEvent
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		var ev wire.DeployEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, ev)
	}
	return out
}

// stepsThen is a deploy that reports every step and then returns res, err.
func stepsThen(res *function.DeployResult, err error) func(context.Context, io.Reader) (*function.DeployResult, error) {
	return func(ctx context.Context, r io.Reader) (*function.DeployResult, error) {
		_, _ = io.ReadAll(r)
		for _, s := range []function.Step{function.StepUploading, function.StepUnpacking, function.StepImporting, function.StepWarmup, function.StepReady} {
			if err != nil && s == function.StepWarmup {
				break
			}
			function.ReportProgress(ctx, function.Progress{Step: s, Version: "sha256:abc"})
		}
		return res, err
	}
}

// TestDeployStream: with Accept: application/x-ndjson a deploy answers each step, then the
// result with the status the plain call would have had; a failure after the stream began
// ends it with the error body and its status; a deploy refused before the bundle was checked
// is a plain error answer; without the Accept header the answer is the plain JSON one.
func TestDeployStream(t *testing.T) {
	f := newFixture()
	f.fns.deployCtx = stepsThen(&function.DeployResult{Name: "hello", Version: "sha256:abc"}, nil)
	evs := deployEvents(t, f.doAccept("POST", "/v1/functions", wire.DeployStreamType, strings.NewReader("b")))
	var steps []string
	for _, ev := range evs[:len(evs)-1] {
		steps = append(steps, ev.Step)
	}
	if got := strings.Join(steps, " "); got != "uploading unpacking importing warmup ready" {
		t.Errorf("steps %q", got)
	}
	if last := evs[len(evs)-1]; last.Result == nil || last.Result.Version != "sha256:abc" || last.Status != 201 {
		t.Errorf("last line %+v, want the result with status 201", last)
	}

	ie := &agentproc.ImportError{Type: "ImportTimeout", Message: "the import and warm-up took longer than limits.import_timeout_ms=2000"}
	f.fns.deployCtx = stepsThen(nil, &function.ImportFailed{ImportError: ie, HadPrevious: true})
	evs = deployEvents(t, f.doAccept("POST", "/v1/functions", wire.DeployStreamType, strings.NewReader("b")))
	if last := evs[len(evs)-1]; last.Error == nil || last.Error.Code != wire.CodeImportFailed || last.Status != 422 ||
		!strings.Contains(last.Error.Message, "previous version keeps serving: ImportTimeout: the import and warm-up took longer than limits.import_timeout_ms=2000") {
		t.Errorf("last line of a failed deploy %+v", last)
	}

	f.fns.deployCtx = func(ctx context.Context, r io.Reader) (*function.DeployResult, error) {
		function.ReportProgress(ctx, function.Progress{Step: function.StepUploading})
		return nil, fmt.Errorf("%w: zygo.toml: queue: -1 is outside 0..10000", errdefs.ErrInvalidArgument)
	}
	rec := f.doAccept("POST", "/v1/functions", wire.DeployStreamType, strings.NewReader("b"))
	if eb := errorOf(t, rec); rec.Code != 400 || eb.Message != "zygo.toml: queue: -1 is outside 0..10000" {
		t.Errorf("a refused bundle: %d %+v, want a plain 400 naming queue", rec.Code, eb)
	}

	f.fns.deployCtx = stepsThen(&function.DeployResult{Name: "hello", Version: "sha256:abc"}, nil)
	if rec := f.do("POST", "/v1/functions", strings.NewReader("b")); rec.Code != 201 || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("a plain deploy: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
}

// TestVersionsPages: the versions list is paginated with limit and cursor, and refuses a bad
// limit or cursor naming it.
func TestVersionsPages(t *testing.T) {
	f := newFixture()
	now := time.Now()
	for i := range 5 { // most recently deployed first, as the Manager lists them
		f.fns.versions = append(f.fns.versions, function.VersionInfo{Hash: fmt.Sprintf("sha256:%d", i),
			DeployedAt: now.Add(-time.Duration(i) * time.Second), Active: i == 0})
	}
	var got []string
	next := ""
	for pages := 0; ; pages++ {
		rec := f.do("GET", "/v1/functions/hello/versions?limit=2&cursor="+url.QueryEscape(next), nil)
		var page wire.Page[wire.Version]
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &page) != nil || pages > 3 {
			t.Fatalf("page %d: %d %s", pages, rec.Code, rec.Body)
		}
		for _, v := range page.Items {
			got = append(got, v.Hash)
		}
		if next = page.NextCursor; next == "" {
			break
		}
	}
	if strings.Join(got, ",") != "sha256:0,sha256:1,sha256:2,sha256:3,sha256:4" {
		t.Errorf("versions over pages: %v", got)
	}
	for q, field := range map[string]string{"limit=0": "limit: ", "limit=1001": "limit: ", "limit=x": "limit: ", "cursor=%21%21": "cursor: "} {
		rec := f.do("GET", "/v1/functions/hello/versions?"+q, nil)
		if eb := errorOf(t, rec); rec.Code != 400 || !strings.HasPrefix(eb.Message, field) {
			t.Errorf("?%s: %d %q, want 400 naming %s", q, rec.Code, eb.Message, field)
		}
	}
}

// TestRollbackRoute: the body's to reaches Rollback; an unknown version is 404 and an
// ambiguous one 400, each naming to; an unknown body field is 400.
func TestRollbackRoute(t *testing.T) {
	f := newFixture()
	var gotTo string
	f.fns.rollback = func(_ context.Context, to string) (*function.DeployResult, error) {
		gotTo = to
		switch to {
		case "sha256:ffff":
			return nil, fmt.Errorf("%w: to: %q matches no version of function %q", errdefs.ErrNotFound, to, "hello")
		case "ab":
			return nil, fmt.Errorf("%w: to: %q matches 2 versions of function %q; give more of the hash", errdefs.ErrInvalidArgument, to, "hello")
		}
		return &function.DeployResult{Name: "hello", Version: "sha256:abc"}, nil
	}
	if rec := f.do("POST", "/v1/functions/hello/rollback", strings.NewReader(`{"to":"sha256:ab"}`)); rec.Code != 201 || gotTo != "sha256:ab" {
		t.Errorf("rollback: %d, to %q", rec.Code, gotTo)
	}
	if rec := f.do("POST", "/v1/functions/hello/rollback", nil); rec.Code != 201 || gotTo != "" {
		t.Errorf("rollback without a body: %d, to %q", rec.Code, gotTo)
	}
	for body, status := range map[string]int{`{"to":"sha256:ffff"}`: 404, `{"to":"ab"}`: 400} {
		rec := f.do("POST", "/v1/functions/hello/rollback", strings.NewReader(body))
		if eb := errorOf(t, rec); rec.Code != status || !strings.HasPrefix(eb.Message, "to: ") {
			t.Errorf("%s: %d %q, want %d naming to", body, rec.Code, eb.Message, status)
		}
	}
	if rec := f.do("POST", "/v1/functions/hello/rollback", strings.NewReader(`{"version":"x"}`)); rec.Code != 400 {
		t.Errorf("an unknown field: %d", rec.Code)
	}
}

// TestInvokeQueueFull: a full queue is 429 too_many_requests with Retry-After in seconds.
func TestInvokeQueueFull(t *testing.T) {
	f := newFixture()
	f.fns.err = &function.QueueFullError{Function: "hello", Concurrency: 8, Queue: 16, After: 2 * time.Second}
	rec := f.do("POST", "/v1/functions/hello/invoke", strings.NewReader(`{}`))
	eb := errorOf(t, rec)
	if rec.Code != http.StatusTooManyRequests || eb.Code != wire.CodeTooManyRequests || rec.Header().Get("Retry-After") != "2" ||
		eb.Message != `function "hello" is at its concurrency (8) and its queue (16) is full; retry after 2s` {
		t.Errorf("queue full: %d %+v, Retry-After %q", rec.Code, eb, rec.Header().Get("Retry-After"))
	}
}
