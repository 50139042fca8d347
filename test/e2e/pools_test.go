package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/daemon"
	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// poolUp writes a pool manifest (body after kind/name) into a temp dir and runs `zygo pool up`.
func (d *Daemon) poolUp(name, body string) {
	d.t.Helper()
	dir := d.t.TempDir()
	toml := fmt.Sprintf("kind = \"pool\"\nname = %q\n%s\n", name, body)
	if err := os.WriteFile(filepath.Join(dir, "zygo.toml"), []byte(toml), 0o644); err != nil {
		d.t.Fatal(err)
	}
	if out, errOut, code := d.CLI("pool", "up", dir); code != 0 {
		d.t.Fatalf("zygo pool up: exit %d\n%s%s\ndaemon log:\n%s", code, out, errOut, d.Log)
	}
}

// runScript runs an inline script (main.py) of tenant in pool and decodes its value into out.
func (d *Daemon) runScript(pool, tenant, src string, event any, out any) (*zygo.PoolRunResult, error) {
	d.t.Helper()
	ev, _ := json.Marshal(event)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := d.Client.RunScript(ctx, pool, wire.PoolRunRequest{Tenant: tenant, Source: src, Event: ev})
	if err == nil && out != nil {
		if jerr := json.Unmarshal(res.Value, out); jerr != nil {
			d.t.Fatalf("decoding %s: %v", res.Value, jerr)
		}
	}
	return res, err
}

func (d *Daemon) mustRunScript(pool, tenant, src string, event any, out any) *zygo.PoolRunResult {
	d.t.Helper()
	res, err := d.runScript(pool, tenant, src, event, out)
	if err != nil {
		d.t.Fatalf("running a script of %s in %s: %v\ndaemon log:\n%s", tenant, pool, err, d.Log)
	}
	return res
}

// TestPoolRun deploys a pool that preloads numpy, uploads a directory script through the CLI,
// runs it by hash and inline, and checks the script reached the child as a read-only mount
// of its own directory only (its ".." is itself) and the request is in `zygo pool logs`.
func TestPoolRun(t *testing.T) {
	d := startDaemon(t, "")
	d.poolUp("sci", `preload = ["numpy"]`)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "lib"), 0o755)
	os.WriteFile(filepath.Join(dir, "lib", "__init__.py"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "lib", "helper.py"), []byte("def double(x):\n    return 2 * x\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "app.py"), []byte(`
import os, sys, numpy
from lib.helper import double
def run(event, context):
    here = os.path.dirname(__file__)
    try:
        open(os.path.join(here, "planted.py"), "w").write("x")
        wrote = True
    except OSError as e:
        wrote = e.errno
    return {"v": double(int(numpy.arange(event["n"]).sum())), "here": here,
            "up": sorted(os.listdir(here + "/../../..")),
            "wrote": wrote, "numpy_preloaded": "numpy" in sys.modules, "tenant": context.tenant}
`), 0o644)
	out, errOut, code := d.CLI("pool", "run", "sci", "--tenant", "acme", "--script", dir, "--entry", "app:run", "--data", `{"n": 5}`)
	if code != 0 {
		t.Fatalf("zygo pool run: exit %d\n%s%s", code, out, errOut)
	}
	var got struct {
		V              int      `json:"v"`
		Here           string   `json:"here"`
		Up             []string `json:"up"`
		Wrote          any      `json:"wrote"`
		NumpyPreloaded bool     `json:"numpy_preloaded"`
		Tenant         string   `json:"tenant"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if got.V != 20 || got.Tenant != "acme" || !got.NumpyPreloaded {
		t.Errorf("result %+v; want v 20, tenant acme, numpy preloaded", got)
	}
	if !strings.HasPrefix(got.Here, "/proc/self/fd/") {
		t.Errorf("script loaded from %s; want a mount descriptor /proc/self/fd/N", got.Here)
	}
	if strings.Join(got.Up, ",") != "app.py,lib" {
		t.Errorf("the script's .. lists %v; want only the script's own files", got.Up)
	}
	if got.Wrote == true {
		t.Error("the child wrote into its script's directory; want a read-only mount")
	}
	hash := strings.Fields(errOut)[1]
	// The same script again by hash: no upload.
	if out, errOut, code := d.CLI("pool", "run", "sci", "--tenant", "acme", "--hash", hash, "--entry", "app:run", "--data", `{"n": 3}`); code != 0 || !strings.Contains(out, `"v": 6`) {
		t.Errorf("run by hash: exit %d\n%s%s", code, out, errOut)
	}
	// Another tenant cannot name acme's script.
	if _, errOut, code := d.CLI("pool", "run", "sci", "--tenant", "other", "--hash", hash, "--entry", "app:run"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Errorf("another tenant ran acme's script by hash: exit %d, %s", code, errOut)
	}
	logs, _, _ := d.CLI("pool", "logs", "sci")
	if !strings.Contains(logs, "tenant=acme script="+hash) || !strings.Contains(logs, "mounted=true") {
		t.Errorf("pool logs lack the request's line:\n%s", logs)
	}
}

// TestPoolBadInput checks that every bad field gets a 400 naming it, that a Node pool is
// refused with the reason, and that an unknown pool is 404.
func TestPoolBadInput(t *testing.T) {
	d := startDaemon(t, "")
	d.poolUp("p", "")
	ctx := context.Background()
	for _, c := range []struct {
		req  wire.PoolRunRequest
		want string
	}{
		{wire.PoolRunRequest{Tenant: "Bad_Tenant", Source: "x=1"}, "tenant"},
		{wire.PoolRunRequest{Tenant: "a--b", Source: "x=1"}, "tenant"},
		{wire.PoolRunRequest{Tenant: "ok"}, "script"},
		{wire.PoolRunRequest{Tenant: "ok", Script: "abc"}, "script"},
		{wire.PoolRunRequest{Tenant: "ok", Source: "x=1", Entry: "../x:y"}, "entry"},
		{wire.PoolRunRequest{Tenant: "ok", Source: "x=1", Secrets: []string{"a-b"}}, "secrets[0]"},
		{wire.PoolRunRequest{Tenant: "ok", Source: "x=1", Secrets: []string{"NOPE"}}, "secrets"},
	} {
		_, err := d.Client.RunScript(ctx, "p", c.req)
		if !zygo.IsBadRequest(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run %+v: %v; want a 400 naming %s", c.req, err, c.want)
		}
	}
	if _, err := d.Client.RunScript(ctx, "nope", wire.PoolRunRequest{Tenant: "a", Source: "x=1"}); !zygo.IsNotFound(err) {
		t.Errorf("unknown pool: %v; want 404", err)
	}
	_, err := d.Client.PoolUp(ctx, []byte("kind = \"pool\"\nname = \"n\"\nruntime = \"node\"\n"))
	if !zygo.IsBadRequest(err) || !strings.Contains(err.Error(), "Python-only") {
		t.Errorf("a Node pool: %v; want 400 saying pools are Python-only for now", err)
	}
	_, err = d.Client.PoolUp(ctx, []byte("kind = \"pool\"\nname = \"n\"\nisolation = \"vm\"\n"))
	if !zygo.IsBadRequest(err) || !strings.Contains(err.Error(), "isolation") {
		t.Errorf("a bad isolation: %v; want 400 naming isolation", err)
	}
	_, err = d.Client.PoolUp(ctx, []byte("kind = \"pool\"\nname = \"n\"\npreload = [\"os; import x\"]\n"))
	if !zygo.IsBadRequest(err) || !strings.Contains(err.Error(), "preload[0]") {
		t.Errorf("a bad preload: %v; want 400 naming preload[0]", err)
	}
	_, err = d.Client.PoolUp(ctx, []byte("kind = \"pool\"\nname = \"n\"\npreload = [\"no_such_module_zz\"]\n"))
	var ze *zygo.Error
	if !errors.As(err, &ze) || ze.Code != wire.CodeImportFailed || !strings.Contains(ze.Message, "no_such_module_zz") {
		t.Errorf("a preload that fails to import: %v; want 422 import_failed naming it", err)
	}
}

// leakScript is what tenant A runs (it leaves everything it can behind) and tenant B runs
// next (it looks for all of it). It returns what it found.
const leakScript = `
import os, sys, json, signal, glob, string
def handler(event, context):
    found = {}
    if event["mode"] == "plant":
        global PLANTED
        PLANTED = "a-secret"
        string.capwords = lambda *a, **k: "patched"
        sys.modules["tenant_a_module"] = object()
        os.environ["TENANT_A"] = "1"
        open(os.path.join(os.environ["TMPDIR"], "a.txt"), "w").write("a")
        for path in ("/tmp/a.txt", "/dev/shm/a.txt"):
            try:
                open(path, "w").write("a")
                found["wrote " + path] = True
            except OSError as e:
                found["wrote " + path] = e.errno
        for path in ("/tmp/a-dir", "/tmp/a-link"):
            try:
                os.mkdir(path) if path.endswith("dir") else os.symlink("data-of-a", path)
                found["made " + path] = True
            except OSError as e:
                found["made " + path] = e.errno
        return found
    g = globals()
    found["global"] = "PLANTED" in g
    found["json_patched"] = string.capwords("a b") == "patched"
    found["module"] = "tenant_a_module" in sys.modules
    found["env"] = "TENANT_A" in os.environ
    found["tmp"] = sorted(os.listdir("/tmp"))
    found["shm"] = sorted(os.listdir("/dev/shm"))
    try:
        found["req"] = os.listdir("/run/zygo/req")
    except OSError as e:
        found["req"] = e.errno
    scripts = []
    for top in os.listdir("/"):
        if top in ("proc", "sys", "dev", "usr") or os.path.islink("/" + top):
            continue
        for root, dirs, files in os.walk("/" + top):
            scripts += [os.path.join(root, f) for f in files if f == "main.py"]
    found["scripts"] = sorted(scripts)
    me = os.getpid()
    killed = []
    for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        if pid == me:
            continue
        try:
            os.kill(pid, 0)
            killed.append(pid)
        except ProcessLookupError:
            pass
        except PermissionError:
            pass
    found["signalled"] = killed
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            pass
    found["sockets"] = [t for t in fds.values() if t.startswith("socket:")]
    return found
`

// TestPoolTenantIsolation runs tenant A's script that plants globals, a monkeypatch, a module,
// env vars and files everywhere it can, then tenant B's script that looks for all of it, and
// for other tenants' scripts, request dirs, the supervisor socket, and processes it could
// signal: nothing of A's reaches B.
func TestPoolTenantIsolation(t *testing.T) {
	d := startDaemon(t, "")
	d.poolUp("shared", "prefork = 2")
	var planted map[string]any
	d.mustRunScript("shared", "tenant-a", leakScript, map[string]string{"mode": "plant"}, &planted)
	for k, v := range planted {
		if v == true {
			t.Errorf("tenant A could %s in the shared sandbox", k)
		}
	}
	// Tenant A keeps a request running while B looks (a sibling B might signal).
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.runScript("shared", "tenant-a", "import time\ndef handler(e, c):\n    time.sleep(3)\n    return 1\n", nil, nil)
	}()
	time.Sleep(time.Second)
	var found struct {
		Global, JSONPatched, Module, Env bool
		Tmp, Shm, Scripts                []string
		Req                              any
		Signalled                        []int
		Sockets                          []string
	}
	var raw map[string]any
	d.mustRunScript("shared", "tenant-b", leakScript, map[string]string{"mode": "look"}, &raw)
	b, _ := json.Marshal(raw)
	json.Unmarshal(b, &found)
	found.JSONPatched, _ = raw["json_patched"].(bool)
	wg.Wait()
	if found.Global || found.JSONPatched || found.Module || found.Env {
		t.Errorf("tenant B sees tenant A's state: %s", b)
	}
	for _, name := range append(found.Tmp, found.Shm...) {
		if strings.HasPrefix(name, "a") {
			t.Errorf("tenant B sees %q that tenant A left in /tmp or /dev/shm: %s", name, b)
		}
	}
	if _, listed := found.Req.([]any); listed {
		t.Errorf("tenant B lists the request directories: %v", found.Req)
	}
	if len(found.Scripts) != 0 {
		t.Errorf("tenant B found scripts on its filesystem: %v", found.Scripts)
	}
	if len(found.Signalled) != 0 {
		t.Errorf("tenant B could signal pids %v (the zygote, A's request, idle children)", found.Signalled)
	}
	if len(found.Sockets) != 0 {
		t.Errorf("tenant B holds sockets %v (the supervisor's or another child's)", found.Sockets)
	}
}

// TestPoolSecrets gives tenant A a secret: its run is served by A's own zygote (lane
// tenant:tenant-a), which holds the file; a run of tenant B at the same time, in the shared
// zygote, has no /run/secrets at all and cannot reach A's zygote's processes.
func TestPoolSecrets(t *testing.T) {
	d := startDaemon(t, "")
	d.poolUp("s", "")
	if _, errOut, code := d.Process.CLI("s3cr3t-value", time.Minute, "secret", "set", "--tenant", "tenant-a", "DB"); code != 0 {
		t.Fatalf("zygo secret set --tenant: %s", errOut)
	}
	ctx := context.Background()
	src := `import os, time
def handler(event, context):
    time.sleep(event.get("sleep", 0))
    try:
        return {"secret": open("/run/secrets/DB").read(), "files": os.listdir("/run/secrets")}
    except OSError as e:
        return {"err": e.errno}
`
	var wg sync.WaitGroup
	var bOut map[string]any
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(500 * time.Millisecond)
		d.mustRunScript("s", "tenant-b", src, map[string]any{}, &bOut)
	}()
	ev, _ := json.Marshal(map[string]any{"sleep": 2})
	res, err := d.Client.RunScript(ctx, "s", wire.PoolRunRequest{Tenant: "tenant-a", Source: src, Event: ev, Secrets: []string{"DB"}})
	wg.Wait()
	if err != nil {
		t.Fatalf("tenant A's run with a secret: %v\n%s", err, d.Log)
	}
	if res.Lane != "tenant:tenant-a" || !strings.Contains(string(res.Value), `"secret": "s3cr3t-value"`) {
		t.Errorf("tenant A: lane %s, %s; want its own lane and its secret", res.Lane, res.Value)
	}
	if _, has := bOut["secret"]; has {
		t.Errorf("tenant B read a secret during A's request: %v", bOut)
	}
	// Another tenant cannot name A's secret.
	_, err = d.Client.RunScript(ctx, "s", wire.PoolRunRequest{Tenant: "tenant-b", Source: src, Secrets: []string{"DB"}})
	if !zygo.IsBadRequest(err) {
		t.Errorf("tenant B naming DB: %v; want 400 (it is tenant A's)", err)
	}
	p, err := d.Client.Pool(ctx, "s")
	if err != nil || len(p.Lanes) != 2 || p.Lanes[0].HostPID == p.Lanes[1].HostPID {
		t.Errorf("lanes %+v, %v; want the shared zygote and tenant-a's, two processes", p.Lanes, err)
	}
}

// TestPoolTenantLimits: tenant.concurrency = 1 and tenant.queue = 1; three slow runs of one
// tenant at once: one runs, one waits, the third is refused with 429 and Retry-After, while
// another tenant's run goes through meanwhile.
func TestPoolTenantLimits(t *testing.T) {
	d := startDaemon(t, "")
	d.poolUp("f", "[tenant]\nconcurrency = 1\nqueue = 1\n")
	slow := "import time\ndef handler(e, c):\n    time.sleep(2)\n    return 'slow'\n"
	body, _ := json.Marshal(wire.PoolRunRequest{Tenant: "hog", Source: slow})
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", daemon.SocketPath(d.StateDir))
	}}}
	type answer struct {
		status     int
		retryAfter string
	}
	answers := make([]answer, 3)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 300 * time.Millisecond)
			resp, err := hc.Post("http://zygo/v1/pools/f/run", "application/json", strings.NewReader(string(body)))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			answers[i] = answer{resp.StatusCode, resp.Header.Get("Retry-After")}
		}()
	}
	time.Sleep(700 * time.Millisecond)
	var other string
	t0 := time.Now()
	d.mustRunScript("f", "polite", "def handler(e, c):\n    return 'ok'\n", nil, &other)
	otherTook := time.Since(t0)
	wg.Wait()
	refused := 0
	for _, a := range answers {
		if a.status == http.StatusTooManyRequests {
			refused++
			if a.retryAfter == "" {
				t.Error("429 without Retry-After")
			}
		} else if a.status != http.StatusOK {
			t.Errorf("status %d", a.status)
		}
	}
	if refused != 1 {
		t.Errorf("answers %+v; want exactly one 429 (one running, one queued)", answers)
	}
	if other != "ok" {
		t.Errorf("the other tenant got %q", other)
	}
	t.Logf("another tenant's run while the hog held its cap: %v", otherTook)
}

// TestPoolZygotePerTenant: with isolation = "zygote-per-tenant" two tenants' requests run in
// two zygotes with different address layouts (id() of a preloaded module), where a shared
// pool gives them the same.
func TestPoolZygotePerTenant(t *testing.T) {
	d := startDaemon(t, "")
	d.poolUp("iso", "isolation = \"zygote-per-tenant\"\npreload = [\"json\"]\n")
	d.poolUp("sh", "preload = [\"json\"]\n")
	src := "import json\ndef handler(e, c):\n    return id(json)\n"
	addr := func(pool, tenant string) int64 {
		var v int64
		d.mustRunScript(pool, tenant, src, nil, &v)
		return v
	}
	if a, b := addr("sh", "t1"), addr("sh", "t2"); a != b {
		t.Errorf("shared pool: id(json) %x and %x; want the same (one zygote's layout)", a, b)
	}
	r1 := d.mustRunScript("iso", "t1", src, nil, nil)
	r2 := d.mustRunScript("iso", "t2", src, nil, nil)
	if r1.Lane != "tenant:t1" || r2.Lane != "tenant:t2" || string(r1.Value) == string(r2.Value) {
		t.Errorf("per-tenant pool: lanes %s %s, id(json) %s %s; want own lanes and different layouts", r1.Lane, r2.Lane, r1.Value, r2.Value)
	}
}

// TestCheckPools runs the pools auditor on a private daemon: every isolation row passes, the
// shared layout and timing rows are documented, and the exit status is 0.
func TestCheckPools(t *testing.T) {
	requireTools(t)
	out, err := execZygo("check", "pools", "-n", "2").CombinedOutput()
	if err != nil {
		t.Fatalf("zygo check pools: %v\n%s", err, out)
	}
	for _, want := range []string{"secret files of another tenant", "processes it can signal",
		"address layout shared with another tenant (zygote-per-tenant)", "10 pass, 0 fail, 2 documented, 0 missing"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestPoolRestart: a pool and its tenants' scripts survive a daemon restart (its shared
// zygote comes back warm), `zygo up` of a pool directory says to use `zygo pool up`, and
// `zygo pool rm` removes it.
func TestPoolRestart(t *testing.T) {
	d := startDaemon(t, "")
	d.poolUp("keep", `preload = ["json"]`)
	res := d.mustRunScript("keep", "t", "def handler(e, c):\n    return 7\n", nil, nil)
	d.Stop()
	d = startDaemon(t, d.StateDir)
	ctx := context.Background()
	again, err := d.Client.RunScript(ctx, "keep", wire.PoolRunRequest{Tenant: "t", Script: res.Script})
	if err != nil || string(again.Value) != "7" {
		t.Fatalf("after a restart: %v %s\n%s", err, again.Value, d.Log)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "zygo.toml"), []byte("kind = \"pool\"\nname = \"x\"\n"), 0o644)
	if _, errOut, code := d.CLI("up", dir); code == 0 || !strings.Contains(errOut, "zygo pool up") {
		t.Errorf("zygo up of a pool: exit %d, %s", code, errOut)
	}
	if out, errOut, code := d.CLI("pool", "rm", "keep"); code != 0 {
		t.Fatalf("pool rm: %s%s", out, errOut)
	}
	if _, err := d.Client.Pool(ctx, "keep"); !zygo.IsNotFound(err) {
		t.Errorf("after rm: %v; want 404", err)
	}
	if _, err := os.Stat(filepath.Join(d.StateDir, "pools", "keep")); !os.IsNotExist(err) {
		t.Errorf("the pool's files are left after rm: %v", err)
	}
}

// TestPoolList pages through GET /v1/pools with limit and cursor, refuses a bad limit or
// cursor naming it, and runs a script in a strict pool (no exec, no fork).
func TestPoolList(t *testing.T) {
	d := startDaemon(t, "")
	d.poolUp("a1", "")
	d.poolUp("b2", "strict = true")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", daemon.SocketPath(d.StateDir))
	}}}
	get := func(q string) (int, wire.PoolPage, string) {
		resp, err := hc.Get("http://zygo/v1/pools" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var page wire.PoolPage
		var raw json.RawMessage
		json.NewDecoder(resp.Body).Decode(&raw)
		json.Unmarshal(raw, &page)
		return resp.StatusCode, page, string(raw)
	}
	st, p1, _ := get("?limit=1")
	if st != 200 || len(p1.Items) != 1 || p1.Items[0].Name != "a1" || p1.NextCursor == "" {
		t.Fatalf("first page: %d %+v", st, p1)
	}
	st, p2, _ := get("?limit=1&cursor=" + p1.NextCursor)
	if st != 200 || len(p2.Items) != 1 || p2.Items[0].Name != "b2" || p2.NextCursor != "" || !p2.Items[0].Strict {
		t.Fatalf("second page: %d %+v", st, p2)
	}
	for q, field := range map[string]string{"?limit=0": "limit", "?limit=1001": "limit", "?cursor=not!base64": "cursor"} {
		if st, _, raw := get(q); st != 400 || !strings.Contains(raw, field) {
			t.Errorf("GET /v1/pools%s: %d %s; want 400 naming %s", q, st, raw, field)
		}
	}
	var out map[string]any
	d.mustRunScript("b2", "t", `import os, subprocess
def handler(e, c):
    try:
        subprocess.run(["/bin/true"])
        return {"exec": True}
    except OSError as err:
        return {"exec": err.errno}
`, nil, &out)
	if out["exec"] == true {
		t.Errorf("a strict pool's script ran a program: %v", out)
	}
}

// TestPoolEventInlineOrByFile: a pool request's event of at most 32 KiB travels in its go
// (no event.json in its directory), a larger one as event.json; the script sees the same
// document either way (docs/protocol.md, step 4).
func TestPoolEventInlineOrByFile(t *testing.T) {
	d := startDaemon(t, "")
	d.poolUp("ev", "")
	src := `import hashlib, json, os
def handler(event, context):
    reqdir = os.path.dirname(os.environ["TMPDIR"])
    return {"sha": hashlib.sha256(json.dumps(event, sort_keys=True).encode()).hexdigest(),
            "file": os.path.exists(os.path.join(reqdir, "event.json"))}
`
	for _, c := range []struct {
		size int
		file bool
	}{{100, false}, {32 << 10, false}, {32<<10 + 1, true}} {
		pad := strings.Repeat("x", c.size-len(`{"s":""}`))
		event := map[string]string{"s": pad}
		if b, _ := json.Marshal(event); len(b) != c.size {
			t.Fatalf("built %d bytes, want %d", len(b), c.size)
		}
		var got struct {
			SHA  string `json:"sha"`
			File bool   `json:"file"`
		}
		d.mustRunScript("ev", "acme", src, event, &got)
		want := sha256.Sum256([]byte(fmt.Sprintf(`{"s": %q}`, pad)))
		if got.SHA != hex.EncodeToString(want[:]) || got.File != c.file {
			t.Errorf("%d-byte event: the script saw sha %s (want %x), event.json present %v (want %v)",
				c.size, got.SHA, want, got.File, c.file)
		}
	}
}
