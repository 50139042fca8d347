package function

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
)

func TestForbiddenBinds(t *testing.T) {
	m := testManager(0)
	m.cfg.StateDir = "/var/lib/zygo"
	forbidden := m.forbiddenBinds()
	for dir, want := range map[string]string{
		"/":                  "root",
		"/etc":               "host configuration",
		"/etc/ssl":           "host configuration",
		"/proc/1/root":       "host configuration",
		"/run":               "host configuration",
		"/tmp":               "scratch space",
		"/var/tmp":           "scratch space",
		"/tmp/py":            "", // inside scratch space: checkInterpreter's trusted check
		"/var/tmp/venv":      "",
		"/home":              "other users",
		"/var":               "daemon's state", // an ancestor of the state dir
		"/var/lib":           "daemon's state",
		"/var/lib/zygo":      "daemon's state",
		"/var/lib/zygo/run":  "daemon's state",
		"/srv":               "other users",
		"/opt/python3.12":    "",
		"/home/alice/py3.12": "",
		"/var/opt/python":    "",
	} {
		got := forbidden(dir)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("forbidden(%s) = %q, want %q", dir, got, want)
		}
	}
}

func TestCheckInterpreter(t *testing.T) {
	m := testManager(0)
	state := t.TempDir()
	m.cfg.StateDir = state
	script := filepath.Join(state, "script")
	os.WriteFile(script, []byte("#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n"), 0o755)
	plain := filepath.Join(state, "plain")
	os.WriteFile(plain, []byte("\x7fELF"), 0o644)
	elf, err := os.ReadFile("/usr/bin/python3")
	if err != nil {
		t.Fatal("/usr/bin/python3 is needed: apt-get install -y python3")
	}
	inState := filepath.Join(state, "py", "bin", "python3")
	os.MkdirAll(filepath.Dir(inState), 0o755)
	if err := os.WriteFile(inState, elf, 0o755); err != nil {
		t.Fatal(err)
	}
	for interp, want := range map[string]string{
		"/no/such/python": "is not found",
		"/etc":            "is not a regular file",
		plain:             "is not executable",
		script:            "is not an ELF executable",
		inState:           "would bind " + filepath.Join(state, "py") + " into the sandbox, which holds the daemon's state",
	} {
		err := m.checkInterpreter(interp)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "zygo.toml: interpreter: ") ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("checkInterpreter(%s) = %v, want %q", interp, err, want)
		}
	}
	if err := m.checkInterpreter("/usr/bin/python3"); err != nil {
		t.Errorf("/usr/bin/python3: %v", err)
	}
}

// TestCheckInterpreterInScratch: an interpreter under /tmp (a virtual environment) is
// accepted when its bound directory and every ancestor below /tmp are root's (or the
// daemon's) and writable by no one else; otherwise the 400 says why.
func TestCheckInterpreterInScratch(t *testing.T) {
	m := testManager(0)
	m.cfg.StateDir = t.TempDir()
	elf, err := os.ReadFile("/usr/bin/python3")
	if err != nil {
		t.Fatal("/usr/bin/python3 is needed: apt-get install -y python3")
	}
	base, err := os.MkdirTemp("/tmp", "zygo-interp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	mk := func(venv string, mode os.FileMode, uid int) string {
		py := filepath.Join(base, venv, "bin", "python")
		if err := os.MkdirAll(filepath.Dir(py), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(py, elf, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(base, venv), mode)
		if uid >= 0 {
			if err := os.Chown(filepath.Join(base, venv), uid, uid); err != nil {
				t.Fatal(err)
			}
		}
		return py
	}
	if err := m.checkInterpreter(mk("good", 0o755, -1)); err != nil {
		t.Errorf("a venv under /tmp of the daemon's own: %v", err)
	}
	if err := os.Symlink(filepath.Join(base, "good"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	for py, want := range map[string]string{
		filepath.Join(base, "link", "bin", "python"): "link is a symbolic link",
		mk("groupw", 0o775, -1):                      "groupw (mode 775) is writable by its group or others",
		mk("other", 0o755, 4242):                     "other is owned by uid 4242",
	} {
		err := m.checkInterpreter(py)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "zygo.toml: interpreter: ") ||
			!strings.Contains(err.Error(), "from inside /tmp, where anyone may create files") || !strings.Contains(err.Error(), want) {
			t.Errorf("checkInterpreter(%s) = %v, want %q", py, err, want)
		}
	}
}

// TestInterpreterFailedBlamesOnlyANamedInterpreter: a start that fails is the
// manifest's fault (400, naming zygo.toml's interpreter) only when zygo.toml
// named the interpreter; with the runtime's default the error is returned as
// it is (a host or Zygo problem, such as bwrap refusing a mount, is no 400).
func TestInterpreterFailedBlamesOnlyANamedInterpreter(t *testing.T) {
	start := fmt.Errorf("%w: agent exited before ready: bwrap: Can't find source path", errdefs.ErrUnavailable)
	named, err := ParseManifest([]byte("name = \"f\"\nruntime = \"python\"\nhandler = \"main:handler\"\ninterpreter = \"/bin/sh\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := interpreterFailed(named, start); !errdefs.IsInvalidArgument(got) || !strings.Contains(got.Error(), `interpreter: "/bin/sh"`) {
		t.Errorf("named interpreter: got %v, want a 400 naming zygo.toml's interpreter", got)
	}
	defaulted, err := ParseManifest([]byte("name = \"f\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if defaulted.Interpreter != "/usr/bin/python3" {
		t.Fatalf("default interpreter %q", defaulted.Interpreter)
	}
	if got := interpreterFailed(defaulted, start); errdefs.IsInvalidArgument(got) || got.Error() != start.Error() {
		t.Errorf("default interpreter: got %v, want the start's own error", got)
	}
	// A rollback reads the manifest back from the store (JSON): judged as its deploy was.
	b, err := json.Marshal(defaulted)
	if err != nil {
		t.Fatal(err)
	}
	var stored Manifest
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	if got := interpreterFailed(&stored, start); errdefs.IsInvalidArgument(got) {
		t.Errorf("stored manifest under the default interpreter: got a 400: %v", got)
	}
	// zygo.toml naming the default interpreter itself: the host's fault too.
	same, err := ParseManifest([]byte("name = \"f\"\nruntime = \"node\"\nhandler = \"main.js:handler\"\ninterpreter = \"/usr/bin/node\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := interpreterFailed(same, start); errdefs.IsInvalidArgument(got) {
		t.Errorf("zygo.toml naming the default interpreter: got a 400: %v", got)
	}
}
