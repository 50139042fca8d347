// Package runtimetest is the conformance suite every function.Runner
// implementation runs (as containerd's snapshots/testsuite, and
// internal/sandbox/sandboxtest for sandbox backends): start, ready, one
// request, many at once, secrets during a request, drain, stop and import
// failure, against real sandboxes and interpreters.
//
// A Target says how to make the runner under test; Run runs every case as
// a subtest. The code each case deploys is written by the suite, in the
// Target's language.
package runtimetest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
)

// Target is one Runner implementation under test.
type Target struct {
	// Runtime is the language its code is written in: "python" or "node".
	Runtime function.Runtime
	// Manifest holds the manifest lines that choose the runner (for
	// example `mode = "spawn"`), after name, runtime and handler.
	Manifest string
	// New returns a runner, not started, for the function in codeDir with
	// manifest man. Each call is a new deployment; RunDirs lists the host
	// directories its sandboxes' run directories are made in.
	New func(t *testing.T, codeDir string, man *function.Manifest) function.Runner
	// RunDirs is the directory the runners' run directories are made in
	// (each must be gone after Stop).
	RunDirs string
}

// pyCode answers {"event", "secret" (the file /run/secrets/NAME when the
// event names one)} after sleeping event.sleep seconds, printing a line.
const pyCode = `import time
def handler(event, context):
    time.sleep(event.get("sleep", 0))
    out = {"event": event}
    if event.get("secret"):
        with open("/run/secrets/" + event["secret"]) as f:
            out["secret"] = f.read()
    print("hello", event.get("n"))
    return out
`

const nodeCode = `const fs = require('fs');
exports.handler = async (event, context) => {
  if (event.sleep) await new Promise(r => setTimeout(r, event.sleep * 1000));
  const out = { event };
  if (event.secret) out.secret = fs.readFileSync('/run/secrets/' + event.secret, 'utf8');
  console.log('hello', event.n);
  return out;
};
`

// deploy writes the target's code (broken: one that fails at import) and
// returns a runner for it.
func (tg Target) deploy(t *testing.T, secrets []string, broken bool) function.Runner {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file, handler, code := "main.py", "main:handler", pyCode
	if tg.Runtime == function.RuntimeNode {
		file, handler, code = "index.js", "index.js:handler", nodeCode
	}
	if broken {
		code = "raise_at_import(\n"
		if tg.Runtime == function.RuntimeNode {
			code = "throw new Error('broken at import');\n"
		}
	}
	toml := "name = \"conformance\"\nruntime = \"" + string(tg.Runtime) + "\"\nhandler = \"" + handler + "\"\n" + tg.Manifest + "\n"
	if len(secrets) > 0 {
		toml += "secrets = [\"" + strings.Join(secrets, "\", \"") + "\"]\n"
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	man, err := function.ParseManifest([]byte(toml))
	if err != nil {
		t.Fatalf("manifest: %v", err)
	}
	return tg.New(t, dir, man)
}

// started deploys and starts a runner, stopped when the test ends.
func (tg Target) started(t *testing.T, secrets ...string) function.Runner {
	t.Helper()
	r := tg.deploy(t, secrets, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := r.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(r.Stop)
	return r
}

func call(event string) function.Call {
	return function.Call{Request: agentproc.Request{ID: "r-" + strings.NewReplacer("{", "", "}", "", "\"", "", ":", "", ",", "").Replace(event),
		Event: json.RawMessage(event), Function: "conformance", Version: "v", Timeout: 30 * time.Second, MaxResponseBytes: 1 << 20}}
}

type answer struct {
	Event  map[string]any `json:"event"`
	Secret string         `json:"secret"`
}

func run(t *testing.T, r function.Runner, c function.Call) answer {
	t.Helper()
	res, err := r.Run(context.Background(), c)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Failure != agentproc.FailNone {
		t.Fatalf("Run failed: %s: %+v", res.Failure, res.Error)
	}
	var a answer
	if err := json.Unmarshal(res.Value, &a); err != nil {
		t.Fatalf("value %s: %v", res.Value, err)
	}
	if len(res.Stdout) == 0 || !strings.HasPrefix(res.Stdout[0], "hello") {
		t.Errorf("stdout %q, want the request's hello line", res.Stdout)
	}
	return a
}

// Run runs the conformance suite against tg.
func Run(t *testing.T, tg Target) {
	t.Run("StartThenRun", func(t *testing.T) { testStartThenRun(t, tg) })
	t.Run("ConcurrentRuns", func(t *testing.T) { testConcurrent(t, tg) })
	t.Run("SecretsDuringTheRequest", func(t *testing.T) { testSecrets(t, tg) })
	t.Run("DrainWaitsThenRefuses", func(t *testing.T) { testDrain(t, tg) })
	t.Run("StopReleasesEverything", func(t *testing.T) { testStop(t, tg) })
	t.Run("ImportErrorFailsStart", func(t *testing.T) { testImportError(t, tg) })
	t.Run("ExitedWhenTheProcessDies", func(t *testing.T) { testExited(t, tg) })
}

func testStartThenRun(t *testing.T, tg Target) {
	r := tg.started(t)
	a := run(t, r, call(`{"n":1}`))
	if a.Event["n"] != float64(1) {
		t.Errorf("event came back as %v", a.Event)
	}
	a = run(t, r, call(`{"n":2}`)) // a second request on the same runner
	if a.Event["n"] != float64(2) {
		t.Errorf("event came back as %v", a.Event)
	}
}

func testConcurrent(t *testing.T, tg Target) {
	r := tg.started(t)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.Run(context.Background(), call(`{"n":`+string(rune('0'+i))+`,"sleep":0.2}`))
			if err != nil || res.Failure != agentproc.FailNone {
				t.Errorf("request %d: %v %+v", i, err, res)
			}
		}()
	}
	wg.Wait()
}

func testSecrets(t *testing.T, tg Target) {
	r := tg.started(t, "TOKEN")
	c := call(`{"n":1,"secret":"TOKEN"}`)
	c.Secrets = map[string][]byte{"TOKEN": []byte("s3cret")}
	if a := run(t, r, c); a.Secret != "s3cret" {
		t.Errorf("the request read %q from /run/secrets/TOKEN, want the value", a.Secret)
	}
	// Without values, the file is gone: secrets live only as long as a request.
	res, err := r.Run(context.Background(), call(`{"n":2,"secret":"TOKEN"}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Failure == agentproc.FailNone {
		t.Errorf("a request without the secret read it: %s", res.Value)
	}
}

func testDrain(t *testing.T, tg Target) {
	r := tg.started(t)
	var finished atomic.Bool
	c := call(`{"n":1,"sleep":1}`)
	started := make(chan struct{})
	// Place's after runs once the request's outcome is known, before Run
	// returns: the host side of the request's end.
	c.Place = func(context.Context, int) (func(*agentproc.Result), error) {
		close(started)
		return func(*agentproc.Result) { finished.Store(true) }, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(t, r, c)
	}()
	<-started // the request's process exists and is about to be told GO
	if err := r.Drain(context.Background()); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if !finished.Load() {
		t.Error("Drain returned while a request was still in flight")
	}
	<-done
	if _, err := r.Run(context.Background(), call(`{"n":2}`)); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Run after Drain: %v, want ErrUnavailable", err)
	}
}

func testStop(t *testing.T, tg Target) {
	r := tg.started(t)
	run(t, r, call(`{"n":1}`))
	r.Stop()
	r.Stop() // idempotent
	if _, err := r.Run(context.Background(), call(`{"n":2}`)); err == nil {
		t.Error("Run after Stop succeeded")
	}
	waitNoRunDirs(t, tg)
}

func waitNoRunDirs(t *testing.T, tg Target) {
	t.Helper()
	var left []os.DirEntry
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		left, _ = os.ReadDir(tg.RunDirs)
		if len(left) == 0 {
			return
		}
	}
	t.Errorf("run directories left after Stop: %v", left)
}

func testImportError(t *testing.T, tg Target) {
	r := tg.deploy(t, nil, true)
	_, err := r.Start(context.Background())
	var ie *agentproc.ImportError
	if !errors.As(err, &ie) {
		t.Fatalf("Start of code that fails at import: %v, want *agentproc.ImportError", err)
	}
	waitNoRunDirs(t, tg)
}

func testExited(t *testing.T, tg Target) {
	r := tg.started(t)
	if r.Exited() == nil {
		// A runner without a long-lived process starts one per request: a
		// request still runs after the process of the previous one is gone.
		run(t, r, call(`{"n":1}`))
		run(t, r, call(`{"n":2}`))
		if r.Err() != nil {
			t.Errorf("Err %v of a runner that cannot die", r.Err())
		}
		return
	}
	pid := r.Status().HostPID
	if pid <= 0 {
		t.Fatalf("a runner with a long-lived process reports host pid %d", pid)
	}
	if err := killPID(pid); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("Exited not closed after the runner's process was killed")
	}
	if r.Err() == nil {
		t.Error("Err is nil after the process died")
	}
}
