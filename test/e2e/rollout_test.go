package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
	"github.com/zygo-run/zygo/test/e2eutil"
)

const verManifest = "name = \"ver\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"

func verFunction(t *testing.T, version, extraManifest, preamble string) string {
	return writeFunction(t, map[string]string{"zygo.toml": verManifest + extraManifest,
		"main.py": preamble + strings.Replace(versioned, "%s", version, 1)})
}

func (d *Daemon) answer(name string) string {
	d.t.Helper()
	var v string
	d.Invoke(name, map[string]any{}, &v)
	return v
}

// TestRollbackAndRetention: v1 then v2 deployed; `zygo versions` lists both (v2 active);
// `zygo rollback` makes v1 answer again; bad --to values are refused naming --to; with
// --keep-versions 3, two more deploys remove the oldest version from the list and the disk,
// and `zygo rollback --to PREFIX` goes to a kept one.
func TestRollbackAndRetention(t *testing.T) {
	d := startDaemonArgs(t, "--keep-versions", "3")
	d.Up(verFunction(t, "v1", "", ""))
	d.Up(verFunction(t, "v2", "", ""))
	if got := d.answer("ver"); got != "v2" {
		t.Fatalf("after deploying v2: %q", got)
	}
	ctx := context.Background()
	vs, err := d.Client.FunctionVersions(ctx, "ver")
	if err != nil || len(vs) != 2 || !vs[0].Active || vs[1].Active {
		t.Fatalf("versions %+v, %v; want v2 (active), v1", vs, err)
	}
	v1, v2 := vs[1].Hash, vs[0].Hash
	out, errOut, code := d.CLI("versions", "ver")
	if code != 0 || !strings.Contains(out, v1) || !strings.Contains(out, v2) || strings.Index(out, v2) > strings.Index(out, v1) {
		t.Fatalf("zygo versions: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = d.CLI("rollback", "ver")
	if code != 0 || !strings.Contains(out, "rolled back to "+v1[:19]) {
		t.Fatalf("zygo rollback: exit %d\n%s%s", code, out, errOut)
	}
	if got := d.answer("ver"); got != "v1" {
		t.Fatalf("after the rollback: %q, want v1", got)
	}
	for to, want := range map[string]string{"ffffffffffff": "--to: \"ffffffffffff\" matches no version", "xyz!": "--to: \"xyz!\" is not a version hash"} {
		if _, errOut, code := d.CLI("rollback", "ver", "--to", to); code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("rollback --to %s: exit %d, %q; want %q", to, code, errOut, want)
		}
	}
	_, err = d.Client.RollbackFunction(ctx, "ver", "ffffffffffff", nil)
	if ze := apiError(t, err); ze.Status != 404 {
		t.Errorf("rollback to an unknown hash: %d %v, want 404", ze.Status, err)
	}
	d.Up(verFunction(t, "v3", "", ""))
	d.Up(verFunction(t, "v4", "", ""))
	vdir := func(h string) string {
		return filepath.Join(d.StateDir, "versions", "ver", strings.TrimPrefix(h, "sha256:")[:32])
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		vs, err = d.Client.FunctionVersions(ctx, "ver")
		_, statErr := os.Stat(vdir(v2))
		if err == nil && len(vs) == 3 && errors.Is(statErr, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("versions %+v (%v), v2's dir %v: want 3 left and v2 removed", vs, err, statErr)
		}
	}
	for _, v := range vs {
		if v.Hash == v2 {
			t.Errorf("v2 (the oldest deployed) is still listed: %+v", vs)
		}
	}
	if vs[2].Hash != v1 {
		t.Errorf("oldest kept %s, want v1 (rolled back to after v2)", vs[2].Hash)
	}
	if _, errOut, code := d.CLI("rollback", "ver", "--to", strings.TrimPrefix(v1, "sha256:")[:10]); code != 0 {
		t.Fatalf("rollback --to a prefix of v1: %s", errOut)
	}
	if got := d.answer("ver"); got != "v1" {
		t.Errorf("after rollback --to v1: %q", got)
	}
}

// TestQueueFullIs429: with concurrency 1 and queue 1, of three requests at once to a slow
// handler one runs, one waits and one is refused with 429 too_many_requests and a
// Retry-After; `zygo invoke -n 3 -c 3` counts that refusal apart from failures.
func TestQueueFullIs429(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(writeFunction(t, map[string]string{
		"zygo.toml": "name = \"slow\"\nruntime = \"python\"\nhandler = \"main:handler\"\nconcurrency = 1\nqueue = 1\n",
		"main.py":   "import time\ndef handler(event, context):\n    time.sleep(3)\n    return 'done'\n",
	}))
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = d.TryInvoke("slow", map[string]any{}) }()
	}
	wg.Wait()
	refused := 0
	for _, err := range errs {
		if err == nil {
			continue
		}
		var ze *zygo.Error
		if !errors.As(err, &ze) || ze.Status != 429 || ze.Code != wire.CodeTooManyRequests || ze.RetryAfter < time.Second ||
			!strings.Contains(ze.Message, `function "slow" is at its concurrency (1) and its queue (1) is full; retry after`) {
			t.Fatalf("a request failed otherwise: %v (%+v)", err, ze)
		}
		refused++
	}
	if refused != 1 {
		t.Fatalf("%d of 3 requests refused, want 1: %v", refused, errs)
	}
	_, errOut, code := d.CLI("invoke", "slow", "-n", "3", "-c", "3")
	if code == 0 || !strings.Contains(errOut, "3 requests, 0 failed, 1 refused (429)") ||
		!strings.Contains(errOut, "its queue (1) is full; retry after") {
		t.Errorf("zygo invoke -n 3 -c 3: exit %d\n%s", code, errOut)
	}
}

// TestSlowFirstDeployAndImportTimeout: a first deploy whose import takes 20 s streams its
// steps, is listed as deploying meanwhile, and an invoke during it gets 503 "still
// deploying" (its timeout_ms is shorter than the import), never 404; once ready it serves.
// A later version whose import exceeds import_timeout_ms fails naming it, and the previous
// version keeps serving.
func TestSlowFirstDeployAndImportTimeout(t *testing.T) {
	d := startDaemon(t, "")
	dir := verFunction(t, "v1", "[limits]\ntimeout_ms = 2000\n", "import time\ntime.sleep(20)\n")
	var mu sync.Mutex
	var steps []string
	done := make(chan error, 1)
	go func() {
		_, err := d.Client.DeployDirStream(context.Background(), dir, func(ev wire.DeployEvent) {
			mu.Lock()
			steps = append(steps, ev.Step)
			mu.Unlock()
		})
		done <- err
	}()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if out, _, _ := d.CLI("ls"); strings.Contains(out, "deploying") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("zygo ls never showed the function as deploying")
		}
	}
	_, err := d.TryInvoke("ver", map[string]any{})
	if ze := apiError(t, err); ze.Status != 503 || !strings.Contains(ze.Message, `function "ver" is still deploying`) {
		t.Errorf("invoke during the first deploy: %d %q, want 503 still deploying", ze.Status, ze.Message)
	}
	if err := <-done; err != nil {
		t.Fatalf("the slow deploy: %v", err)
	}
	mu.Lock()
	if got := strings.Join(steps, " "); got != "uploading unpacking importing warmup ready" {
		t.Errorf("steps %q", got)
	}
	mu.Unlock()
	if got := d.answer("ver"); got != "v1" {
		t.Fatalf("after the slow deploy: %q", got)
	}
	slow := verFunction(t, "v2", "[limits]\nimport_timeout_ms = 1500\n", "import time\ntime.sleep(30)\n")
	_, errOut, code := d.CLI("up", slow)
	if code == 0 || !strings.Contains(errOut, "limits.import_timeout_ms=1500") || !strings.Contains(errOut, "previous version keeps serving") {
		t.Fatalf("deploy over import_timeout_ms: exit %d, %q", code, errOut)
	}
	if got := d.answer("ver"); got != "v1" {
		t.Errorf("after the timed-out deploy: %q, want v1", got)
	}
}

// TestUpCtrlCCancels: SIGINT to `zygo up` during a slow import cancels the deploy on the
// daemon (the new sandbox is stopped: its run directory goes), the CLI says which version
// still serves, and it does.
func TestUpCtrlCCancels(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(verFunction(t, "v1", "", ""))
	runDirs := func() int { es, _ := os.ReadDir(filepath.Join(d.StateDir, "run")); return len(es) }
	before := runDirs()
	cmd := exec.Command(zygoBin, "--state-dir", d.StateDir, "up", verFunction(t, "v2", "", "import time\ntime.sleep(60)\n"))
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr := &e2eutil.LockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(stderr.String(), "ver: importing"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no importing step: %q", stderr.String())
		}
	}
	time.Sleep(time.Second) // the sandbox is up and importing
	_ = cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(stderr.String(), `deploy cancelled; "ver" still serves version sha256:`) {
		t.Fatalf("zygo up after Ctrl-C: %v\n%s", err, stderr.String())
	}
	if got := d.answer("ver"); got != "v1" {
		t.Errorf("after the cancelled deploy: %q, want v1", got)
	}
	for deadline := time.Now().Add(30 * time.Second); runDirs() > before; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d run directories left, %d before the cancelled deploy", runDirs(), before)
		}
	}
	if vs, err := d.Client.FunctionVersions(context.Background(), "ver"); err != nil || len(vs) != 1 {
		t.Errorf("versions after the cancelled deploy: %+v, %v; want v1 only", vs, err)
	}
}
