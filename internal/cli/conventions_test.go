//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/daemon"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// Usage errors exit 2 and print the usage; runtime errors exit 1 and do not.
func TestExitStatuses(t *testing.T) {
	writeContext(t, "")
	none := tempStateDir(t) // no daemon there
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stderr string // must appear
	}{
		{"unknown command", []string{"bogus"}, 2, `unknown command "bogus" for "zygo"`},
		{"unknown subcommand", []string{"sandbox", "bogus"}, 2, `unknown command "bogus" for "zygo sandbox"`},
		{"unknown flag", []string{"ls", "--bogus"}, 2, "unknown flag: --bogus"},
		{"too many arguments", []string{"ls", "x"}, 2, `unknown command "x" for "zygo ls"`},
		{"missing argument", []string{"logs"}, 2, "accepts 1 arg(s), received 0"},
		{"unknown output format", []string{"ls", "-o", "yaml"}, 2, `"-o, --output" flag: unknown output format "yaml": want table or json`},
		{"a flag that does not parse", []string{"sandbox", "fork", "sb", "-n", "x"}, 2, `"-n, --n" flag`},
		{"token create without --name", []string{"token", "create"}, 2, "--name is required"},
		{"completion of an unknown shell", []string{"completion", "tcsh"}, 2, `invalid argument "tcsh"`},
		{"rollback without a name", []string{"rollback"}, 2, "accepts 1 arg(s), received 0"},
		{"an empty name", []string{"versions", ""}, 2, "argument 1 of zygo versions is empty"},
		{"pool run without --tenant", []string{"pool", "run", "p", "--script", "x.py"}, 2, `required flag(s) "tenant" not set`},
		{"pool run with --script and --hash", []string{"--state-dir", none, "pool", "run", "p", "--tenant", "t", "--script", "x", "--hash", "y"}, 2, "give exactly one"},
		{"logs --since garbage", []string{"--state-dir", none, "logs", "x", "--since", "bogus"}, 2, `--since "bogus"`},
		{"no daemon", []string{"--state-dir", none, "ls"}, 1, "no Zygo daemon answered"},
		{"a missing local file", []string{"--state-dir", none, "sandbox", "files", "put", "sb", filepath.Join(none, "nope"), "/x"}, 1, "no such file or directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, c.args...)
			if code != c.code || !strings.Contains(stderr, c.stderr) {
				t.Errorf("zygo %s: exit %d, stderr %q; want %d and %q", strings.Join(c.args, " "), code, stderr, c.code, c.stderr)
			}
			if usage := strings.Contains(stderr, "Usage:"); usage != (c.code == 2) {
				t.Errorf("zygo %s: exit %d, usage printed: %v", strings.Join(c.args, " "), code, usage)
			}
			if c.code == 1 && c.name != "no daemon" && strings.Contains(stderr, "no Zygo daemon answered") {
				t.Errorf("a local error reported as the daemon's absence: %q", stderr)
			}
		})
	}
}

// zygo version prints the client's build and the daemon's version, or why none answered
// (exit 0 either way); completion prints each shell's script.
func TestVersionAndCompletion(t *testing.T) {
	writeContext(t, "")
	none := tempStateDir(t)
	code, stdout, stderr := runCLI(t, "--state-dir", none, "version", "-o", "json")
	var v versionBody
	if err := json.Unmarshal([]byte(stdout), &v); code != 0 || err != nil || v.Client.Version == "" || v.Client.GoVersion == "" ||
		v.Daemon != "" || !strings.Contains(v.DaemonError, "no Zygo daemon answered") {
		t.Errorf("version -o json without a daemon: exit %d, %q, %q", code, stdout, stderr)
	}
	if code, stdout, _ := runCLI(t, "--state-dir", none, "version"); code != 0 || !strings.Contains(stdout, "Client:") || !strings.Contains(stdout, "Daemon:") {
		t.Errorf("version: exit %d, %q", code, stdout)
	}
	for shell, want := range map[string]string{"bash": "bash completion V2 for zygo", "zsh": "#compdef zygo", "fish": "fish completion for zygo"} {
		if code, stdout, stderr := runCLI(t, "completion", shell); code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("completion %s: exit %d, stderr %q, script starting %.80q", shell, code, stderr, stdout)
		}
	}
}

// -o json and -q on a real daemon's lists and status; version shows the daemon's version.
func TestOutputFormats(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("this test runs a daemon, which needs bwrap on PATH: install it with `apt-get install -y bubblewrap` (or `make deps`)")
	}
	writeContext(t, "")
	dir := tempStateDir(t)
	stop, err := daemon.Background(context.Background(), daemon.Config{StateDir: dir,
		Sandbox: daemon.SandboxConfig{Disabled: true}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stopping the daemon: %v", err)
		}
	}()
	cli := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := runCLI(t, append([]string{"--state-dir", dir}, args...)...)
		if code != 0 {
			t.Fatalf("zygo %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		return stdout
	}
	var st wire.StatusBody
	if err := json.Unmarshal([]byte(cli("status", "-o", "json")), &st); err != nil || st.Version != daemon.Version {
		t.Errorf("status -o json: %+v, %v", st, err)
	}
	var v versionBody
	if err := json.Unmarshal([]byte(cli("version", "-o", "json")), &v); err != nil || v.Daemon != daemon.Version || v.DaemonError != "" {
		t.Errorf("version -o json with a daemon: %+v, %v", v, err)
	}
	for _, name := range []string{"B_KEY", "A_KEY"} {
		code, _, stderr := runCLIWithStdin(t, "v", "--state-dir", dir, "secret", "set", name)
		if code != 0 {
			t.Fatalf("secret set %s: %s", name, stderr)
		}
	}
	if got := cli("secret", "ls", "-q"); got != "A_KEY\nB_KEY\n" {
		t.Errorf("secret ls -q = %q", got)
	}
	var ms []wire.SecretMeta
	if err := json.Unmarshal([]byte(cli("secret", "ls", "-o", "json")), &ms); err != nil || len(ms) != 2 || ms[0].Name != "A_KEY" {
		t.Errorf("secret ls -o json: %+v, %v", ms, err)
	}
	if got := cli("secret", "ls"); !strings.HasPrefix(got, "NAME") || !strings.Contains(got, "B_KEY") {
		t.Errorf("secret ls (table) = %q", got)
	}
	if got := cli("ls", "-q"); got != "" {
		t.Errorf("ls -q of no functions = %q", got)
	}
	if got := strings.TrimSpace(cli("ls", "-o", "json")); got != "[]" && got != "null" && !strings.Contains(got, `"items"`) {
		t.Errorf("ls -o json of no functions = %q", got)
	}
}

// runCLIWithStdin is runCLI with stdin.
func runCLIWithStdin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stdin")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(stdin)
	f.Seek(0, 0)
	old := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = old; f.Close() }()
	return runCLI(t, args...)
}
