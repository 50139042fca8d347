package cli

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// goCmd runs the go command at the repository's root with env added and returns its output.
func goCmd(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s go %s: %v\n%s", strings.Join(env, " "), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The CLI is a client on macOS and Windows (a laptop driving a remote daemon): it builds
// there, and among Zygo's packages it needs only the SDK, errdefs and secret's name rules,
// never the daemon's.
func TestCLIBuildsForDarwinAndWindows(t *testing.T) {
	allowed := map[string]bool{
		"github.com/zygo-run/zygo/cmd/zygo": true, "github.com/zygo-run/zygo/internal/cli": true,
		"github.com/zygo-run/zygo/internal/errdefs": true, "github.com/zygo-run/zygo/internal/secret": true,
	}
	for _, goos := range []string{"darwin", "windows"} {
		env := []string{"GOOS=" + goos, "GOARCH=amd64", "CGO_ENABLED=0"}
		goCmd(t, env, "build", "-o", os.DevNull, "./cmd/zygo")
		out := goCmd(t, env, "list", "-deps", "-f", "{{.ImportPath}}", "./cmd/zygo")
		for _, p := range strings.Fields(out) {
			if strings.HasPrefix(p, "github.com/zygo-run/zygo/") && !allowed[p] &&
				!strings.HasPrefix(p, "github.com/zygo-run/zygo/sdk/go/") {
				t.Errorf("GOOS=%s: the CLI depends on %s, a daemon package", goos, p)
			}
		}
	}
}
