package pool

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/agents"
	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/seccomp"
	"github.com/zygo-run/zygo/internal/store"
)

// memRegistry is an in-memory Registry.
type memRegistry struct {
	mu    sync.Mutex
	pools map[string]store.PoolRecord
	logs  []store.LogLine
}

func (r *memRegistry) PutPool(_ context.Context, p store.PoolRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pools[p.Name] = p
	return nil
}

func (r *memRegistry) Pools(context.Context) ([]store.PoolRecord, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.PoolRecord
	for _, p := range r.pools {
		out = append(out, p)
	}
	return out, nil
}

func (r *memRegistry) DeletePool(_ context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pools, name)
	return nil
}

func (r *memRegistry) AppendLogs(_ context.Context, lines []store.LogLine) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, lines...)
	return nil
}

func (r *memRegistry) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, l := range r.logs {
		b.WriteString(l.RequestID + " " + l.Stream + " " + l.Line + "\n")
	}
	return b.String()
}

// newTestManager returns a Manager on real bwrap sandboxes in a fresh state dir.
func newTestManager(t *testing.T, mount func(string) (*os.File, error)) (*Manager, *memRegistry) {
	t.Helper()
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatal("bwrap not found: apt-get install -y bubblewrap (scripts/deps.sh)")
	}
	state := t.TempDir()
	if err := os.Chmod(state, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(state, "agents"), 0o755); err != nil {
		t.Fatal(err)
	}
	agentDir, err := agents.Extract(filepath.Join(state, "agents"))
	if err != nil {
		t.Fatal(err)
	}
	strict, err := seccomp.Strict()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(state, "run"), 0o711); err != nil {
		t.Fatal(err)
	}
	reg := &memRegistry{pools: map[string]store.PoolRecord{}}
	m := NewManager(Config{StateDir: state, ReadyTimeout: 60 * time.Second, Mount: mount,
		Launcher: function.NewSandboxLauncher(function.SandboxConfig{StateDir: state, AgentDir: agentDir, Bwrap: bwrap,
			ReadyTimeout: 60 * time.Second, StrictFilter: strict})}, reg)
	t.Cleanup(m.Shutdown)
	return m, reg
}

// TestRunWithoutMount: when no mount can be made, the script's files are copied into the
// request directory, the request runs, and its log says so.
func TestRunWithoutMount(t *testing.T) {
	m, reg := newTestManager(t, func(string) (*os.File, error) {
		return nil, errors.New("open_tree of the script's directory: operation not permitted")
	})
	ctx := context.Background()
	if _, err := m.Up(ctx, []byte("kind = \"pool\"\nname = \"p\"\n")); err != nil {
		t.Fatal(err)
	}
	src := Script{ScriptFile: []byte("import os\ndef handler(e, c):\n    return os.path.dirname(__file__)\n")}
	res, err := m.Run(ctx, "p", RunRequest{Tenant: "t", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failure != agentproc.FailNone || res.Mounted {
		t.Fatalf("failure %q %+v, mounted %v", res.Failure, res.Error, res.Mounted)
	}
	var dir string
	json.Unmarshal(res.Value, &dir)
	if !strings.HasPrefix(dir, "/run/zygo/req/") || !strings.HasSuffix(dir, "/script") {
		t.Errorf("script loaded from %q; want the request directory's script/", dir)
	}
	want := res.RequestID + " zygo script not mounted (open_tree of the script's directory: operation not permitted)"
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(reg.text(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the request's logs do not say its script was not mounted:\n%s", reg.text())
		}
	}
}

// TestAdmission checks the per-tenant cap and queue: beyond them a request is refused with
// *TooManyRequestsError (errdefs category, Retry-After), while another tenant is admitted;
// a waiter whose ctx ends leaves the queue; an idle tenant's entry is dropped.
func TestAdmission(t *testing.T) {
	m := &Manifest{Concurrency: 4, Tenant: TenantLimits{Concurrency: 1, Queue: 1}}
	m.Limits.TimeoutMs = 4000
	a := newAdmission(m)
	ctx := context.Background()
	rel1, err := a.acquire(ctx, "hog")
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		rel, err := a.acquire(ctx, "hog")
		if err == nil {
			rel()
		}
		waited <- err
	}()
	for {
		if _, w, _ := a.stats(); w == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	_, err = a.acquire(ctx, "hog")
	var tm *TooManyRequestsError
	if !errors.As(err, &tm) || tm.RetryAfter() != 2*time.Second {
		t.Fatalf("third request of hog: %v; want TooManyRequestsError with Retry-After 2s", err)
	}
	relOther, err := a.acquire(ctx, "other")
	if err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	relOther()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := a.acquire(cctx, "other2"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a request whose caller went away: %v; want context.Canceled", err)
	}
	rel1()
	if err := <-waited; err != nil {
		t.Fatalf("the queued request: %v", err)
	}
	if r, w, n := a.stats(); r != 0 || w != 0 || n != 0 {
		t.Errorf("stats running %d waiting %d tenants %d; want 0 0 0 (idle tenants dropped)", r, w, n)
	}
}
