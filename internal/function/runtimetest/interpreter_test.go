package runtimetest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
)

// scratchVenv makes a virtual environment inside /tmp, root's and writable by
// its owner only (what a deploy accepts), whose bin/python3 is the host's
// python3; it returns the venv's directory and interpreter.
func scratchVenv(t *testing.T) (dir, interp string) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "zvenv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	interp = filepath.Join(dir, "bin", "python3")
	if err := os.Symlink("/usr/bin/python3", interp); err != nil {
		t.Fatal(err)
	}
	return dir, interp
}

// echoCode writes a Python handler into a new directory and returns it with
// the manifest of a function named fn that runs it on interp (extra: more lines).
func echoCode(t *testing.T, interp, extra string) (string, *function.Manifest) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.py"), []byte("def handler(event, context):\n    return event\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	man, err := function.ParseManifest([]byte("name = \"venv\"\nruntime = \"python\"\nhandler = \"main:handler\"\ninterpreter = \"" + interp + "\"\n" + extra + "\n"))
	if err != nil {
		t.Fatalf("manifest: %v", err)
	}
	return dir, man
}

// wantInterpreterRefused fails t unless err is the launcher's refusal of an
// interpreter whose venv dir another user may now write.
func wantInterpreterRefused(t *testing.T, err error, dir string) {
	t.Helper()
	if err == nil {
		t.Fatal("the sandbox started on an interpreter whose directory others may write")
	}
	msg := err.Error()
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(msg, "interpreter") || !strings.Contains(msg, dir) || !strings.Contains(msg, "writable by its group or others") {
		t.Fatalf("the refusal does not name interpreter and %s (writable by others): %v", dir, err)
	}
}

// TestInterpreterCheckedAtEveryStart: an interpreter inside /tmp is vetted on
// every start of a sandbox, not only at deploy: once a directory on its path
// becomes writable by others (a tmp cleaner removed the venv and a local user
// re-created it), a zygote's restart and each spawn are refused, naming the
// interpreter and that directory.
func TestInterpreterCheckedAtEveryStart(t *testing.T) {
	for _, tc := range []struct {
		kind  function.Kind
		extra string
	}{{function.KindFork, ""}, {function.KindSpawn, `mode = "spawn"`}} {
		t.Run(string(tc.kind), func(t *testing.T) {
			venv, interp := scratchVenv(t)
			tg := sandboxTarget(t, function.RuntimePython, tc.kind, tc.extra)
			code, man := echoCode(t, interp, tc.extra)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r := tg.New(t, code, man)
			if _, err := r.Start(ctx); err != nil {
				t.Fatalf("Start on a venv in /tmp that only root may write: %v", err)
			}
			defer r.Stop()
			if err := os.Chmod(venv, 0o777); err != nil {
				t.Fatal(err)
			}
			if tc.kind == function.KindSpawn {
				_, err := r.Run(ctx, function.Call{})
				wantInterpreterRefused(t, err, venv)
			}
			r.Stop()
			restarted := tg.New(t, code, man)
			defer restarted.Stop()
			_, err := restarted.Start(ctx)
			wantInterpreterRefused(t, err, venv)
		})
	}
}
