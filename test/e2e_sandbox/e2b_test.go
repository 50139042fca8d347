package e2esandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// e2bDaemon is a daemon serving E2B's API on a loopback port, and the key E2B's SDKs take.
type e2bDaemon struct {
	*Daemon
	URL string // http://127.0.0.1:PORT
	Key string // the default API token, written e2b_<hex>
}

func startE2B(t *testing.T) *e2bDaemon {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	d := startDaemon(t, "--e2b", addr)
	tok, err := os.ReadFile(filepath.Join(d.StateDir, "api.token"))
	if err != nil {
		t.Fatalf("the daemon made no api.token with --e2b: %v", err)
	}
	return &e2bDaemon{Daemon: d, URL: "http://" + addr, Key: "e2b_" + strings.TrimSpace(string(tok))}
}

// call sends an E2B control call and decodes a JSON answer into out (when not nil); it
// returns the status and the raw body.
func (e *e2bDaemon) call(t *testing.T, method, path, key string, body any, out any) (int, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.URL+path, r)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decoding %s: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, string(raw)
}

// wantError checks an answer is E2B's error shape with that status and a message holding sub.
func wantError(t *testing.T, what string, status int, body string, wantStatus int, sub string) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if status != wantStatus || json.Unmarshal([]byte(body), &e) != nil || e.Code != wantStatus || !strings.Contains(e.Message, sub) {
		t.Errorf("%s: %d %s, want %d {code: %d, message: …%s…}", what, status, body, wantStatus, wantStatus, sub)
	}
}

type e2bSandbox struct {
	SandboxID       string `json:"sandboxID"`
	TemplateID      string `json:"templateID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
	State           string `json:"state"`
	Metadata        map[string]string
}

// TestE2BControlAPI drives the control API over HTTP as E2B's SDKs do, and checks the result
// through Zygo's own CLI: auth, create from the base template (its user and home), list with
// filters, get, unknown template, timeout and expiry, pause (no engine left) and connect
// (resumed, resealed), fork with count, a snapshot that outlives its sandbox, kill.
func TestE2BControlAPI(t *testing.T) {
	e := startE2B(t)

	st, body := e.call(t, "GET", "/v2/sandboxes", "e2b_00", nil, nil)
	wantError(t, "a wrong key", st, body, 401, "API key")
	st, body = e.call(t, "GET", "/v2/sandboxes", "", nil, nil)
	wantError(t, "no key", st, body, 401, "API key")

	var sb e2bSandbox
	st, body = e.call(t, "POST", "/sandboxes", e.Key, map[string]any{"templateID": "base", "timeout": 600,
		"metadata": map[string]string{"team": "a"}, "envVars": map[string]string{"GREETING": "hi"}, "secure": true,
		"allow_internet_access": true}, &sb)
	if st != 201 || !strings.HasPrefix(sb.SandboxID, "sb-") || sb.EnvdAccessToken == "" || sb.EnvdVersion == "" {
		t.Fatalf("create: %d %s", st, body)
	}
	out := e.OK("sandbox", "exec", sb.SandboxID, "--", "sh", "-c", "id -u user; id -g user; stat -c %u /home/user; echo $GREETING")
	if got := strings.Fields(out); !slices.Equal(got, []string{"1000", "1000", "1000", "hi"}) {
		t.Errorf("base template: user uid, gid, home owner, env = %q, want 1000 1000 1000 hi", got)
	}
	if rec := wireRecord(t, e.Daemon, sb.SandboxID); rec.ExpiresAt == nil || rec.Options.Template != "base" {
		t.Errorf("record: template %q, expires %v; want base and a deadline", rec.Options.Template, rec.ExpiresAt)
	}

	unauthenticatedFlood(t, e, sb.SandboxID)

	st, body = e.call(t, "POST", "/sandboxes", e.Key, map[string]any{"templateID": "nope"}, nil)
	wantError(t, "an unknown template", st, body, 404, "template 'nope' not found")
	st, body = e.call(t, "POST", "/sandboxes", e.Key, map[string]any{"templateID": "base", "colour": 1}, nil)
	wantError(t, "an unknown field", st, body, 400, "colour")
	st, body = e.call(t, "GET", "/sandboxes/sb-0000000000000000", e.Key, nil, nil)
	wantError(t, "get of an unknown sandbox", st, body, 404, "not found")

	var listed []e2bSandbox
	e.call(t, "GET", "/v2/sandboxes?metadata=team%3Da&state=running", e.Key, nil, &listed)
	if len(listed) != 1 || listed[0].SandboxID != sb.SandboxID || listed[0].State != "running" {
		t.Errorf("list by metadata team=a: %+v", listed)
	}
	e.call(t, "GET", "/v2/sandboxes?metadata=team%3Db", e.Key, nil, &listed)
	if len(listed) != 0 {
		t.Errorf("list by metadata team=b: %+v, want none", listed)
	}

	// envd requests need the sandbox's access token.
	req, _ := http.NewRequest("GET", e.URL+"/files?path=/etc/hostname", nil)
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("envd without X-Access-Token: %d, want 401", resp.StatusCode)
	}

	// A timeout that passes kills the sandbox.
	var short e2bSandbox
	if st, body = e.call(t, "POST", "/sandboxes", e.Key, map[string]any{"templateID": "base", "timeout": 600}, &short); st != 201 {
		t.Fatalf("create: %d %s", st, body)
	}
	if st, body = e.call(t, "POST", "/sandboxes/"+short.SandboxID+"/timeout", e.Key, map[string]any{"timeout": 1}, nil); st != 204 {
		t.Fatalf("timeout: %d %s", st, body)
	}
	waitFor(t, 10*time.Second, "the sandbox past its timeout is gone", func() bool {
		st, _ := e.call(t, "GET", "/sandboxes/"+short.SandboxID, e.Key, nil, nil)
		return st == 404
	})

	// Pause: the record stays, the engine goes; connect resumes it resealed.
	e.OK("sandbox", "exec", sb.SandboxID, "--", "sh", "-c", "echo kept > /tmp/kept")
	before := e.Record(sb.SandboxID)
	if st, body = e.call(t, "POST", "/sandboxes/"+sb.SandboxID+"/pause", e.Key, map[string]any{"memory": true}, nil); st != 204 {
		t.Fatalf("pause: %d %s", st, body)
	}
	var got e2bSandbox
	e.call(t, "GET", "/sandboxes/"+sb.SandboxID, e.Key, nil, &got)
	if got.State != "paused" {
		t.Errorf("state after pause: %q", got.State)
	}
	if slices.Contains(e.Containers(), before.EngineID) {
		t.Errorf("a paused sandbox's engine %s still runs", before.EngineID)
	}
	st, body = e.call(t, "POST", "/sandboxes/"+sb.SandboxID+"/pause", e.Key, nil, nil)
	wantError(t, "pause of a paused sandbox", st, body, 409, "already paused")
	if st, body = e.call(t, "POST", "/sandboxes/"+sb.SandboxID+"/connect", e.Key, map[string]any{"timeout": 600}, nil); st != 201 {
		t.Fatalf("connect of a paused sandbox: %d %s, want 201", st, body)
	}
	after := e.Record(sb.SandboxID)
	if after.State != "running" || after.Generation == before.Generation || after.EngineID == before.EngineID {
		t.Errorf("resumed: state %s, generation %s → %s, engine %s → %s", after.State, before.Generation, after.Generation, before.EngineID, after.EngineID)
	}
	if got := e.OK("sandbox", "exec", sb.SandboxID, "--", "cat", "/tmp/kept"); got != "kept" {
		t.Errorf("a file written before pause reads %q after resume", got)
	}
	if st, _ = e.call(t, "POST", "/sandboxes/"+sb.SandboxID+"/connect", e.Key, map[string]any{"timeout": 600}, nil); st != 200 {
		t.Errorf("connect of a running sandbox: %d, want 200", st)
	}

	// Fork with count.
	var forks []struct {
		Sandbox *e2bSandbox `json:"sandbox"`
		Error   *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if st, body = e.call(t, "POST", "/sandboxes/"+sb.SandboxID+"/fork", e.Key, map[string]any{"count": 3, "timeout": 600}, &forks); st != 201 || len(forks) != 3 {
		t.Fatalf("fork: %d %s", st, body)
	}
	gens := map[string]bool{after.Generation: true}
	for _, f := range forks {
		if f.Sandbox == nil {
			t.Fatalf("a fork failed: %+v", f.Error)
		}
		r := e.Record(f.Sandbox.SandboxID)
		gens[r.Generation] = true
		if got := e.OK("sandbox", "exec", r.ID, "--", "cat", "/tmp/kept"); got != "kept" {
			t.Errorf("fork %s reads %q", r.ID, got)
		}
	}
	if len(gens) != 4 {
		t.Errorf("the parent and 3 forks have %d distinct generations, want 4", len(gens))
	}
	st, body = e.call(t, "POST", "/sandboxes/"+sb.SandboxID+"/fork", e.Key, map[string]any{"count": 99}, nil)
	wantError(t, "fork count 99", st, body, 400, "count")

	// A snapshot outlives its sandbox and makes new ones.
	var snap struct {
		SnapshotID string   `json:"snapshotID"`
		Names      []string `json:"names"`
	}
	if st, body = e.call(t, "POST", "/sandboxes/"+sb.SandboxID+"/snapshots", e.Key, map[string]any{"name": "warm"}, &snap); st != 201 {
		t.Fatalf("snapshot: %d %s", st, body)
	}
	if st, body = e.call(t, "DELETE", "/sandboxes/"+sb.SandboxID, e.Key, nil, nil); st != 204 {
		t.Fatalf("kill: %d %s", st, body)
	}
	st, _ = e.call(t, "DELETE", "/sandboxes/"+sb.SandboxID, e.Key, nil, nil)
	if st != 404 {
		t.Errorf("second kill: %d, want 404", st)
	}
	var restored e2bSandbox
	if st, body = e.call(t, "POST", "/sandboxes", e.Key, map[string]any{"templateID": snap.SnapshotID, "timeout": 600}, &restored); st != 201 {
		t.Fatalf("create from snapshot %s: %d %s", snap.SnapshotID, st, body)
	}
	if got := e.OK("sandbox", "exec", restored.SandboxID, "--", "cat", "/tmp/kept"); got != "kept" {
		t.Errorf("the sandbox made from the snapshot reads %q", got)
	}
}

// TestSandboxLifecycleCLI drives Zygo's own model: create --template base --timeout, pause,
// resume, timeout, restore of a checkpoint whose sandbox is gone, templates, and a deadline
// that passes while the daemon is down.
func TestSandboxLifecycleCLI(t *testing.T) {
	d := startDaemon(t)
	if out := d.OK("sandbox", "templates", "-q"); !strings.Contains(out, "base") {
		t.Errorf("templates: %q", out)
	}
	id := d.OK("sandbox", "create", "--template", "base", "--timeout", "10m")
	if exp := wireRecord(t, d, id).ExpiresAt; exp == nil || time.Until(*exp) < 9*time.Minute {
		t.Errorf("--timeout 10m: expires %v", exp)
	}
	d.OK("sandbox", "exec", id, "--", "sh", "-c", "echo v1 > /tmp/f")
	gen := d.Record(id).Generation
	d.OK("sandbox", "pause", id)
	if r := d.Record(id); r.State != "paused" || slices.Contains(d.Containers(), r.EngineID) {
		t.Errorf("paused: state %s, engine %s running: %v", r.State, r.EngineID, slices.Contains(d.Containers(), r.EngineID))
	}
	d.Fails("sandbox", "exec", id, "--", "true")
	d.OK("sandbox", "resume", id)
	if r := d.Record(id); r.State != "running" || r.Generation == gen {
		t.Errorf("resumed: state %s, generation %s (was %s)", r.State, r.Generation, gen)
	}
	if got := d.OK("sandbox", "exec", id, "--", "cat", "/tmp/f"); got != "v1" {
		t.Errorf("after resume: %q", got)
	}
	cp := strings.Fields(d.OK("sandbox", "checkpoint", id, "--tag", "keep"))[0]
	d.OK("sandbox", "rm", id)
	nid := d.OK("sandbox", "restore", "keep")
	if got := d.OK("sandbox", "exec", nid, "--", "cat", "/tmp/f"); got != "v1" || nid == id {
		t.Errorf("restored %s (from %s): %q", nid, cp, got)
	}
	d.OK("sandbox", "timeout", nid, "1s")
	waitFor(t, 10*time.Second, "the restored sandbox past its timeout is gone", func() bool {
		return !slices.ContainsFunc(d.Sandboxes(), func(r sandbox.SandboxRecord) bool { return r.ID == nid })
	})

	// A deadline that passes while the daemon is down is honoured at its next start.
	late := d.OK("sandbox", "create", "--timeout", "6s", "--on-timeout", "pause")
	d.Stop()
	time.Sleep(7 * time.Second)
	d.Start()
	waitFor(t, 30*time.Second, "the sandbox whose timeout passed while the daemon was down is paused", func() bool {
		return d.Record(late).State == "paused"
	})
}

// TestE2BNeedsTLSOffLoopback: --e2b beyond loopback without a certificate stops the daemon at
// start, saying why.
func TestE2BNeedsTLSOffLoopback(t *testing.T) {
	out, err := exec.Command(zygoBin, "serve", "--state-dir", newStateDir(t), "--e2b", "0.0.0.0:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--e2b") || !strings.Contains(string(out), "only with TLS") {
		t.Errorf("zygo serve --e2b 0.0.0.0:0 without TLS: %v\n%s", err, out)
	}
}

// TestE2BSDK runs test/e2b (E2B's own npm packages, `npm ci` from the committed lock file)
// against a daemon with --e2b.
func TestE2BSDK(t *testing.T) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatal("npm not found: install Node.js and npm (`make deps`, or apt-get install -y nodejs npm)")
	}
	dir := filepath.Join(repo, "test", "e2b")
	ci := exec.Command(npm, "ci", "--no-audit", "--no-fund")
	ci.Dir = dir
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in test/e2b: %v\n%s", err, out)
	}
	e := startE2B(t)
	cmd := exec.Command("node", "--test", "--test-concurrency=1", "sdk.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+e.URL, "E2B_SANDBOX_URL="+e.URL, "E2B_API_KEY="+e.Key)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test sdk.test.mjs:\n%s", out)
	if err != nil {
		t.Errorf("the E2B SDK suite failed: %v\ndaemon log (tail):\n%s", err, tail(e.Log(), 40))
	}
}

// wireRecord is the sandbox's record as the API answers it.
func wireRecord(t *testing.T, d *Daemon, id string) wire.Sandbox {
	t.Helper()
	rec, err := d.Client.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return rec
}

// waitFor polls cond every 200 ms until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// repeatA is an endless stream of 'a'.
type repeatA struct{}

func (repeatA) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// vmHWM is process pid's peak resident set in KiB.
func vmHWM(t *testing.T, pid int) int {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kib
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// unauthenticatedFlood sends concurrent 30 MiB envd RPCs naming sandbox id without its
// access token (H1 of issue 19): each is refused 401 and the daemon's peak RSS stays flat.
func unauthenticatedFlood(t *testing.T, e *e2bDaemon, id string) {
	t.Helper()
	const calls, size = 12, 30 << 20
	pid := e.Cmd.Process.Pid
	before := vmHWM(t, pid)
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	for range calls {
		wg.Go(func() {
			body := io.MultiReader(strings.NewReader(`{"path":"/`), io.LimitReader(repeatA{}, size), strings.NewReader(`"}`))
			req, _ := http.NewRequest("POST", e.URL+"/filesystem.Filesystem/Stat", body)
			req.ContentLength = size + 12
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("E2b-Sandbox-Id", id)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return // answered and closed before the body was sent
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("an unauthenticated 30 MiB Stat: %d, want 401", resp.StatusCode)
			}
			refused++
		})
	}
	wg.Wait()
	if refused == 0 {
		t.Error("no unauthenticated 30 MiB Stat was answered")
	}
	if grew := vmHWM(t, pid) - before; grew > 64<<10 {
		t.Errorf("the daemon's peak RSS grew by %d MiB for %d unauthenticated %d MiB RPCs, want it flat (< 64 MiB)", grew>>10, calls, size>>20)
	}
}
