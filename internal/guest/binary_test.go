package guest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindBinary: a missing guest names how to build it, a dynamically linked one is refused,
// and a static one is returned as an absolute path.
func TestFindBinary(t *testing.T) {
	if _, err := FindBinary("/nonexistent/zygo-guest", "zygo serve --guest-binary"); err == nil ||
		!strings.Contains(err.Error(), "make build") || !strings.Contains(err.Error(), "zygo serve --guest-binary PATH") {
		t.Errorf("missing guest: %v", err)
	}
	// /bin/sh is dynamically linked on every host we run on: not usable as PID 1 of a sandbox.
	if _, err := FindBinary("/bin/sh", "--guest-binary"); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("dynamic guest: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, BinaryName)
	build := exec.Command("go", "build", "-o", bin, "github.com/zygo-run/zygo/cmd/zygo-guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building zygo-guest: %v\n%s", err, out)
	}
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chdir(wd) })
	got, err := FindBinary(BinaryName, "--guest-binary")
	if err != nil || got != bin {
		t.Errorf("FindBinary(relative static) = %q, %v; want %q", got, err, bin)
	}
}
