package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFunctionDir: zygo up takes the function's directory, or its zygo.toml standing for
// it; no argument means the current directory; anything else says to give the directory.
func TestFunctionDir(t *testing.T) {
	fn := t.TempDir()
	manifest := filepath.Join(fn, "zygo.toml")
	if err := os.WriteFile(manifest, []byte("name = \"x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	main := filepath.Join(fn, "main.py")
	if err := os.WriteFile(main, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{fn, manifest} {
		if dir, err := functionDir(arg); err != nil || dir != fn {
			t.Errorf("functionDir(%s) = %q, %v; want %s", arg, dir, err, fn)
		}
	}
	for _, arg := range []string{main, t.TempDir()} {
		if _, err := functionDir(arg); err == nil || !strings.Contains(err.Error(), "give the function's directory") {
			t.Errorf("functionDir(%s) = %v, want an error saying to give the function's directory", arg, err)
		}
	}
	// No argument: the current directory. The daemon is not reached (nothing answers on
	// this state dir), so the error is the unreachable one, not a usage error.
	t.Chdir(fn)
	code, _, stderr := runCLI(t, "--state-dir", t.TempDir(), "up")
	if code != 1 || !strings.Contains(stderr, "no Zygo daemon answered") {
		t.Errorf("zygo up in a function directory: exit %d, %q", code, stderr)
	}
}
