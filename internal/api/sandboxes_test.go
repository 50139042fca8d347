package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// fakeSandboxes is a hand-written Sandboxes: each method answers from its fields.
type fakeSandboxes struct {
	Sandboxes // methods a test does not set panic

	rec       sandbox.SandboxRecord
	err       error
	execOut   string // written to stdout before exec returns
	execErr   error
	file      []byte
	putPath   string
	putMode   uint32
	forkRes   sandbox.ForkResult
	forkErr   error
	forkOpts  sandbox.ForkOptions // the last Fork's
	removeErr error
	recs      []sandbox.SandboxRecord    // List
	cps       []sandbox.CheckpointRecord // Checkpoints
}

func (f *fakeSandboxes) Create(context.Context, sandbox.CreateOptions) (sandbox.SandboxRecord, error) {
	return f.rec, f.err
}

func (f *fakeSandboxes) Get(context.Context, string) (sandbox.SandboxRecord, error) {
	return f.rec, f.err
}

func (f *fakeSandboxes) Exec(_ context.Context, _ string, _ guest.ExecRequest, stdout, _ io.Writer) (guest.ExitStatus, error) {
	if f.execOut != "" {
		io.WriteString(stdout, f.execOut)
	}
	return guest.ExitStatus{Code: 3}, f.execErr
}

func (f *fakeSandboxes) PutFile(_ context.Context, _, path string, perm uint32, r io.Reader) error {
	f.putPath, f.putMode = path, perm
	b, _ := io.ReadAll(r)
	f.file = b
	return f.err
}

func (f *fakeSandboxes) GetFile(_ context.Context, _, _ string, w io.Writer) error {
	if f.err != nil {
		return f.err
	}
	_, err := w.Write(f.file)
	return err
}

// Fork reports progress as a Manager does (once the checkpoint is ready, then once per child)
// unless it fails before any child.
func (f *fakeSandboxes) Fork(_ context.Context, _ string, opts sandbox.ForkOptions) (sandbox.ForkResult, error) {
	f.forkOpts = opts
	if opts.Progress != nil && len(f.forkRes.Children) > 0 {
		p := sandbox.ForkProgress{Checkpoint: "cp-1", N: len(f.forkRes.Children)}
		opts.Progress(p)
		for _, c := range f.forkRes.Children {
			if c.Err == nil {
				p.Ready++
			} else {
				p.Failed++
			}
			opts.Progress(p)
		}
	}
	return f.forkRes, f.forkErr
}

func (f *fakeSandboxes) RemoveCheckpoint(context.Context, string) error { return f.removeErr }

func (f *fakeSandboxes) List(context.Context) ([]sandbox.SandboxRecord, error) { return f.recs, f.err }

func (f *fakeSandboxes) Checkpoints(context.Context, string) ([]sandbox.CheckpointRecord, error) {
	return f.cps, f.err
}

func newTestServer(t *testing.T, sb Sandboxes, unavailable error) *zygo.Client {
	t.Helper()
	srv := NewServer(nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), "test").WithSandboxes(sb, unavailable)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	c := zygo.NewTCPClient(strings.TrimPrefix(ts.URL, "http://"), "")
	serverURLs.Store(c, ts.URL)
	return c
}

func wantAPIError(t *testing.T, err error, status int, substr string) *zygo.Error {
	t.Helper()
	var ae *zygo.Error
	if !errors.As(err, &ae) {
		t.Fatalf("want *zygo.Error %d, got %v", status, err)
	}
	// err.Error() is what a caller reads: the message and the category's phrase after it.
	if ae.Status != status || !strings.Contains(err.Error(), substr) {
		t.Errorf("got %d %q, want %d containing %q", ae.Status, err.Error(), status, substr)
	}
	return ae
}

func TestSandboxRoutesUnavailable(t *testing.T) {
	c := newTestServer(t, nil, errors.New("sandboxes are unavailable on this daemon: runsc not found (install it with scripts/install-runsc.sh)"))
	_, err := c.ListSandboxes(context.Background())
	wantAPIError(t, err, http.StatusServiceUnavailable, "scripts/install-runsc.sh")
	c = newTestServer(t, nil, nil)
	_, err = c.CreateSandbox(context.Background(), wire.CreateSandboxBody{})
	wantAPIError(t, err, http.StatusServiceUnavailable, "not enabled")
}

func TestSandboxErrorStatuses(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		err    error
		status int
		msg    string // the client's error text: the server's message as sent
	}{
		{fmt.Errorf("sandbox %q: %w", "x", errdefs.ErrNotFound), 404, `sandbox "x" not found`},
		{fmt.Errorf("n: 0: must be from 1: %w", errdefs.ErrInvalidArgument), 400, "n: 0: must be from 1"},
		{fmt.Errorf("a sandbox named %q: %w", "x", errdefs.ErrExists), 409, `a sandbox named "x" already exists`},
		{&sandbox.TransitionError{ID: "x", From: sandbox.Failed, To: sandbox.Checkpointing}, 409, ""},
		{fmt.Errorf("guest: %w: %w", errors.New("connection refused"), errdefs.ErrUnavailable), 503, "guest: connection refused"},
		{fmt.Errorf("guest: read-only file system: %w", errdefs.ErrPermissionDenied), 403, "guest: read-only file system"},
		{errors.New("boom"), 500, "boom"},
	} {
		cl := newTestServer(t, &fakeSandboxes{err: c.err}, nil)
		_, err := cl.GetSandbox(ctx, "x")
		wantAPIError(t, err, c.status, c.msg)
		if c.msg != "" && err.Error() != c.msg {
			t.Errorf("%q: client text %q, want %q", c.err, err.Error(), c.msg)
		}
	}
}

func TestSandboxTokenNeverInJSON(t *testing.T) {
	c := newTestServer(t, &fakeSandboxes{rec: sandbox.SandboxRecord{ID: "sb-1", Token: "very-secret-token"}}, nil)
	b := rawGet(t, c, "/v1/sandboxes/sb-1")
	if bytes.Contains(b, []byte("very-secret-token")) {
		t.Errorf("the guest token is in the API answer: %s", b)
	}
}

// A checkpoint as the API lists it carries its size and age, not the host
// path of its image.
func TestCheckpointImageDirNeverInJSON(t *testing.T) {
	cp := sandbox.CheckpointRecord{ID: "cp-0123456789abcdef", SizeBytes: 4096, Dir: "/var/lib/zygo/images/cp-0123456789abcdef"}
	c := newTestServer(t, &fakeSandboxes{cps: []sandbox.CheckpointRecord{cp}}, nil)
	b := rawGet(t, c, "/v1/checkpoints")
	if bytes.Contains(b, []byte("/var/lib/zygo")) || bytes.Contains(b, []byte(`"dir"`)) {
		t.Errorf("the image's host path is in the API answer: %s", b)
	}
	var got wire.Page[map[string]any]
	if err := json.Unmarshal(b, &got); err != nil || len(got.Items) != 1 || got.Items[0]["size_bytes"] != 4096.0 || got.Items[0]["created_at"] == nil {
		t.Errorf("size or age missing from the API answer: %s", b)
	}
}

func TestSandboxBadBodies(t *testing.T) {
	c := newTestServer(t, &fakeSandboxes{}, nil)
	ctx := context.Background()
	err := rawCall(t, c, "POST", "/v1/sandboxes", strings.NewReader(`{"nmae": "x"}`), "application/json")
	wantAPIError(t, err, 400, "nmae")
	_, err = c.Exec(ctx, "sb-1", wire.ExecBody{}, nil, nil)
	wantAPIError(t, err, 400, "argv: is empty")
	_, err = c.Rollback(ctx, "sb-1", "")
	wantAPIError(t, err, 400, "checkpoint")
	err = c.PutFile(ctx, "sb-1", "relative/path", 0o644, strings.NewReader("x"))
	wantAPIError(t, err, 400, "absolute")
}

func TestSandboxExecStream(t *testing.T) {
	ctx := context.Background()
	// Output, then the exit status.
	f := &fakeSandboxes{execOut: "hello\n"}
	var out bytes.Buffer
	st, err := newTestServer(t, f, nil).Exec(ctx, "sb-1", wire.ExecBody{Argv: []string{"x"}}, &out, nil)
	if err != nil || st.Code != 3 || out.String() != "hello\n" {
		t.Errorf("exec: %+v %v %q", st, err, out.String())
	}
	// An error before any output keeps its own status.
	f = &fakeSandboxes{execErr: fmt.Errorf("guest: no such file: %w", errdefs.ErrNotFound)}
	_, err = newTestServer(t, f, nil).Exec(ctx, "sb-1", wire.ExecBody{Argv: []string{"x"}}, nil, nil)
	wantAPIError(t, err, 404, "no such file")
	// An error after output arrives as the stream's last event, with the same category.
	f = &fakeSandboxes{execOut: "partial", execErr: fmt.Errorf("guest died: %w", errdefs.ErrUnavailable)}
	out.Reset()
	_, err = newTestServer(t, f, nil).Exec(ctx, "sb-1", wire.ExecBody{Argv: []string{"x"}}, &out, nil)
	wantAPIError(t, err, 503, "guest died")
	if out.String() != "partial" {
		t.Errorf("output before the error: %q", out.String())
	}
}

func TestSandboxFiles(t *testing.T) {
	ctx := context.Background()
	f := &fakeSandboxes{}
	c := newTestServer(t, f, nil)
	if err := c.PutFile(ctx, "sb-1", "/root/a", 0o600, strings.NewReader("data")); err != nil {
		t.Fatal(err)
	}
	if f.putPath != "/root/a" || f.putMode != 0o600 || string(f.file) != "data" {
		t.Errorf("put reached the manager as %q %o %q", f.putPath, f.putMode, f.file)
	}
	f.file = nil // an empty file is 200 with no body
	var b bytes.Buffer
	if err := c.GetFile(ctx, "sb-1", "/root/empty", &b); err != nil || b.Len() != 0 {
		t.Errorf("get of an empty file: %v %q", err, b.String())
	}
	f.err = fmt.Errorf("open /x: %w", errdefs.ErrNotFound)
	wantAPIError(t, c.GetFile(ctx, "sb-1", "/x", &b), 404, "/x")
}

func TestSandboxFork(t *testing.T) {
	ctx := context.Background()
	ok := sandbox.ForkChild{Sandbox: sandbox.SandboxRecord{ID: "sb-ok"}}
	bad := sandbox.ForkChild{Err: fmt.Errorf("resealing: %w", errdefs.ErrUnavailable)}
	bad.Error = bad.Err.Error()

	// Partial success: 200, every child listed.
	f := &fakeSandboxes{forkRes: sandbox.ForkResult{Children: []sandbox.ForkChild{ok, bad}}}
	ans, err := newTestServer(t, f, nil).Fork(ctx, "sb-1", 2, "", nil)
	if err != nil || ans.Succeeded != 1 || ans.Failed != 1 || ans.Children[0].Sandbox.ID != "sb-ok" ||
		ans.Children[1].Error == nil || ans.Children[1].Error.Code != "unavailable" {
		t.Errorf("partial fork: %+v %v", ans, err)
	}
	// Every child failed: the category's status, and the children are still listed.
	f = &fakeSandboxes{forkRes: sandbox.ForkResult{Children: []sandbox.ForkChild{bad, bad}},
		forkErr: fmt.Errorf("every child failed: %w", errors.Join(bad.Err, bad.Err))}
	ans, err = newTestServer(t, f, nil).Fork(ctx, "sb-1", 2, "", nil)
	wantAPIError(t, err, 503, "every child failed")
	if len(ans.Children) != 2 || ans.Failed != 2 {
		t.Errorf("all-failed fork lost its children: %+v", ans)
	}
	// Refused before any child: an ordinary error.
	f = &fakeSandboxes{forkErr: fmt.Errorf("fork n=0: must be between 1 and 16: %w", errdefs.ErrInvalidArgument)}
	_, err = newTestServer(t, f, nil).Fork(ctx, "sb-1", 0, "", nil)
	wantAPIError(t, err, 400, "between 1 and 16")
	// Names reach the manager; a name in use is a 409 naming it.
	f = &fakeSandboxes{forkErr: fmt.Errorf("names[1]: a sandbox named %q (sb-x): %w", "taken", errdefs.ErrExists)}
	_, err = newTestServer(t, f, nil).ForkWith(ctx, "sb-1", wire.ForkBody{N: 2, Names: []string{"a", "taken"}}, nil)
	wantAPIError(t, err, 409, `names[1]: a sandbox named "taken"`)
	if !slices.Equal(f.forkOpts.Names, []string{"a", "taken"}) {
		t.Errorf("the manager got names %q", f.forkOpts.Names)
	}
}

// With a progress callback the daemon streams one event when the checkpoint is ready and one
// per child, then the same answer (and status) as the plain call.
func TestSandboxForkStreamsProgress(t *testing.T) {
	ctx := context.Background()
	ok := sandbox.ForkChild{Sandbox: sandbox.SandboxRecord{ID: "sb-ok"}}
	bad := sandbox.ForkChild{Err: fmt.Errorf("resealing: %w", errdefs.ErrUnavailable)}
	var got []wire.ForkProgress
	record := func(p wire.ForkProgress) { got = append(got, p) }

	f := &fakeSandboxes{forkRes: sandbox.ForkResult{Children: []sandbox.ForkChild{ok, bad, ok}}}
	ans, err := newTestServer(t, f, nil).Fork(ctx, "sb-1", 3, "", record)
	if err != nil || ans.Succeeded != 2 || ans.Failed != 1 || len(ans.Children) != 3 {
		t.Fatalf("streamed partial fork: %+v %v", ans, err)
	}
	want := []wire.ForkProgress{{Checkpoint: "cp-1", N: 3}, {Checkpoint: "cp-1", N: 3, Ready: 1},
		{Checkpoint: "cp-1", N: 3, Ready: 1, Failed: 1}, {Checkpoint: "cp-1", N: 3, Ready: 2, Failed: 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("progress events %+v, want %+v", got, want)
	}
	// Every child failed: the stream carries the status the plain call would have had.
	got = nil
	f = &fakeSandboxes{forkRes: sandbox.ForkResult{Children: []sandbox.ForkChild{bad}},
		forkErr: fmt.Errorf("every child failed: %w", bad.Err)}
	ans, err = newTestServer(t, f, nil).Fork(ctx, "sb-1", 1, "", record)
	wantAPIError(t, err, 503, "every child failed")
	if len(ans.Children) != 1 || len(got) != 2 {
		t.Errorf("streamed all-failed fork: %+v, %d progress events", ans, len(got))
	}
	// Refused before any child: a plain error, no progress.
	got = nil
	f = &fakeSandboxes{forkErr: fmt.Errorf("sandbox sb-x: %w", errdefs.ErrNotFound)}
	_, err = newTestServer(t, f, nil).Fork(ctx, "sb-x", 2, "", record)
	wantAPIError(t, err, 404, "sb-x")
	if len(got) != 0 {
		t.Errorf("progress before a refused fork: %+v", got)
	}
}

func TestCheckpointRemoveReferenced(t *testing.T) {
	f := &fakeSandboxes{removeErr: fmt.Errorf("checkpoint cp-1 is still referenced by sandbox sb-2: %w", errdefs.ErrFailedPrecondition)}
	err := newTestServer(t, f, nil).RemoveCheckpoint(context.Background(), "cp-1")
	wantAPIError(t, err, 409, "still referenced by sandbox sb-2")
}

// noFunctions is a Functions with none deployed.
type noFunctions struct{ Functions }

func (noFunctions) List() []function.Status { return nil }

// removedSecrets is a Secrets that records what it removed.
type removedSecrets struct {
	Secrets
	removed []string
}

func (s *removedSecrets) Remove(_ context.Context, name string) error {
	s.removed = append(s.removed, name)
	return nil
}

// TestSecretRemoveRefusedWhileSandboxesUseIt: a secret named by a sandbox or a checkpoint
// cannot be removed (409 naming them); one nobody names can.
func TestSecretRemoveRefusedWhileSandboxesUseIt(t *testing.T) {
	ctx := context.Background()
	sb := &fakeSandboxes{
		recs: []sandbox.SandboxRecord{{ID: "sb-1", Name: "agent", Options: sandbox.CreateOptions{Secrets: []string{"API_KEY"}}}},
		cps:  []sandbox.CheckpointRecord{{ID: "cp-1", Tag: "base", Options: sandbox.CreateOptions{Secrets: []string{"API_KEY", "DB"}}}},
	}
	sec := &removedSecrets{}
	srv := NewServer(noFunctions{}, nil, sec, slog.New(slog.NewTextHandler(io.Discard, nil)), "test").WithSandboxes(sb, nil)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	c := zygo.NewTCPClient(strings.TrimPrefix(ts.URL, "http://"), "")
	err := c.RemoveSecret(ctx, "API_KEY")
	wantAPIError(t, err, http.StatusConflict, `secret "API_KEY" is used by sandbox agent, checkpoint cp-1 (base)`)
	err = c.RemoveSecret(ctx, "DB")
	wantAPIError(t, err, http.StatusConflict, `secret "DB" is used by checkpoint cp-1 (base)`)
	if err := c.RemoveSecret(ctx, "OTHER"); err != nil || fmt.Sprint(sec.removed) != "[OTHER]" {
		t.Errorf("removing an unused secret: %v, removed %v", err, sec.removed)
	}
}

// A sandbox that is not running (a fork child before its reseal, a rollback in progress, a
// recovering one) hands out no generation: 409 naming the state, never its checkpoint's.
func TestGenerationOnlyWhenRunning(t *testing.T) {
	ctx := context.Background()
	f := &fakeSandboxes{rec: sandbox.SandboxRecord{ID: "sb-1", State: sandbox.Restoring, Generation: "parents"}}
	_, err := newTestServer(t, f, nil).Generation(ctx, "sb-1")
	wantAPIError(t, err, 409, "restoring")
	f.rec.State = sandbox.Running
	if g, err := newTestServer(t, f, nil).Generation(ctx, "sb-1"); err != nil || g.Generation != "parents" {
		t.Errorf("generation of a running sandbox = %+v, %v", g, err)
	}
}

// A JSON body with anything after its object is refused, not half read: `{"n":1}{"n":16}`
// once forked one child.
func TestTrailingJSONRefused(t *testing.T) {
	f := &fakeSandboxes{forkRes: sandbox.ForkResult{Children: []sandbox.ForkChild{{Sandbox: sandbox.SandboxRecord{ID: "sb-ok"}}}}}
	c := newTestServer(t, f, nil)
	err := rawCall(t, c, "POST", sbPath("sb-1", "fork"), strings.NewReader(`{"n":1}{"n":16}`), "application/json")
	wantAPIError(t, err, http.StatusBadRequest, "after the JSON object")
}

// TestPortMustBeCanonical: a published port is a plain decimal 1-65535 in
// the path; "+80", "080" and words are 400s naming the port.
func TestPortMustBeCanonical(t *testing.T) {
	c := newTestServer(t, &fakeSandboxes{}, nil)
	base, _ := serverURLs.Load(c)
	for _, p := range []string{"+80", "080", "eighty", "-1"} {
		resp, err := http.Post(base.(string)+"/v1/sandboxes/sb-1/ports/"+p, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !bytes.Contains(b, []byte("port")) {
			t.Errorf("port %q: %d %s, want 400 naming the port", p, resp.StatusCode, b)
		}
	}
}

// Sandboxes and checkpoints are paged oldest first (creation time, then id), on both
// checkpoint routes.
func TestSandboxListsPaged(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	f := &fakeSandboxes{
		recs: []sandbox.SandboxRecord{{ID: "sb-c", CreatedAt: t0.Add(time.Second)}, {ID: "sb-b", CreatedAt: t0}, {ID: "sb-a", CreatedAt: t0}},
		cps:  []sandbox.CheckpointRecord{{ID: "cp-b", CreatedAt: t0.Add(time.Hour)}, {ID: "cp-a", CreatedAt: t0.Add(time.Minute)}},
	}
	c := newTestServer(t, f, nil)
	ctx := context.Background()
	var ids []string
	q := zygo.PageQuery{Limit: 1}
	for {
		p, err := c.SandboxesPage(ctx, q)
		if err != nil || len(p.Items) != 1 {
			t.Fatalf("SandboxesPage: %+v (%v)", p, err)
		}
		ids = append(ids, p.Items[0].ID)
		if q.Cursor = p.NextCursor; q.Cursor == "" {
			break
		}
	}
	if got := strings.Join(ids, " "); got != "sb-a sb-b sb-c" {
		t.Errorf("sandboxes paged %s, want sb-a sb-b sb-c", got)
	}
	for _, sb := range []string{"", "sb-a"} {
		p, err := c.CheckpointsPage(ctx, sb, zygo.PageQuery{Limit: 1})
		if err != nil || len(p.Items) != 1 || p.Items[0].ID != "cp-a" || p.NextCursor == "" {
			t.Fatalf("CheckpointsPage(%q): %+v (%v)", sb, p, err)
		}
		cps, err := c.Checkpoints(ctx, sb)
		if err != nil || len(cps) != 2 || cps[1].ID != "cp-b" {
			t.Errorf("Checkpoints(%q): %+v (%v)", sb, cps, err)
		}
	}
}
