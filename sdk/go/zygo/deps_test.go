package zygo

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// goTool runs the go command in the SDK module's root with env added and returns its output.
func goTool(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = ".." // sdk/go, the module's root
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The SDK is importable anywhere: every package it (and its tests) depend on is the standard
// library's or its own.
func TestSDKDependsOnStandardLibraryOnly(t *testing.T) {
	const own = "github.com/zygo-run/zygo/sdk/go"
	out := goTool(t, nil, "list", "-deps", "-test", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...")
	var pkgs int
	for _, p := range strings.Fields(out) {
		pkgs++
		// A test variant reads "pkg [pkg.test]"; Fields splits it, and both halves are ours.
		p = strings.Trim(p, "[]")
		if p != own && !strings.HasPrefix(p, own+"/") {
			t.Errorf("the SDK depends on %s, outside the standard library", p)
		}
	}
	if pkgs == 0 {
		t.Fatal("go list listed none of the SDK's own packages")
	}
}

// The SDK builds for the systems a caller may run on.
func TestSDKBuildsForDarwinAndWindows(t *testing.T) {
	for _, goos := range []string{"darwin", "windows"} {
		goTool(t, []string{"GOOS=" + goos, "GOARCH=amd64", "CGO_ENABLED=0"}, "build", "./...")
	}
}
