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

// TestLeftOutHint: after a failed import, zygo up notes the dependency directories it left out
// by default, unless .zygoignore takes them back.
func TestLeftOutHint(t *testing.T) {
	dir := t.TempDir()
	if got := leftOutHint(dir); got != "" {
		t.Errorf("no such directories: %q", got)
	}
	for _, d := range []string{"node_modules", ".venv"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got := leftOutHint(dir)
	if !strings.Contains(got, "note: node_modules was not uploaded") || !strings.Contains(got, "note: .venv was not uploaded") {
		t.Errorf("hint %q, want notes on node_modules and .venv", got)
	}
	if err := os.WriteFile(filepath.Join(dir, ".zygoignore"), []byte("!node_modules/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := leftOutHint(dir); strings.Contains(got, "node_modules") || !strings.Contains(got, ".venv") {
		t.Errorf("with !node_modules/: hint %q, want .venv only", got)
	}
}
