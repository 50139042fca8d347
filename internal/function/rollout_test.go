package function_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/store"
)

// storeManager returns a Manager of l's fake runners on a real SQLite store (keep versions
// kept), the store and its state dir, and a deploy function taking a context.
func storeManager(t *testing.T, l *fakeLauncher, keep int) (*function.Manager, *store.Store, string,
	func(ctx context.Context, name, extra string) (*function.DeployResult, error)) {
	t.Helper()
	state := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(state, "zygo.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := function.NewManager(function.Config{StateDir: state, AgentDir: t.TempDir(), Runtimes: l,
		ReadyTimeout: 10 * time.Second, KeepVersions: keep}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	deploy := func(ctx context.Context, name, extra string) (*function.DeployResult, error) {
		return m.Deploy(ctx, bytes.NewReader(bundle(t, name, extra)))
	}
	return m, st, state, deploy
}

// bundle packs a Python function name whose manifest has the lines extra (which also make
// its hash).
func bundle(t *testing.T, name, extra string) []byte {
	t.Helper()
	dir := t.TempDir()
	manifest := fmt.Sprintf("name = %q\nruntime = \"python\"\nhandler = \"main:handler\"\n%s", name, extra)
	writeTree(t, dir, []treeFile{{"zygo.toml", 0o644, manifest}, {"main.py", 0o644, "def handler(e, c): return 1\n# " + extra + "\n"}})
	return pack(t, dir)
}

// TestQueueBeyondConcurrency: with concurrency 1 and queue 1, the second request waits
// (counted in Queued) and the third is refused at once with a *QueueFullError (too many
// requests, a Retry-After of at least 1 s, a message naming both numbers); the waiting one
// is served once the slot frees.
func TestQueueBeyondConcurrency(t *testing.T) {
	leaks := checkGoroutines(t)
	l := &fakeLauncher{block: make(chan struct{})}
	m, deploy := fakeManager(t, l)
	if _, err := deploy("f", "concurrency = 1\nqueue = 1\n"); err != nil {
		t.Fatal(err)
	}
	rt := l.all()[0]
	first, second := make(chan *function.Invocation, 1), make(chan *function.Invocation, 1)
	go func() { first <- invoke(t, m, "f", `{"n":1}`) }()
	<-rt.running
	go func() { second <- invoke(t, m, "f", `{"n":2}`) }()
	for deadline := time.Now().Add(10 * time.Second); m.Queued("f") != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("queued %d, want 1", m.Queued("f"))
		}
	}
	if st, _ := m.Get("f"); st.Queued != 1 || st.InFlight != 1 {
		t.Errorf("status: in flight %d, queued %d; want 1, 1", st.InFlight, st.Queued)
	}
	_, err := m.Invoke(context.Background(), "f", strings.NewReader(`{}`), 2)
	var qf *function.QueueFullError
	if !errors.As(err, &qf) || !errors.Is(err, errdefs.ErrTooManyRequests) || qf.RetryAfter() < time.Second {
		t.Fatalf("third request: %v, want a *QueueFullError with a Retry-After", err)
	}
	if want := `function "f" is at its concurrency (1) and its queue (1) is full; retry after 1s`; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	close(l.block)
	<-first
	if inv := <-second; !strings.Contains(string(inv.Value), `"n":2`) {
		t.Errorf("the queued request: %s", inv.Value)
	}
	if m.Queued("f") != 0 {
		t.Errorf("queued %d after both were served", m.Queued("f"))
	}
	m.Shutdown()
	leaks()
}

// TestNoQueue: queue = 0 refuses a request beyond concurrency at once, saying there is no
// queue.
func TestNoQueue(t *testing.T) {
	l := &fakeLauncher{block: make(chan struct{})}
	m, deploy := fakeManager(t, l)
	defer m.Shutdown()
	defer close(l.block)
	if _, err := deploy("f", "concurrency = 1\nqueue = 0\n"); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = m.Invoke(context.Background(), "f", strings.NewReader(`{}`), 2) }()
	<-l.all()[0].running
	_, err := m.Invoke(context.Background(), "f", strings.NewReader(`{}`), 2)
	if !errors.Is(err, errdefs.ErrTooManyRequests) || !strings.Contains(err.Error(), "has no queue (queue = 0)") {
		t.Fatalf("second request with no queue: %v", err)
	}
}

// TestQueueWaitCountsAgainstTimeout: a request that waits in the queue for its whole
// timeout_ms gets a deadline error naming timeout_ms, not a slot later.
func TestQueueWaitCountsAgainstTimeout(t *testing.T) {
	l := &fakeLauncher{block: make(chan struct{})}
	m, deploy := fakeManager(t, l)
	defer m.Shutdown()
	defer close(l.block)
	if _, err := deploy("f", "concurrency = 1\nqueue = 4\n[limits]\ntimeout_ms = 300\n"); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = m.Invoke(context.Background(), "f", strings.NewReader(`{}`), 2) }()
	<-l.all()[0].running
	_, err := m.Invoke(context.Background(), "f", strings.NewReader(`{}`), 2)
	if !errors.Is(err, errdefs.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "timeout_ms=300") {
		t.Fatalf("a request queued past its timeout: %v, want deadline exceeded naming timeout_ms", err)
	}
}

// TestFirstDeployIsListedAndWaitedFor: while a function's first version imports it is listed
// as deploying; an invoke meanwhile waits for it and is served by it; one whose timeout_ms
// ends first gets unavailable ("still deploying"), never not found.
func TestFirstDeployIsListedAndWaitedFor(t *testing.T) {
	leaks := checkGoroutines(t)
	l := &fakeLauncher{startBlock: make(chan struct{}), starting: make(chan struct{}, 4)}
	m, st, _, deploy := storeManager(t, l, 0)
	deployed := make(chan error, 1)
	go func() {
		_, err := deploy(context.Background(), "f", "[limits]\ntimeout_ms = 400\n")
		deployed <- err
	}()
	<-l.starting
	if st, err := m.Get("f"); err != nil || st.State != function.StateDeploying {
		t.Fatalf("during the first deploy: %+v, %v; want state deploying", st, err)
	}
	if ls := m.List(); len(ls) != 1 || ls[0].State != function.StateDeploying {
		t.Errorf("List during the first deploy: %+v", ls)
	}
	_, err := m.Invoke(context.Background(), "f", strings.NewReader(`{}`), 2)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), `function "f" is still deploying`) {
		t.Fatalf("invoke past its timeout during the first deploy: %v, want unavailable, still deploying", err)
	}
	waited := make(chan *function.Invocation, 1)
	go func() { waited <- invoke(t, m, "f", `{"w":1}`) }()
	time.Sleep(50 * time.Millisecond) // the invoke is waiting (or about to)
	close(l.startBlock)
	if err := <-deployed; err != nil {
		t.Fatal(err)
	}
	if inv := <-waited; !strings.Contains(string(inv.Value), `"w":1`) {
		t.Errorf("the waiting invoke: %s", inv.Value)
	}
	if s, _ := m.Get("f"); s.State != "ready" {
		t.Errorf("after the deploy: state %s", s.State)
	}
	m.Shutdown()
	st.Close() // its connection opener is not the Manager's
	leaks()
}

// TestFailedFirstDeployTellsWaiters: an invoke waiting for a first deploy whose import
// fails is told the function failed to deploy (unavailable), and the name is free again.
func TestFailedFirstDeployTellsWaiters(t *testing.T) {
	l := &fakeLauncher{startBlock: make(chan struct{}), starting: make(chan struct{}, 4),
		startErr: func(int) error { return &agentproc.ImportError{Type: "SyntaxError", Message: "bad"} }}
	m, _, _, deploy := storeManager(t, l, 0)
	defer m.Shutdown()
	deployed := make(chan error, 1)
	go func() { _, err := deploy(context.Background(), "f", ""); deployed <- err }()
	<-l.starting
	waited := make(chan error, 1)
	go func() { _, err := m.Invoke(context.Background(), "f", strings.NewReader(`{}`), 2); waited <- err }()
	time.Sleep(50 * time.Millisecond)
	close(l.startBlock)
	var ie *function.ImportFailed
	if err := <-deployed; !errors.As(err, &ie) || ie.HadPrevious {
		t.Fatalf("deploy: %v, want an import failure with no previous version", err)
	}
	if err := <-waited; !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "failed to deploy") {
		t.Errorf("the waiting invoke: %v, want unavailable, failed to deploy", err)
	}
	if _, err := m.Get("f"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("after the failed first deploy: %v, want not found", err)
	}
}

// TestCancelledDeployKeepsThePrevious: cancelling a deploy's context during its import stops
// it (the new runner leaves nothing), stores nothing of it, and the previous version keeps
// serving.
func TestCancelledDeployKeepsThePrevious(t *testing.T) {
	l := &fakeLauncher{}
	m, st, state, deploy := storeManager(t, l, 0)
	defer m.Shutdown()
	v1, err := deploy(context.Background(), "f", "")
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.startBlock, l.starting = make(chan struct{}), make(chan struct{}, 1)
	l.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	var during function.Status
	go func() { <-l.starting; during, _ = m.Get("f"); cancel() }()
	if _, err := deploy(ctx, "f", "# v2\n"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled deploy: %v, want context.Canceled", err)
	}
	if during.Version != v1.Version || !strings.HasPrefix(during.Deploying, "sha256:") || during.Deploying == v1.Version || during.State != "ready" {
		t.Errorf("status during the second deploy: %+v, want v1 ready, deploying the new version", during)
	}
	if after, _ := m.Get("f"); after.Deploying != "" {
		t.Errorf("status after the cancelled deploy still says deploying %s", after.Deploying)
	}
	if inv := invoke(t, m, "f", `{}`); inv.Version != v1.Version || !strings.Contains(string(inv.Value), `"runner":0`) {
		t.Errorf("after the cancelled deploy: served by %s (%s), want v1's runner", inv.Value, inv.Version)
	}
	vs, _ := st.Versions(context.Background(), "f")
	if len(vs) != 1 || vs[0].Hash != v1.Version {
		t.Errorf("stored versions %+v, want only v1", vs)
	}
	dirs, _ := os.ReadDir(filepath.Join(state, "versions", "f"))
	if len(dirs) != 1 {
		t.Errorf("%d version directories left, want v1's only", len(dirs))
	}
}

// TestImportTimeoutNamesTheKey: a start that runs past its bound is an import failure whose
// message names limits.import_timeout_ms, and the previous version keeps serving.
func TestImportTimeoutNamesTheKey(t *testing.T) {
	l := &fakeLauncher{startErr: func(n int) error {
		if n == 1 {
			return fmt.Errorf("%w: agent not ready after 2s (import too slow or stuck)", errdefs.ErrDeadlineExceeded)
		}
		return nil
	}}
	m, _, _, deploy := storeManager(t, l, 0)
	defer m.Shutdown()
	if _, err := deploy(context.Background(), "f", ""); err != nil {
		t.Fatal(err)
	}
	_, err := deploy(context.Background(), "f", "[limits]\nimport_timeout_ms = 2000\n")
	var ie *function.ImportFailed
	if !errors.As(err, &ie) || !ie.HadPrevious || ie.Type != "ImportTimeout" || !strings.Contains(ie.Message, "limits.import_timeout_ms=2000") {
		t.Fatalf("deploy over its import time: %v, want an ImportTimeout naming limits.import_timeout_ms=2000", err)
	}
	if inv := invoke(t, m, "f", `{}`); !strings.Contains(string(inv.Value), `"runner":0`) {
		t.Errorf("served by %s, want the previous runner", inv.Value)
	}
}

// TestDeployReportsSteps: WithProgress sees uploading, unpacking, importing, warmup and
// ready, in that order, with the version from unpacking on.
func TestDeployReportsSteps(t *testing.T) {
	m, _, _, deploy := storeManager(t, &fakeLauncher{}, 0)
	defer m.Shutdown()
	var steps []string
	ctx := function.WithProgress(context.Background(), func(p function.Progress) {
		steps = append(steps, string(p.Step))
		if p.Step != function.StepUploading && !strings.HasPrefix(p.Version, "sha256:") {
			t.Errorf("step %s without the version", p.Step)
		}
	})
	if _, err := deploy(ctx, "f", ""); err != nil {
		t.Fatal(err)
	}
	if want := []string{"uploading", "unpacking", "importing", "warmup", "ready"}; !slices.Equal(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
}

// TestRollback: deploys of v1, v2, v3; a rollback without a target goes to the version
// active before the current one (v2) through a new runner (the current one drained), a
// second one back to v3, one --to a prefix of v1 to v1; Versions lists the most recently
// deployed first with the active one marked; bad targets are refused naming to.
func TestRollback(t *testing.T) {
	l := &fakeLauncher{}
	m, _, _, deploy := storeManager(t, l, 0)
	defer m.Shutdown()
	var vs []string
	for i := range 3 {
		res, err := deploy(context.Background(), "f", fmt.Sprintf("# v%d\n", i+1))
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, res.Version)
		time.Sleep(2 * time.Millisecond)
	}
	ctx := context.Background()
	res, err := m.Rollback(ctx, "f", "")
	if err != nil || res.Version != vs[1] || res.Unchanged {
		t.Fatalf("rollback: %+v, %v; want v2", res, err)
	}
	if inv := invoke(t, m, "f", `{}`); inv.Version != vs[1] || !strings.Contains(string(inv.Value), `"runner":3`) {
		t.Errorf("after rollback: served by %s (%s), want a new runner of v2", inv.Value, inv.Version)
	}
	if res, err := m.Rollback(ctx, "f", ""); err != nil || res.Version != vs[2] {
		t.Fatalf("second rollback: %+v, %v; want v3 (the version active before)", res, err)
	}
	if res, err := m.Rollback(ctx, "f", strings.TrimPrefix(vs[0], "sha256:")[:12]); err != nil || res.Version != vs[0] {
		t.Fatalf("rollback to a prefix of v1: %+v, %v", res, err)
	}
	infos, err := m.Versions(ctx, "f")
	if err != nil || len(infos) != 3 || infos[0].Hash != vs[0] || !infos[0].Active || infos[1].Hash != vs[2] || infos[1].Active {
		t.Errorf("versions %+v, %v; want v1 (active), v3, v2", infos, err)
	}
	if res, err := m.Rollback(ctx, "f", vs[0]); err != nil || !res.Unchanged {
		t.Errorf("rollback to the active version: %+v, %v; want unchanged", res, err)
	}
	for to, want := range map[string]error{
		"sha256:ffffffffffff": errdefs.ErrNotFound, "xyz": errdefs.ErrInvalidArgument, "": nil,
	} {
		if to == "" {
			continue
		}
		if _, err := m.Rollback(ctx, "f", to); !errors.Is(err, want) || !strings.HasPrefix(errdefs.Message(err), "to: ") {
			t.Errorf("rollback --to %q: %v, want %v naming to", to, err, want)
		}
	}
	if _, err := m.Rollback(ctx, "nope", ""); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("rollback of an unknown function: %v", err)
	}
	for _, r := range l.all()[:5] { // every replaced runner drained and stopped
		for deadline := time.Now().Add(10 * time.Second); !strings.HasSuffix(r.history(), "drain stop"); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("runner %d: calls %q, want it drained and stopped", r.n, r.history())
			}
		}
	}
}

// TestRollbackWithoutEarlierVersion: a function with one version has nothing to roll back
// to (failed precondition).
func TestRollbackWithoutEarlierVersion(t *testing.T) {
	m, _, _, deploy := storeManager(t, &fakeLauncher{}, 0)
	defer m.Shutdown()
	if _, err := deploy(context.Background(), "f", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Rollback(context.Background(), "f", ""); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "no earlier version") {
		t.Errorf("rollback of a single version: %v", err)
	}
}

// TestRollbackImportFailureKeepsCurrent: a rollback whose runner fails to import leaves the
// current version serving.
func TestRollbackImportFailureKeepsCurrent(t *testing.T) {
	l := &fakeLauncher{startErr: func(n int) error {
		if n == 2 {
			return &agentproc.ImportError{Type: "ImportError", Message: "gone"}
		}
		return nil
	}}
	m, _, _, deploy := storeManager(t, l, 0)
	defer m.Shutdown()
	for i := range 2 {
		if _, err := deploy(context.Background(), "f", fmt.Sprintf("# v%d\n", i)); err != nil {
			t.Fatal(err)
		}
	}
	var ie *function.ImportFailed
	if _, err := m.Rollback(context.Background(), "f", ""); !errors.As(err, &ie) || !ie.HadPrevious {
		t.Fatalf("failed rollback: %v", err)
	}
	if inv := invoke(t, m, "f", `{}`); !strings.Contains(string(inv.Value), `"runner":1`) {
		t.Errorf("served by %s, want the current runner", inv.Value)
	}
}

// TestKeepVersions: with KeepVersions 2, deploying a third version removes the oldest from
// the store and the disk once its runner has stopped; the active and the previous stay.
func TestKeepVersions(t *testing.T) {
	l := &fakeLauncher{}
	m, st, state, deploy := storeManager(t, l, 2)
	defer m.Shutdown()
	var vs []string
	for i := range 3 {
		res, err := deploy(context.Background(), "f", fmt.Sprintf("# v%d\n", i))
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, res.Version)
		time.Sleep(2 * time.Millisecond)
	}
	dirOf := func(h string) string {
		return filepath.Join(state, "versions", "f", strings.TrimPrefix(h, "sha256:")[:32])
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		stored, _ := st.Versions(context.Background(), "f")
		_, statErr := os.Stat(dirOf(vs[0]))
		if len(stored) == 2 && stored[0].Hash == vs[2] && stored[1].Hash == vs[1] && errors.Is(statErr, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stored %+v, v1's dir: %v; want v3 and v2 only", stored, statErr)
		}
	}
	for _, h := range vs[1:] {
		if _, err := os.Stat(dirOf(h)); err != nil {
			t.Errorf("a kept version's directory: %v", err)
		}
	}
}
