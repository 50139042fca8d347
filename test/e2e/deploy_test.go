package e2e

import (
	"strings"
	"testing"
)

const versioned = `
VERSION = "%s"
def handler(event, context):
    return VERSION
`

func TestDeployValidatesManifest(t *testing.T) {
	d := startDaemon(t, "")
	cases := []struct {
		manifest, wantKey string
	}{
		{"name = \"a\"\nruntime = \"python\"\nhandler = \"main:handler\"\ncolour = \"red\"\n", `"colour"`},
		{"name = \"a\"\nruntime = \"python\"\nhandler = \"main:handler\"\n[limits]\ntimeout = 5\n", `"limits.timeout"`},
		{"name = \"a\"\nruntime = \"python\"\nhandler = \"main:handler\"\nmode = \"clone\"\n", "mode"},
		{"name = \"a\"\nruntime = \"ruby\"\nhandler = \"main:handler\"\n", "runtime"},
		{"name = \"a\"\nruntime = \"python\"\nhandler = \"main\"\n", "handler"},
		{"name = \"Bad Name\"\nruntime = \"python\"\nhandler = \"main:handler\"\n", "name"},
		{"name = \"a\"\nruntime = \"python\"\nhandler = \"main:handler\"\n[limits]\ntimeout_ms = -1\n", "limits.timeout_ms"},
		{"name = \"a\"\nruntime = \"python\"\nhandler = \"main:handler\"\n[limits]\ntimeout_ms = \"soon\"\n", "timeout_ms"},
		{"name = \"a\"\nruntime = \"python\"\nhandler = \"main:handler\"\n[env]\nTMPDIR = \"/x\"\n", "env.TMPDIR"},
		{"name = \"a\"\nruntime = \"python\"\nhandler = \"main:handler\"\nqueue = 10001\n", "queue: 10001 is outside 0..10000"},
		{"name = \"a\"\nruntime = \"python\"\nhandler = \"main:handler\"\n[limits]\nimport_timeout_ms = 5\n", "limits.import_timeout_ms: 5 is outside"},
	}
	for _, c := range cases {
		dir := writeFunction(t, map[string]string{"zygo.toml": c.manifest, "main.py": "def handler(e, c): return 1\n"})
		_, errOut, code := d.CLI("up", dir)
		if code == 0 || !strings.Contains(errOut, c.wantKey) {
			t.Errorf("manifest %q: exit %d, stderr %q does not name %s", c.manifest, code, errOut, c.wantKey)
		}
	}
	if out, _, _ := d.CLI("ls"); strings.Contains(out, "\na ") {
		t.Errorf("an invalid manifest was deployed:\n%s", out)
	}
}

func TestDeployImportErrorKeepsOldVersion(t *testing.T) {
	d := startDaemon(t, "")
	manifest := "name = \"ver\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"
	// A first deploy that fails has no previous version to keep serving, and says so.
	broken := writeFunction(t, map[string]string{"zygo.toml": manifest, "main.py": "import no_such_module_zygo\n"})
	_, errOut, code := d.CLI("up", broken)
	if code == 0 || !strings.Contains(errOut, "ModuleNotFoundError") || strings.Contains(errOut, "previous version") ||
		!strings.Contains(errOut, "no version of it was deployed") {
		t.Fatalf("broken first deploy: exit %d, stderr %q", code, errOut)
	}
	if out, _, _ := d.CLI("ls"); strings.Contains(out, "\nver ") {
		t.Fatalf("after a failed first deploy, zygo ls lists it:\n%s", out)
	}
	d.Up(writeFunction(t, map[string]string{"zygo.toml": manifest, "main.py": strings.Replace(versioned, "%s", "v1", 1)}))
	var v string
	d.Invoke("ver", map[string]any{}, &v)
	if v != "v1" {
		t.Fatalf("got %q, want v1", v)
	}
	_, errOut, code = d.CLI("up", broken)
	if code == 0 || !strings.Contains(errOut, "ModuleNotFoundError") || !strings.Contains(errOut, "Traceback") ||
		!strings.Contains(errOut, "previous version keeps serving") {
		t.Fatalf("broken deploy: exit %d, stderr %q", code, errOut)
	}
	d.Invoke("ver", map[string]any{}, &v)
	if v != "v1" {
		t.Fatalf("after a failed deploy got %q, want v1 still serving", v)
	}
	// A good new version switches traffic.
	d.Up(writeFunction(t, map[string]string{"zygo.toml": manifest, "main.py": strings.Replace(versioned, "%s", "v2", 1)}))
	d.Invoke("ver", map[string]any{}, &v)
	if v != "v2" {
		t.Fatalf("after deploying v2 got %q", v)
	}
	// Deploying the same content again is a no-op.
	out, _, code := d.CLI("up", writeFunction(t, map[string]string{"zygo.toml": manifest, "main.py": strings.Replace(versioned, "%s", "v2", 1)}))
	if code != 0 || !strings.Contains(out, "already active") {
		t.Fatalf("redeploying the same version: exit %d %q", code, out)
	}
}

func TestRegistrySurvivesRestart(t *testing.T) {
	d := startDaemon(t, "")
	d.Up(fixture("probe"))
	d.Up(fixture("../../../examples/hello"))
	d.Stop()
	d2 := startDaemon(t, d.StateDir)
	var r struct{ Greeting string }
	d2.Invoke("hello", map[string]any{"name": "again"}, &r)
	if r.Greeting != "hello, again" {
		t.Fatalf("after restart: %+v", r)
	}
	out, _, _ := d2.CLI("ls")
	if !strings.Contains(out, "probe") || !strings.Contains(out, "hello") {
		t.Fatalf("after restart zygo ls:\n%s", out)
	}
	d2.Invoke("probe", map[string]any{"action": "rng"}, nil)
}

func TestSpawnModeIsAFreshInterpreter(t *testing.T) {
	d := startDaemon(t, "")
	dir := writeFunction(t, map[string]string{
		"zygo.toml": "name = \"cold\"\nruntime = \"python\"\nhandler = \"main:handler\"\nmode = \"spawn\"\n",
		"main.py":   "import os\nCOUNT = [0]\ndef handler(e, c):\n    COUNT[0] += 1\n    return [COUNT[0], os.getpid(), os.environ['TMPDIR']]\n",
	})
	d.Up(dir)
	var a, b []any
	d.Invoke("cold", map[string]any{}, &a)
	d.Invoke("cold", map[string]any{}, &b)
	if a[0].(float64) != 1 || b[0].(float64) != 1 || a[2] == b[2] {
		t.Fatalf("spawn mode results %v %v", a, b)
	}
}
