package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// fakeSandboxes is a Sandboxes in memory: records by id, checkpoints by id; calls are noted.
type fakeSandboxes struct {
	recs  map[string]sandbox.SandboxRecord
	cps   map[string]sandbox.CheckpointRecord
	calls []string
	n     int
}

var _ Sandboxes = (*fakeSandboxes)(nil)

func newFakeSandboxes() *fakeSandboxes {
	return &fakeSandboxes{recs: map[string]sandbox.SandboxRecord{}, cps: map[string]sandbox.CheckpointRecord{}}
}

func (f *fakeSandboxes) note(format string, a ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, a...))
}

func (f *fakeSandboxes) add(opts sandbox.CreateOptions) sandbox.SandboxRecord {
	f.n++
	rec := sandbox.SandboxRecord{ID: fmt.Sprintf("sb-%016d", f.n), State: sandbox.Running, Options: opts, CreatedAt: time.Unix(0, 0)}
	rec.Options.Lifecycle.ExpiresAt = time.Unix(0, 0).Add(opts.Lifecycle.Timeout)
	f.recs[rec.ID] = rec
	return rec
}

func (f *fakeSandboxes) get(id string) (sandbox.SandboxRecord, error) {
	rec, ok := f.recs[id]
	if !ok {
		return rec, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return rec, nil
}

func (f *fakeSandboxes) Create(_ context.Context, o sandbox.CreateOptions) (sandbox.SandboxRecord, error) {
	f.note("create %s env=%v timeout=%s on=%s", o.Template, o.Env, o.Lifecycle.Timeout, o.Lifecycle.OnTimeout)
	return f.add(o), nil
}
func (f *fakeSandboxes) Get(_ context.Context, id string) (sandbox.SandboxRecord, error) {
	return f.get(id)
}
func (f *fakeSandboxes) List(context.Context) ([]sandbox.SandboxRecord, error) {
	var out []sandbox.SandboxRecord
	for i := 1; i <= f.n; i++ {
		if r, ok := f.recs[fmt.Sprintf("sb-%016d", i)]; ok {
			out = append(out, r)
		}
	}
	return out, nil
}
func (f *fakeSandboxes) Remove(_ context.Context, id string) error {
	if _, err := f.get(id); err != nil {
		return err
	}
	delete(f.recs, id)
	f.note("remove %s", id)
	return nil
}
func (f *fakeSandboxes) Fork(_ context.Context, id string, o sandbox.ForkOptions) (sandbox.ForkResult, error) {
	f.note("fork %s n=%d timeout=%s", id, o.N, o.Lifecycle.Timeout)
	var res sandbox.ForkResult
	for i := range o.N {
		if i == 1 {
			err := fmt.Errorf("restoring: %w", errdefs.ErrUnavailable)
			res.Children = append(res.Children, sandbox.ForkChild{Err: err, Error: err.Error()})
			continue
		}
		res.Children = append(res.Children, sandbox.ForkChild{Sandbox: f.add(sandbox.CreateOptions{})})
	}
	return res, nil
}
func (f *fakeSandboxes) Pause(_ context.Context, id string) (sandbox.SandboxRecord, error) {
	rec, err := f.get(id)
	if err != nil {
		return rec, err
	}
	rec.State = sandbox.Paused
	f.recs[id] = rec
	f.note("pause %s", id)
	return rec, nil
}
func (f *fakeSandboxes) Resume(_ context.Context, id string, d time.Duration) (sandbox.SandboxRecord, error) {
	rec, err := f.get(id)
	if err != nil {
		return rec, err
	}
	rec.State = sandbox.Running
	f.recs[id] = rec
	f.note("resume %s %s", id, d)
	return rec, nil
}
func (f *fakeSandboxes) Restore(_ context.Context, cp string, o sandbox.RestoreOptions) (sandbox.SandboxRecord, error) {
	f.note("restore %s timeout=%s", cp, o.Lifecycle.Timeout)
	return f.add(sandbox.CreateOptions{}), nil
}
func (f *fakeSandboxes) SetTimeout(_ context.Context, id string, d time.Duration, _ string) (sandbox.SandboxRecord, error) {
	f.note("timeout %s %s", id, d)
	return f.get(id)
}
func (f *fakeSandboxes) Checkpoint(_ context.Context, id, tag string) (sandbox.CheckpointRecord, error) {
	cp := sandbox.CheckpointRecord{ID: "cp-00000000000000" + fmt.Sprintf("%02d", len(f.cps)), Tag: tag, SandboxID: id}
	f.cps[cp.ID] = cp
	return cp, nil
}
func (f *fakeSandboxes) Checkpoints(_ context.Context, id string) ([]sandbox.CheckpointRecord, error) {
	var out []sandbox.CheckpointRecord
	for _, cp := range f.cps {
		if id == "" || cp.SandboxID == id {
			out = append(out, cp)
		}
	}
	return out, nil
}
func (f *fakeSandboxes) GetCheckpoint(_ context.Context, id string) (sandbox.CheckpointRecord, error) {
	if cp, ok := f.cps[id]; ok {
		return cp, nil
	}
	return sandbox.CheckpointRecord{}, fmt.Errorf("checkpoint %q: %w", id, errdefs.ErrNotFound)
}
func (f *fakeSandboxes) RemoveCheckpoint(_ context.Context, id string) error {
	if _, ok := f.cps[id]; !ok {
		return fmt.Errorf("checkpoint %q: %w", id, errdefs.ErrNotFound)
	}
	delete(f.cps, id)
	f.note("rmcp %s", id)
	return nil
}
func (f *fakeSandboxes) Templates() []sandbox.Template {
	return []sandbox.Template{{Name: sandbox.BaseTemplate}}
}
func (f *fakeSandboxes) MaxFork() int { return 16 }

type keys map[string]string

func (k keys) Authenticate(s string) (string, bool) { n, ok := k[s]; return n, ok }

var testKey = make([]byte, 32)

func newTestHandler(f *fakeSandboxes, envd http.Handler) http.Handler {
	return Handler(Config{Sandboxes: f, Auth: keys{"zygo_abc": "ci", "0123": "default"}, AccessKey: testKey, Envd: envd,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// do sends one request and returns the status and body.
func do(t *testing.T, h http.Handler, method, path, key, body string, hdr ...string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func wantE2BError(t *testing.T, what string, status int, body string, want int, sub string) {
	t.Helper()
	var e errorBody
	if status != want || json.Unmarshal([]byte(body), &e) != nil || e.Code != want || !strings.Contains(e.Message, sub) {
		t.Errorf("%s: %d %s, want %d with %q", what, status, body, want, sub)
	}
}

func TestAuth(t *testing.T) {
	h := newTestHandler(newFakeSandboxes(), nil)
	for _, k := range []string{"zygo_abc", "e2b_abc", "e2b_0123", "0123"} {
		if st, body := do(t, h, "GET", "/v2/sandboxes", k, ""); st != 200 {
			t.Errorf("key %q: %d %s", k, st, body)
		}
	}
	for _, k := range []string{"", "e2b_", "e2b_abd", "zygo_0123"} {
		st, body := do(t, h, "GET", "/v2/sandboxes", k, "")
		wantE2BError(t, "key "+k, st, body, 401, "API key")
	}
	st, body := do(t, h, "GET", "/nope", "zygo_abc", "")
	wantE2BError(t, "an unknown route", st, body, 404, "no route")
}

func TestEnvdRouting(t *testing.T) {
	served := 0
	envd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++; w.WriteHeader(204) })
	h := newTestHandler(newFakeSandboxes(), envd)
	id := "sb-0000000000000001"
	if st, _ := do(t, h, "GET", "/health", "", "", SandboxIDHeader, id); st != 204 || served != 1 {
		t.Errorf("a request naming a sandbox: %d, served by envd %d times", st, served)
	}
	if st, _ := do(t, h, "GET", "/health", "", ""); st != 401 || served != 1 {
		t.Errorf("a request naming none, without a key: %d (envd served %d)", st, served)
	}
	h = newTestHandler(newFakeSandboxes(), nil)
	st, body := do(t, h, "GET", "/health", "", "", SandboxIDHeader, id)
	wantE2BError(t, "no envd", st, body, 501, "envd")
	r1 := sandbox.SandboxRecord{ID: id, CreatedAt: time.Unix(0, 1)}
	r2, r1again := r1, r1
	r2.ID = "sb-0000000000000002"
	r1again.CreatedAt = time.Unix(0, 2) // the same id made again later: another sandbox
	if a, b, c := AccessToken(testKey, r1), AccessToken(testKey, r2), AccessToken(testKey, r1again); a == b || a == c || len(a) != 64 {
		t.Errorf("access tokens %s, %s, %s: want 64 hex digits, one per sandbox and creation", a, b, c)
	}
}

func TestCreateListGetKill(t *testing.T) {
	f := newFakeSandboxes()
	h := newTestHandler(f, nil)
	st, body := do(t, h, "POST", "/v2/sandboxes", "zygo_abc",
		`{"templateID":"base","timeout":300,"metadata":{"team":"a b"},"envVars":{"B":"2","A":"1"},"secure":true,"allow_internet_access":true,"autoPause":true}`)
	var sb sandboxBody
	if st != 201 || json.Unmarshal([]byte(body), &sb) != nil || sb.SandboxID == "" || sb.EnvdAccessToken != AccessToken(testKey, f.recs[sb.SandboxID]) ||
		sb.TemplateID != "base" || sb.EnvdVersion != DefaultEnvdVersion {
		t.Fatalf("create: %d %s", st, body)
	}
	if want := "create base env=[A=1 B=2] timeout=5m0s on=pause"; f.calls[0] != want {
		t.Errorf("create called %q, want %q", f.calls[0], want)
	}
	f.add(sandbox.CreateOptions{Metadata: map[string]string{"team": "b"}})

	for _, c := range []struct {
		body, sub string
		status    int
	}{
		{`{"templateID":"nope"}`, "template 'nope' not found", 404},
		{`{"templateID":"base","colour":1}`, "colour", 400},
		{`{"timeout":1}`, "templateID", 400},
		{`{"templateID":"base","timeout":-1}`, "timeout", 400},
		{`{"templateID":"base","network":{"allowOut":["1.1.1.1"]}}`, "network", 400},
		{`{"templateID":"base"} {}`, "after the JSON", 400},
	} {
		st, body := do(t, h, "POST", "/sandboxes", "zygo_abc", c.body)
		wantE2BError(t, c.body, st, body, c.status, c.sub)
	}

	var listed []sandboxDetail
	st, body = do(t, h, "GET", "/v2/sandboxes?metadata="+`team%3Da%2520b`+"&state=running,paused", "zygo_abc", "")
	if st != 200 || json.Unmarshal([]byte(body), &listed) != nil || len(listed) != 1 || listed[0].SandboxID != sb.SandboxID {
		t.Errorf("list by metadata: %d %s", st, body)
	}
	st, body = do(t, h, "GET", "/v2/sandboxes?limit=1", "zygo_abc", "")
	if st != 200 || json.Unmarshal([]byte(body), &listed) != nil || len(listed) != 1 {
		t.Errorf("list limit 1: %d %s", st, body)
	}
	st, body = do(t, h, "GET", "/v2/sandboxes?state=gone", "zygo_abc", "")
	wantE2BError(t, "a bad state", st, body, 400, "state")

	var d sandboxDetail
	st, body = do(t, h, "GET", "/sandboxes/"+sb.SandboxID, "zygo_abc", "")
	if st != 200 || json.Unmarshal([]byte(body), &d) != nil || d.State != "running" || d.Metadata["team"] != "a b" || d.EnvdAccessToken == "" {
		t.Errorf("get: %d %s", st, body)
	}
	if st, body = do(t, h, "DELETE", "/sandboxes/"+sb.SandboxID, "zygo_abc", ""); st != 204 {
		t.Errorf("kill: %d %s", st, body)
	}
	st, body = do(t, h, "DELETE", "/sandboxes/"+sb.SandboxID, "zygo_abc", "")
	wantE2BError(t, "second kill", st, body, 404, "not found")
	st, body = do(t, h, "GET", "/sandboxes/"+sb.SandboxID, "zygo_abc", "")
	wantE2BError(t, "get of a killed sandbox", st, body, 404, "not found")
}

func TestPauseConnectForkSnapshot(t *testing.T) {
	f := newFakeSandboxes()
	h := newTestHandler(f, nil)
	rec := f.add(sandbox.CreateOptions{Template: "base"})
	id := rec.ID
	if st, body := do(t, h, "POST", "/sandboxes/"+id+"/pause", "zygo_abc", `{"memory":true}`); st != 204 {
		t.Fatalf("pause: %d %s", st, body)
	}
	st, body := do(t, h, "POST", "/sandboxes/"+id+"/pause", "zygo_abc", "")
	wantE2BError(t, "pause of a paused sandbox", st, body, 409, "already paused")
	if st, body = do(t, h, "POST", "/sandboxes/"+id+"/connect", "zygo_abc", `{"timeout":60}`); st != 201 {
		t.Errorf("connect of a paused sandbox: %d %s", st, body)
	}
	if st, body = do(t, h, "POST", "/sandboxes/"+id+"/connect", "zygo_abc", `{"timeout":60}`); st != 200 {
		t.Errorf("connect of a running sandbox: %d %s", st, body)
	}
	if _, err := f.Pause(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if st, body = do(t, h, "POST", "/v2/sandboxes/"+id+"/connect", "zygo_abc", `{"memory":true}`); st != 201 ||
		f.calls[len(f.calls)-1] != "resume "+id+" 5m0s" {
		t.Errorf("v2 connect of a paused sandbox: %d %s, called %q", st, body, f.calls[len(f.calls)-1])
	}
	st, body = do(t, h, "POST", "/sandboxes/"+id+"/resume", "zygo_abc", `{"timeout":60}`)
	wantE2BError(t, "resume of a running sandbox", st, body, 409, "already running")
	if st, body = do(t, h, "POST", "/sandboxes/"+id+"/timeout", "zygo_abc", `{"timeout":30}`); st != 204 {
		t.Errorf("timeout: %d %s", st, body)
	}
	st, body = do(t, h, "POST", "/sandboxes/"+id+"/timeout", "zygo_abc", `{}`)
	wantE2BError(t, "timeout without one", st, body, 400, "timeout")
	if st, body = do(t, h, "POST", "/sandboxes/"+id+"/refreshes", "zygo_abc", `{"duration":30}`); st != 204 {
		t.Errorf("refresh: %d %s", st, body)
	}

	var forks []forkResult
	st, body = do(t, h, "POST", "/sandboxes/"+id+"/fork", "zygo_abc", `{"count":3,"timeout":60}`)
	if st != 201 || json.Unmarshal([]byte(body), &forks) != nil || len(forks) != 3 || forks[0].Sandbox == nil ||
		forks[1].Error == nil || forks[1].Error.Code != 503 || forks[2].Sandbox == nil {
		t.Errorf("fork: %d %s", st, body)
	}
	st, body = do(t, h, "POST", "/sandboxes/"+id+"/fork", "zygo_abc", `{"count":17}`)
	wantE2BError(t, "fork count 17", st, body, 400, "count")

	var snap snapshotInfo
	st, body = do(t, h, "POST", "/sandboxes/"+id+"/snapshots", "zygo_abc", `{"name":"warm"}`)
	if st != 201 || json.Unmarshal([]byte(body), &snap) != nil || !strings.HasPrefix(snap.SnapshotID, "cp-") || snap.Names[0] != "warm" {
		t.Fatalf("snapshot: %d %s", st, body)
	}
	if st, body = do(t, h, "POST", "/sandboxes", "zygo_abc", `{"templateID":"`+snap.SnapshotID+`","timeout":60}`); st != 201 {
		t.Errorf("create from a snapshot: %d %s", st, body)
	}
	if f.calls[len(f.calls)-1] != "restore "+snap.SnapshotID+" timeout=1m0s" {
		t.Errorf("create from a snapshot called %q", f.calls[len(f.calls)-1])
	}
	var snaps []snapshotInfo
	if st, body = do(t, h, "GET", "/snapshots?sandboxID="+id, "zygo_abc", ""); st != 200 || json.Unmarshal([]byte(body), &snaps) != nil || len(snaps) != 1 {
		t.Errorf("list snapshots: %d %s", st, body)
	}
	if st, body = do(t, h, "DELETE", "/templates/"+snap.SnapshotID, "zygo_abc", ""); st != 204 {
		t.Errorf("delete snapshot: %d %s", st, body)
	}
	st, body = do(t, h, "DELETE", "/templates/"+snap.SnapshotID, "zygo_abc", "")
	wantE2BError(t, "delete of a deleted snapshot", st, body, 404, "not found")
}

func TestStatusOf(t *testing.T) {
	for err, want := range map[error]int{
		errdefs.ErrNotFound: 404, errdefs.ErrInvalidArgument: 400, errdefs.ErrExists: 409, errdefs.ErrFailedPrecondition: 409,
		errdefs.ErrUnavailable: 503, context.DeadlineExceeded: 504, fmt.Errorf("x"): 500,
	} {
		if got := statusOf(fmt.Errorf("doing: %w", err)); got != want {
			t.Errorf("statusOf(%v) = %d, want %d", err, got, want)
		}
	}
}

// M3 of issue 19: a fork without a timeout lives as long as its parent has left, never the
// 15 s default; L2 and L3: a timeout of 0 or past the bound is refused naming it as sent.
func TestForkInheritsTimeoutAndTimeoutBounds(t *testing.T) {
	f := newFakeSandboxes()
	h := newTestHandler(f, nil)
	parent := f.add(sandbox.CreateOptions{Lifecycle: sandbox.Lifecycle{Timeout: 15 * time.Minute}})
	parent.Options.Lifecycle.ExpiresAt = time.Now().Add(15 * time.Minute)
	f.recs[parent.ID] = parent
	if st, body := do(t, h, "POST", "/sandboxes/"+parent.ID+"/fork", "zygo_abc", `{"count":1}`); st != 201 {
		t.Fatalf("fork: %d %s", st, body)
	}
	if last := f.calls[len(f.calls)-1]; last != "fork "+parent.ID+" n=1 timeout=15m0s" && last != "fork "+parent.ID+" n=1 timeout=14m59s" {
		t.Errorf("fork without a timeout: %q, want the parent's remaining 15m", last)
	}
	if st, body := do(t, h, "POST", "/sandboxes/"+parent.ID+"/fork", "zygo_abc", `{"count":1,"timeout":120}`); st != 201 {
		t.Fatalf("fork: %d %s", st, body)
	}
	if last := f.calls[len(f.calls)-1]; last != "fork "+parent.ID+" n=1 timeout=2m0s" {
		t.Errorf("fork with a timeout: %q, want 2m0s", last)
	}
	for _, c := range []struct{ method, path, body, sub string }{
		{"POST", "/sandboxes", `{"templateID":"base","timeout":0}`, "timeout: 0: must be at least 1 second"},
		{"POST", "/sandboxes", `{"templateID":"base","timeout":9223372036854775807}`, "timeout: 9223372036854775807 seconds: must be at most 2592000"},
		{"POST", "/sandboxes/" + parent.ID + "/fork", `{"timeout":0}`, "timeout: 0"},
		{"POST", "/sandboxes/" + parent.ID + "/timeout", `{"timeout":0}`, "timeout: 0"},
	} {
		st, body := do(t, h, c.method, c.path, "zygo_abc", c.body)
		wantE2BError(t, c.path+" "+c.body, st, body, 400, c.sub)
	}
}

// countingBody counts the bytes read from it.
type countingBody struct{ read int }

func (c *countingBody) Read(p []byte) (int, error) {
	c.read += len(p)
	return len(p), nil // endless
}

// H1 of issue 19: a control request without a valid key is refused before its body is read.
func TestUnauthenticatedControlBodyNotRead(t *testing.T) {
	h := newTestHandler(newFakeSandboxes(), nil)
	body := &countingBody{}
	req := httptest.NewRequest("POST", "/sandboxes", body)
	req.Header.Set("X-API-Key", "e2b_wrong")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized || body.read != 0 {
		t.Fatalf("status %d, %d body bytes read; want 401 and none", rec.Code, body.read)
	}
}

// TestKillFailed: a sandbox whose removal failed (its engine's processes may still run) is
// not listed nor shown, but DELETE still removes it rather than answering 404.
func TestKillFailed(t *testing.T) {
	f := newFakeSandboxes()
	h := newTestHandler(f, nil)
	rec := f.add(sandbox.CreateOptions{Template: "base"})
	rec.State = sandbox.Failed
	f.recs[rec.ID] = rec
	st, body := do(t, h, "GET", "/sandboxes/"+rec.ID, "zygo_abc", "")
	wantE2BError(t, "get of a failed sandbox", st, body, 404, "not found")
	if st, body = do(t, h, "DELETE", "/sandboxes/"+rec.ID, "zygo_abc", ""); st != 204 {
		t.Errorf("kill of a failed sandbox: %d %s", st, body)
	}
	if _, ok := f.recs[rec.ID]; ok {
		t.Errorf("the failed sandbox's record is left after kill")
	}
}

// A Zygo sandbox access token reaches one sandbox's envd API at most, never the control API:
// given as the key it is refused (403) saying so, as it is or spelt with e2b_.
func TestSandboxAccessTokenRefusedOnControl(t *testing.T) {
	h := newTestHandler(newFakeSandboxes(), nil)
	tok := "zygo_sbx_sb-0000000000000001_" + strings.Repeat("ab", 32)
	for _, key := range []string{tok, "e2b_" + strings.TrimPrefix(tok, "zygo_")} {
		st, body := do(t, h, "GET", "/v2/sandboxes", key, "")
		wantE2BError(t, "a sandbox access token as the key", st, body, 403, "never the control API")
	}
}
